"""Errors as RFC 9457 problem details: `application/problem+json` with a per-field list.

Every error of the API, ours or Flask's (404, 405, 413, a NUL in the URL), answers with one
body of this shape, never an HTML page:

    {"type": "/api/docs#problem-validation", "title": "Invalid input", "status": 422,
     "detail": "cron: ...", "errors": [{"field": "cron", "message": "..."}]}
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus

from flask import Response, json
from werkzeug.exceptions import HTTPException

MEDIA_TYPE = "application/problem+json"
# The problem types that say more than their status; the reference page explains each.
TYPES = {
    "validation": "Invalid input",
    "malformed": "Malformed request",
    "unauthorized": "Not authenticated",
    "forbidden": "Not allowed",
    "not-found": "Not found",
    "precondition-failed": "Changed since read",
    "idempotency-conflict": "Idempotency key reused",
    "rate-limited": "Too many requests",
    "not-cancellable": "Already finished",
    "phrase-not-understood": "Phrase not understood",
    "calendar-in-use": "Calendar in use",
    "conflict": "Already exists",
    "tenant-not-empty": "Tenant not empty",
}


class Problem(Exception):
    """An error answer of the API: raise it anywhere in a view."""

    def __init__(
        self,
        status: int,
        kind: str | None = None,
        detail: str = "",
        errors: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        examples: list[str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.errors = dict(errors or {})
        self.headers = dict(headers or {})
        self.examples = examples

    @classmethod
    def invalid(cls, errors: Mapping[str, str], status: int = 422) -> Problem:
        """Bad input, one message per field (`cron`, `args.url`, `limit`)."""
        detail = "; ".join(f"{field}: {message}" for field, message in errors.items())
        kind = "validation" if status == 422 else "malformed"
        return cls(status, kind, detail, errors)

    def response(self) -> Response:
        title = TYPES.get(self.kind or "") or status_phrase(self.status)
        body: dict[str, object] = {
            "type": f"/api/docs#problem-{self.kind}" if self.kind else "about:blank",
            "title": title,
            "status": self.status,
            "detail": self.detail or title,
        }
        if self.errors:
            body["errors"] = [{"field": f, "message": m} for f, m in self.errors.items()]
        if self.examples:
            body["examples"] = self.examples
        response = Response(json.dumps(body), self.status, mimetype=MEDIA_TYPE)
        response.headers.update(self.headers)
        return response


def status_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def from_http_exception(error: HTTPException) -> Problem:
    """Flask's and Werkzeug's errors (404, 405, 413, a NUL character...) as problem details."""
    status = error.code or 500
    kinds = {401: "unauthorized", 403: "forbidden", 404: "not-found"}
    headers = {}
    if status == 405 and error.get_headers():
        headers = {k: v for k, v in error.get_headers() if k == "Allow"}
    return Problem(status, kinds.get(status), error.description or "", headers=headers)
