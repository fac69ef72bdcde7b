"""The operator area under /operator: every tenant at a glance (and a read-only view of each),
the workers and their leases. It does not exist for anyone but operators: 404, GET or POST."""

from __future__ import annotations

from datetime import timedelta

from flask import Blueprint, abort, flash, redirect, request, url_for
from sqlalchemy import select
from werkzeug.wrappers import Response

from webapp.config import settings
from webapp.database import utcnow
from webapp.extensions import db
from webapp.services import operations, tokens, two_factor
from webapp.services.account_schema import AccountError
from webapp.token_models import ApiToken
from webapp.web import tenancy
from webapp.web.auth import is_own_path
from webapp.web.common import actor, done, htmx_redirect, page_or_partial

bp = Blueprint("operator", __name__, url_prefix="/operator")
bp.before_request(tenancy.require_operator)


def lock_ttl() -> timedelta:
    return settings().lock_ttl


def fleet_alarms() -> dict[str, object]:
    """For templates/operator/_fleet.html, on every page of the operator area."""
    chosen = settings()
    return {"fleet_alarms": operations.fleet_alarms(db.session(), lock_ttl(), chosen.uses_celery)}


bp.context_processor(fleet_alarms)


@bp.get("")
def tenants() -> Response:
    """Every tenant with its schedules, recent failures and what is overdue."""
    grace = settings().overdue_grace
    return page_or_partial(
        "operator/tenants.html",
        "operator/_tenants.html",
        tenants=operations.tenant_health(
            operations.database_now(), grace, settings().SCHEDULER_MAX_RUNNING
        ),
        grace_minutes=round(grace.total_seconds() / 60),
    )


@bp.post("/tenants/<id:tenant_id>/view")
def view_tenant(tenant_id: int) -> Response:
    """Open a tenant's pages, read-only unless the operator is a member (audited)."""
    try:
        tenant = operations.find_tenant(tenant_id)
    except operations.NotFound:
        abort(404)
    if tenancy.view_as_operator(tenant):
        operations.record_tenant_view(tenant, actor(), operations.database_now())
        flash(f"Viewing {tenant.name} as an operator: read-only.", "info")
    else:
        flash(f"Now working in {tenant.name}.", "info")
    target = request.form.get("next", "")
    return redirect(target if is_own_path(target) else url_for("schedules.index"), 303)


@bp.post("/view/end")
def end_view() -> Response:
    """Leave the read-only view of a tenant. It ends on the server too: the login moves to a
    new session, so a replayed copy of the cookie from the view shows nothing."""
    tenancy.end_operator_view()
    return redirect(url_for("operator.tenants"), 303)


def workers_page() -> Response:
    return page_or_partial(
        "operator/workers.html",
        "operator/_workers.html",
        overview=operations.workers_overview(db.session(), lock_ttl()),
        lock_ttl_seconds=round(lock_ttl().total_seconds()),
    )


@bp.get("/workers")
def workers() -> Response:
    """Every worker, the runs it holds and how it did in the last hour; expired leases."""
    return workers_page()


@bp.post("/workers/<id:worker_id>/runs/<id:run_id>/release")
def release(worker_id: int, run_id: int) -> Response:
    """Put a run of a dead or silent worker back in the queue (audited); 409 while it lives."""
    try:
        released = operations.release_lease(worker_id, run_id, actor(), lock_ttl())
    except operations.NotFound as error:
        abort(404, str(error))
    except operations.ReleaseRefused as error:
        abort(409, str(error))
    message = (
        f"Run {released.run_id} released from worker {released.worker_id} on "
        f"{released.hostname}: it is queued again."
    )
    return done(
        message,
        url_for("operator.workers"),
        "operator/_workers.html",
        overview=operations.workers_overview(db.session(), lock_ttl()),
        lock_ttl_seconds=round(lock_ttl().total_seconds()),
    )


@bp.get("/two-factor")
def two_factor_page() -> Response:
    """Reset a user's two-factor login: for a user who lost the phone and the recovery codes."""
    return page_or_partial("operator/two_factor.html", "operator/two_factor.html", errors={})


@bp.post("/two-factor/reset")
def reset_two_factor() -> Response:
    """Turn off a user's two-factor login (audited); they log in with the password alone."""
    email = request.form.get("email", "")
    try:
        user = two_factor.reset(email, actor())
    except AccountError as error:
        return page_or_partial(
            "operator/two_factor.html",
            "operator/two_factor.html",
            422,
            errors={"email": str(error).capitalize() + "."},
            email=email,
        )
    message = f"Two-factor login of {user.email} is off: they log in with the password alone."
    return done(message, url_for("operator.two_factor_page"))


def tokens_page(status: int = 200) -> Response:
    return page_or_partial(
        "operator/tokens.html",
        "tokens/_list.html",
        status,
        tokens=tokens.operator_tokens(),
        now=utcnow(),
        token_zone="UTC",
        revoke_endpoint="operator.revoke_token",
    )


@bp.get("/tokens")
def operator_tokens() -> Response:
    """The operator tokens (the operator API's), revoked and expired ones included."""
    return tokens_page()


@bp.post("/tokens/<id:token_id>/revoke")
def revoke_token(token_id: int) -> Response:
    """Revoke an operator token: requests with it answer 401 from now on (audited)."""
    token = db.first_or_404(
        select(ApiToken).where(ApiToken.kind == "operator", ApiToken.id == token_id)
    )
    tokens.revoke_token(token, actor(), utcnow())
    message = f"Operator token {token.prefix} “{token.name}” revoked."
    return htmx_redirect(message, url_for("operator.operator_tokens"))
