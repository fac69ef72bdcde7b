"""Who is asking, and what of the tenant's data they may see: the API's one scoping helper.

Every request but the OpenAPI document and its reference page carries `Authorization: Bearer
<token>`; the session cookie is never looked at, so a browser's login cannot be used against
the API (and the API needs no CSRF token). A token acts for its tenant only: other tenants' ids
answer 404, as the panel does, and a `read` token's writes answer 403.
"""

from __future__ import annotations

from flask import g, request
from sqlalchemy import Select

from webapp.api.problems import Problem
from webapp.calendar_models import Calendar
from webapp.config import settings
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import ApiToken, Run, Schedule
from webapp.services import scope, tokens
from webapp.services.audit import Actor

CHALLENGE = {"WWW-Authenticate": 'Bearer realm="api"'}


def authenticate() -> ApiToken:
    """The request's token, or 401: missing, malformed, unknown, revoked and expired alike."""
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Problem(401, "unauthorized", "send Authorization: Bearer <token>", headers=CHALLENGE)
    now = utcnow()
    token = tokens.authenticate(secret.strip(), now)
    if token is None:
        raise Problem(
            401,
            "unauthorized",
            "the token is unknown, revoked or expired",
            headers={"WWW-Authenticate": 'Bearer realm="api", error="invalid_token"'},
        )
    limit = settings().SCHEDULER_API_RATE_LIMIT
    wait = tokens.count_request(token, now, limit)
    if wait is not None:
        raise Problem(
            429,
            "rate-limited",
            f"more than {limit} requests this minute with this token: retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )
    g.api_token = token
    return token


def current_token() -> ApiToken:
    token: ApiToken = g.api_token
    return token


def actor() -> Actor:
    return Actor.for_token(current_token())


def require_write() -> None:
    """403 for a `read` token."""
    if current_token().scope != "write":
        raise Problem(403, "forbidden", "this token's scope is read: it cannot change anything")


def schedules() -> Select[Schedule]:
    """The token's tenant's schedules (tenant scope only: system schedules are the operator's)."""
    return scope.schedules(current_token().tenant_id)


def calendars() -> Select[Calendar]:
    return scope.calendars(current_token().tenant_id)


def runs() -> Select[Run]:
    return scope.runs(current_token().tenant_id)


def schedule_or_404(schedule_id: int) -> Schedule:
    schedule = db.session.scalar(schedules().where(Schedule.id == schedule_id))
    if schedule is None:
        raise Problem(404, "not-found", f"this tenant has no schedule {schedule_id}")
    return schedule


def writable_schedule_or_404(schedule_id: int) -> Schedule:
    """A schedule the token may change: 404 for another tenant's id, then 403 for `read`."""
    schedule = schedule_or_404(schedule_id)
    require_write()
    return schedule


def run_or_404(run_id: int) -> Run:
    run = db.session.scalar(runs().where(Run.id == run_id))
    if run is None:
        raise Problem(404, "not-found", f"this tenant has no run {run_id}")
    return run


def writable_run_or_404(run_id: int) -> Run:
    """A run the token may cancel: 404 for another tenant's id, then 403 for `read`."""
    run = run_or_404(run_id)
    require_write()
    return run
