"""Security headers on every response; requests with a NUL character refused."""

from __future__ import annotations

from collections.abc import Iterable

from flask import Flask, Response, abort, request

from webapp.config import settings
from webapp.database import text_problem

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors {ancestors}"
)


def install_headers(app: Flask) -> None:
    """The security headers. Framing: refused everywhere (CSP `frame-ancestors 'none'` and
    X-Frame-Options DENY for browsers without CSP 2), unless SCHEDULER_FRAME_ANCESTORS names
    the origins that may frame the panel: then CSP names them and X-Frame-Options, which can
    name no origin, is left out (a browser that reads CSP ignores it anyway)."""
    ancestors = settings(app).SCHEDULER_FRAME_ANCESTORS
    policy = CONTENT_SECURITY_POLICY.format(ancestors=" ".join(ancestors) or "'none'")

    @app.after_request
    def add_security_headers(response: Response) -> Response:
        response.headers.setdefault("Content-Security-Policy", policy)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if not ancestors:
            response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response


UNSTORABLE_MESSAGE = "The request contains a NUL character or other text that cannot be stored."


def unstorable(values: Iterable[tuple[str, str]]) -> bool:
    return any(text_problem(key) or text_problem(value) for key, value in values)


def install_request_guard(app: Flask) -> None:
    """Refuses (400) any request whose path, query or form holds text the database cannot store
    (database.text_problem: a NUL character, a lone surrogate), before a view or the login
    limiter can hand it to the database: psycopg raises DataError (a 500) for a NUL, even for an
    anonymous login attempt."""

    @app.before_request
    def refuse_unstorable_text() -> None:
        if (
            text_problem(request.path)
            or unstorable(request.args.items(multi=True))
            or unstorable(request.form.items(multi=True))
        ):
            abort(400, description=UNSTORABLE_MESSAGE)
