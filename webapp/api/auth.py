"""Who is asking, and what of the tenant's data they may see: the API's one scoping helper.

Every request but the OpenAPI document and its reference page carries `Authorization: Bearer
<token>`; the session cookie is never looked at, so a browser's login cannot be used against
the API (and the API needs no CSRF token). A tenant's token acts for its tenant only: other
tenants' ids answer 404, as the panel does, and a `read` token's writes answer 403.

The operator API under /api/v1/admin/ takes operator tokens only, and the tenant endpoints take
tenants' tokens only: each refuses the other kind with 403. An operator token never reads a
tenant's data through the tenant endpoints; the operator API names the tenant in its URLs (and
can make a token of the tenant for whatever else is needed).
"""

from __future__ import annotations

from flask import g, request
from sqlalchemy import Select

from webapp.api.problems import Problem
from webapp.calendar_models import Calendar
from webapp.config import settings
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Run, Schedule, Tenant
from webapp.services import scope, tokens
from webapp.services.audit import Actor
from webapp.token_models import ApiToken

CHALLENGE = {"WWW-Authenticate": 'Bearer realm="api"'}
OPERATOR_PREFIX = "/api/v1/admin/"
WRONG_KIND = {
    "operator": "this is the operator API: it takes an operator token (flask token create "
    "--operator), never a tenant's token",
    "tenant": "an operator token cannot use the tenant endpoints, which would not say whose "
    "data they read: use the operator API under /api/v1/admin/ (it names the tenant), or a "
    "token of the tenant (POST /api/v1/admin/tenants/{slug}/tokens)",
}


def operator_area() -> bool:
    """Whether the request is for the operator API (an operator token's only place)."""
    rule = request.url_rule
    return rule is not None and rule.rule.startswith(OPERATOR_PREFIX)


def authenticate() -> ApiToken:
    """The request's token, or 401: missing, malformed, unknown, revoked and expired alike;
    403 for a token of the other kind (an operator's on the tenant endpoints, a tenant's on
    the operator API)."""
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
    wanted = "operator" if operator_area() else "tenant"
    if token.kind != wanted:
        raise Problem(403, "forbidden", WRONG_KIND[wanted])
    g.api_token = token
    return token


def current_token() -> ApiToken:
    token: ApiToken = g.api_token
    return token


def tenant_id() -> int:
    """The tenant of the request's token (a tenant endpoint's: never an operator token)."""
    found = current_token().tenant_id
    if found is None:
        raise Problem(403, "forbidden", WRONG_KIND["tenant"])
    return found


def current_tenant() -> Tenant:
    tenant = current_token().tenant
    assert tenant is not None and tenant.id == tenant_id()
    return tenant


def actor() -> Actor:
    return Actor.for_token(current_token())


def require_write() -> None:
    """403 for a `read` token."""
    if current_token().scope != "write":
        raise Problem(403, "forbidden", "this token's scope is read: it cannot change anything")


def schedules() -> Select[Schedule]:
    """The token's tenant's schedules (tenant scope only: system schedules are the operator's)."""
    return scope.schedules(tenant_id())


def calendars() -> Select[Calendar]:
    return scope.calendars(tenant_id())


def runs() -> Select[Run]:
    return scope.runs(tenant_id())


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
