// The panel's only script: htmx sends the CSRF token of the page's <meta> with every write, and
// live filter forms lose their button (below). (No inline scripts anywhere: the
// Content-Security-Policy is script-src 'self'.)
document.addEventListener("htmx:config:request", (event) => {
  const method = (event.detail.ctx.request.method || "GET").toUpperCase();
  if (method === "GET" || method === "HEAD") return;
  const meta = document.querySelector('meta[name="csrf-token"]');
  if (meta) event.detail.ctx.request.headers["X-CSRFToken"] = meta.content;
});

// A filter form that updates its list as its fields change (class live-filters) needs no
// button: hidden once this script runs, it stays for a browser without JavaScript.
for (const button of document.querySelectorAll(".live-filters .filter-submit")) {
  button.hidden = true;
}
