// The panel's only script: htmx sends the CSRF token of the page's <meta> with every write.
// (No inline scripts anywhere: the Content-Security-Policy is script-src 'self'.)
document.addEventListener("htmx:config:request", (event) => {
  const method = (event.detail.ctx.request.method || "GET").toUpperCase();
  if (method === "GET" || method === "HEAD") return;
  const meta = document.querySelector('meta[name="csrf-token"]');
  if (meta) event.detail.ctx.request.headers["X-CSRFToken"] = meta.content;
});
