"""Response helpers shared by the panel's blueprints: page or partial, and write outcomes."""

from __future__ import annotations

from typing import Any

from flask import flash, make_response, redirect, render_template
from flask_login import current_user
from werkzeug.wrappers import Response

from webapp.services.audit import Actor
from webapp.web.formatting import is_htmx


def actor() -> Actor:
    return Actor.for_user(current_user._get_current_object())


def page_or_partial(page: str, partial: str, status: int = 200, **context: Any) -> Response:
    """The full page, or for htmx the partial that the page includes (the same template file)."""
    response = make_response(render_template(partial if is_htmx() else page, **context), status)
    response.headers.add("Vary", "HX-Request")
    return response


def done(message: str, target: str, partial: str | None = None, **context: Any) -> Response:
    """A write succeeded: htmx gets the updated partial and the message out of band; a plain
    form post gets the message flashed and a 303 to `target`."""
    if not is_htmx():
        flash(message, "success")
        return redirect(target, 303)
    html = render_template(partial, **context) if partial else ""
    html += render_template("_flash_oob.html", message=message, category="success")
    response = make_response(html)
    response.headers.add("Vary", "HX-Request")
    return response


def htmx_redirect(message: str, target: str) -> Response:
    """After an htmx form post that leaves the page: the browser loads `target`."""
    flash(message, "success")
    if not is_htmx():
        return redirect(target, 303)
    response = make_response("", 200)
    response.headers["HX-Redirect"] = target
    return response
