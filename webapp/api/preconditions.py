"""What a client can make a request depend on: `If-Match` (the schedule's ETag) on PATCH and
DELETE, `If-None-Match` on GET (304 when unchanged), and `Idempotency-Key` on POSTs."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Response, request

from webapp.api.auth import current_token
from webapp.api.problems import Problem
from webapp.database import utcnow
from webapp.models import Schedule
from webapp.services import idempotency
from webapp.services.audit import schedule_version

F = TypeVar("F", bound=Callable[..., Response])
MAX_KEY = 200


def etag(schedule: Schedule) -> str:
    return quoted(schedule_version(schedule))


def quoted(version: str) -> str:
    """A version digest as an entity tag."""
    return f'"{version}"'


def listed_tags(header: str, strong: bool = False) -> set[str]:
    """The entity tags of an If-None-Match header, compared weakly (RFC 9110 13.1.2), or with
    `strong` those of an If-Match, compared strongly (13.1.1): a weak tag matches nothing."""
    tags = {tag.strip() for tag in header.split(",")}
    if strong:
        return {tag for tag in tags if not tag.startswith("W/")}
    return {tag.removeprefix("W/") for tag in tags}


def not_modified(tag: str) -> bool:
    """Whether the request's If-None-Match names `tag` (or `*`): a GET answers 304."""
    header = request.headers.get("If-None-Match")
    if header is None:
        return False
    wanted = listed_tags(header)
    return "*" in wanted or tag in wanted


def if_match(
    tag_of: Callable[[Any], str] = etag, what: str = "schedule"
) -> Callable[[Any], None] | None:
    """The request's If-Match as a precondition of the change (None without the header):
    412 when the object (a schedule; a calendar with its `tag_of`) changed since the client
    read it."""
    header = request.headers.get("If-Match")
    if header is None:
        return None
    wanted = listed_tags(header, strong=True)

    def unchanged(changing: Any) -> None:
        if "*" not in wanted and tag_of(changing) not in wanted:
            raise Problem(
                412,
                "precondition-failed",
                f"the {what} changed since it was read: GET it again (a new ETag) and retry",
            )

    return unchanged


def idempotent(view: F) -> F:
    """With an `Idempotency-Key` header, a retry of the POST answers as the first one did."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Response:
        key = request.headers.get("Idempotency-Key")
        if key is None:
            return view(*args, **kwargs)
        if not 1 <= len(key) <= MAX_KEY or not all(" " <= c <= "~" for c in key):
            raise Problem.invalid(
                {"Idempotency-Key": f"must be 1 to {MAX_KEY} printable ASCII characters"},
                status=400,
            )
        digest = hashlib.sha256(f"{request.method} {request.path}\n".encode())
        digest.update(request.get_data(cache=True))
        outcome = idempotency.claim(current_token().id, key, digest.hexdigest(), utcnow())
        if isinstance(outcome, idempotency.Mismatch):
            raise Problem(
                422,
                "idempotency-conflict",
                "this Idempotency-Key was used for another request: use a new key",
            )
        if isinstance(outcome, idempotency.InProgress):
            raise Problem(409, "idempotency-conflict", "a request with this key is in progress")
        if isinstance(outcome, idempotency.Stored):
            replay = Response(outcome.body, outcome.status, mimetype="application/json")
            if outcome.location:
                replay.headers["Location"] = outcome.location
            if outcome.etag:
                replay.headers["ETag"] = outcome.etag
            replay.headers["Idempotent-Replayed"] = "true"
            return replay
        try:
            response = view(*args, **kwargs)
        except BaseException:
            idempotency.release(outcome)
            raise
        if 200 <= response.status_code < 300:
            body = response.get_data(as_text=True)
            idempotency.complete(
                outcome, response.status_code, body, response.location, response.headers.get("ETag")
            )
        else:
            idempotency.release(outcome)
        return response

    return wrapper  # type: ignore[return-value]
