// The API reference page (/api/docs): Swagger UI (static/vendor) renders the OpenAPI document
// named by data-openapi-url and, once it has, replaces the server-rendered reference, which
// stays as the page's content without JavaScript or when the renderer fails.
// (No inline scripts anywhere: the Content-Security-Policy is script-src 'self'.)
(() => {
  const reference = document.getElementById("api-reference");
  if (!reference || typeof window.SwaggerUIBundle !== "function") return;
  const renderer = document.createElement("div");
  renderer.className = "api-renderer card";
  renderer.hidden = true;
  reference.before(renderer);
  window.SwaggerUIBundle({
    url: reference.dataset.openapiUrl,
    domNode: renderer,
    validatorUrl: null, // the default asks validator.swagger.io: outside img-src 'self'
    onComplete: () => {
      reference.remove();
      // Swagger UI's server menu has no label (axe: select-name); React leaves this one alone.
      renderer.querySelector("select#servers")?.setAttribute("aria-label", "Server");
      renderer.hidden = false;
      // The problem types' anchors (/api/docs#problem-...) moved when the reference went.
      if (window.location.hash) document.getElementById(window.location.hash.slice(1))?.scrollIntoView();
    },
  });
})();
