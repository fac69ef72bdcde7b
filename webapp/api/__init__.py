"""The tenant REST API under /api/v1: bearer tokens, JSON, problem details, OpenAPI.

`install(app)` registers the blueprint, exempts it (and only it) from the panel's CSRF check,
since it never reads the session cookie, and makes every error under /api/ a problem details
document, including those Flask raises before a view is chosen (an unknown URL, a method the
URL does not take)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask, request
from werkzeug.exceptions import HTTPException

from webapp.api import (
    admin_sign_in,
    admin_tenants,
    admin_tokens,
    admin_users,
    calendars,
    views,
)
from webapp.api.problems import from_http_exception
from webapp.extensions import csrf


def install(app: Flask) -> None:
    bp = views.bp
    # The calendar and operator endpoints are on the API's blueprint.
    assert all(
        m.bp is bp for m in (calendars, admin_tenants, admin_users, admin_tokens, admin_sign_in)
    )
    csrf.exempt(bp)
    app.register_blueprint(bp)
    # No rule matched (404, 405), or the app's request guard refused the request before a
    # view was chosen (400: a NUL in the path; 413): the blueprint's handlers are not asked,
    # the app's are, and the panel's render HTML. Under /api/ they answer problem details.
    for status in (400, 404, 405, 413):
        previous = next(iter(app.error_handler_spec[None][status].values()), None)
        app.register_error_handler(status, under_api(previous))


def under_api(
    previous: Callable[[HTTPException], Any] | None,
) -> Callable[[HTTPException], Any]:
    """A handler of the status: problem details under /api/, else the panel's (or Flask's)."""

    def handle(error: HTTPException) -> Any:
        if request.path == "/api" or request.path.startswith("/api/"):
            return from_http_exception(error).response()
        return previous(error) if previous else error

    return handle
