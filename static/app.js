// The panel's only script: htmx sends the CSRF token of the page's <meta> with every write, live
// filter forms lose their button, the header's account menu closes on Escape or a click outside,
// and a phone's navigation shows the current page's link (below). Everything works without it.
// (No inline scripts anywhere: the Content-Security-Policy is script-src 'self'.)
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

// The account menu (a <details>) closes on Escape, focus back on its summary, and on a click
// outside it.
document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape") return;
  for (const menu of document.querySelectorAll("details.account[open]")) {
    const hadFocus = menu.contains(document.activeElement);
    menu.open = false;
    if (hadFocus) menu.querySelector("summary").focus();
  }
});
document.addEventListener("click", (event) => {
  for (const menu of document.querySelectorAll("details.account[open]")) {
    if (!menu.contains(event.target)) menu.open = false;
  }
});

// On a phone the main navigation scrolls sideways: the current page's link is brought into it
// (scrolling the navigation only, never the page).
const current = document.querySelector(".mainnav [aria-current='page']");
if (current) {
  const nav = current.parentElement;
  const beyond = current.getBoundingClientRect().right - nav.getBoundingClientRect().right;
  if (beyond > 0) nav.scrollLeft += beyond + 24;
}
