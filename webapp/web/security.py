"""Security headers on every response; requests with a NUL character refused."""

from __future__ import annotations

from collections.abc import Iterable

from flask import Flask, Response, abort, request

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def install_headers(app: Flask) -> None:
    @app.after_request
    def add_security_headers(response: Response) -> Response:
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response


NUL_MESSAGE = "The request contains a NUL character."


def contains_nul(values: Iterable[tuple[str, str]]) -> bool:
    return any("\x00" in key or "\x00" in value for key, value in values)


def install_request_guard(app: Flask) -> None:
    """Refuses (400) any request with a NUL character in its path, query or form, before a view
    or the login limiter can hand it to the database: PostgreSQL text cannot hold NUL, and
    psycopg raises DataError (a 500) for it, even for an anonymous login attempt."""

    @app.before_request
    def refuse_nul_characters() -> None:
        if (
            "\x00" in request.path
            or contains_nul(request.args.items(multi=True))
            or contains_nul(request.form.items(multi=True))
        ):
            abort(400, description=NUL_MESSAGE)
