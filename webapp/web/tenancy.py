"""Tenant scoping: the one entry point through which views load tenant data.

The current tenant comes from the session and is checked against the user's memberships on
every request. Objects are loaded by id *and* tenant, so another tenant's id answers 404 (never
403, which would confirm that the id exists). Writes need the admin role (403 otherwise).

An operator may view any tenant (the operator area's "View"): the session then names that
tenant, and the operator's membership in it is a transient viewer one, never saved. So every
page reads that tenant's data through the same helpers below, and every write answers 403.
"""

from __future__ import annotations

import functools
from typing import Any

from flask import abort, g, session
from flask_login import current_user
from sqlalchemy import BindParameter, Row, Select, Subquery, bindparam, select, true

from webapp.extensions import db
from webapp.models import ApiToken, AuditEvent, Membership, Run, Schedule, Tenant
from webapp.services import scope

SESSION_KEY = "tenant_id"
# The tenant an operator views without being a member of it (see operator_view).
OPERATOR_VIEW_KEY = "operator_view_tenant_id"


class NoTenant(Exception):
    """The logged-in user belongs to no tenant: the panel explains, rather than failing."""


def memberships() -> list[Membership]:
    """The current user's memberships, by tenant name. The login's one statement loaded them
    with their tenants (services.sessions.find): no query here."""
    if "memberships" not in g:
        mine = current_user.memberships
        g.memberships = sorted(mine, key=lambda m: (m.tenant.name, m.tenant.id))
    result: list[Membership] = g.memberships
    return result


def current_membership() -> Membership:
    """The membership of the tenant chosen in the session (the first one by default), or the
    read-only one of the tenant an operator chose to view."""
    if "membership" not in g:
        viewed = operator_view()
        g.operator_view = viewed is not None
        if viewed is not None:
            g.membership = viewed
        else:
            mine = memberships()
            if not mine:
                raise NoTenant
            chosen = session.get(SESSION_KEY)
            g.membership = next((m for m in mine if m.tenant_id == chosen), mine[0])
    membership: Membership = g.membership
    return membership


def operator_view() -> Membership | None:
    """For an operator viewing a tenant they are not a member of: a viewer membership made for
    this request and never added to the database session (so never saved). None otherwise, also
    for a user who is no longer an operator, or once the tenant is gone."""
    tenant_id = session.get(OPERATOR_VIEW_KEY)
    if tenant_id is None or not is_operator():
        return None
    own = next((m for m in memberships() if m.tenant_id == tenant_id), None)
    if own is not None:
        return own  # made a member since: the real role applies
    tenant = db.session.get(Tenant, tenant_id)
    if tenant is None:
        session.pop(OPERATOR_VIEW_KEY, None)
        return None
    # Membership.tenant has no backref, so the persistent tenant does not pull it into the
    # session; nor is `user` set, whose memberships list would.
    return Membership(user_id=current_user.id, tenant_id=tenant.id, role="viewer", tenant=tenant)


def is_operator_view() -> bool:
    """Whether the current tenant is one an operator views read-only (the banner asks this)."""
    if not is_operator():
        return False
    try:
        current_membership()
    except NoTenant:
        return False
    return bool(g.get("operator_view"))


def view_as_operator(tenant: Tenant) -> bool:
    """Makes `tenant` current for an operator: with their own role where they are a member,
    read-only otherwise. Returns whether the view is read-only (the operator's view, audited)."""
    require_operator()
    if any(m.tenant_id == tenant.id for m in memberships()):
        switch_tenant(tenant.id)
        return False
    session[OPERATOR_VIEW_KEY] = tenant.id
    g.pop("membership", None)
    return True


def end_operator_view() -> None:
    session.pop(OPERATOR_VIEW_KEY, None)
    g.pop("membership", None)


def current_tenant() -> Tenant:
    return current_membership().tenant


def is_operator() -> bool:
    """Whether the logged-in user runs the whole installation (`user set-operator`)."""
    return bool(current_user.is_authenticated and current_user.is_operator)


def require_operator() -> None:
    """404 for anyone but an operator: the operator area does not exist for tenant users."""
    if not is_operator():
        abort(404)


def can_write() -> bool:
    """Whether the current user may change the current tenant's data (templates ask this)."""
    try:
        return current_membership().role == "admin"
    except NoTenant:
        return False


def require_admin() -> Tenant:
    """The current tenant, or 403 for a viewer."""
    if not can_write():
        abort(403)
    return current_tenant()


def switch_tenant(tenant_id: int) -> Tenant:
    """Makes `tenant_id` current if the user is a member; 404 otherwise."""
    membership = next((m for m in memberships() if m.tenant_id == tenant_id), None)
    if membership is None:
        abort(404)
    session[SESSION_KEY] = membership.tenant_id
    session.pop(OPERATOR_VIEW_KEY, None)  # switching to one's own tenant ends a read-only view
    g.membership = membership
    g.operator_view = False
    return membership.tenant


# A statement that a page builds once (building one with subqueries costs more than running
# it) is scoped by this parameter, and executed with `bound()`: never another tenant's id.
TENANT_ID: BindParameter[int] = bindparam("tenant_id")


def bound(**values: Any) -> dict[str, Any]:
    """The parameters of a statement built once with TENANT_ID: the current tenant's id and
    `values`."""
    return {"tenant_id": current_tenant().id, **values}


def _tenant_id(tenant_id: Any) -> Any:
    return current_tenant().id if tenant_id is None else tenant_id


def schedules(tenant_id: Any = None) -> Select[Schedule]:
    """The current tenant's schedules (tenant scope only: system schedules are the operator's).
    `tenant_id`: TENANT_ID, for a statement built once (see `bound`)."""
    return scope.schedules_of(_tenant_id(tenant_id))


def runs(tenant_id: Any = None) -> Select[Run]:
    return scope.runs_of(_tenant_id(tenant_id))


def audit_events(tenant_id: Any = None) -> Select[AuditEvent]:
    return scope.audit_events_of(_tenant_id(tenant_id))


@functools.cache
def schedule_by_id() -> Select[Schedule]:
    """One of the tenant's schedules, by the parameter `schedule_id`: built once (TENANT_ID),
    since every action on a schedule (Run now, Pause, Edit...) starts with it."""
    return schedules(TENANT_ID).where(Schedule.id == bindparam("schedule_id"))


def get_schedule_or_404(schedule_id: int) -> Schedule:
    schedule = db.session.scalar(schedule_by_id(), bound(schedule_id=schedule_id))
    if schedule is None:
        abort(404)
    return schedule


def schedule_with(side: Subquery) -> Select[Any]:
    """One of the tenant's schedules (parameter `schedule_id`) with each row of `side` beside
    it (a subquery of what its page shows, itself scoped by TENANT_ID): built once, run by
    get_schedule_with_or_404. The rows are (schedule, *side's columns); one row of NULLs
    beside the schedule when `side` is empty."""
    return (
        schedules(TENANT_ID)
        .where(Schedule.id == bindparam("schedule_id"))
        .add_columns(*side.c)
        .outerjoin(side, true())
    )


def get_schedule_with_or_404(schedule_id: int, statement: Select[Any]) -> list[Row[Any]]:
    """The rows of `statement` (from schedule_with) for the current tenant's schedule, or 404."""
    rows = list(db.session.execute(statement, bound(schedule_id=schedule_id)))
    if not rows:
        abort(404)
    return rows


@functools.cache
def run_by_id() -> Select[Run]:
    """One of the tenant's runs, by the parameter `run_id`: built once (TENANT_ID), since a
    running run's badge asks for it every second. A page adds its loader options to it in a
    statement of its own, built once too, and runs that with get_run_or_404."""
    return runs(TENANT_ID).where(Run.id == bindparam("run_id"))


def get_run_or_404(run_id: int, statement: Select[Run] | None = None) -> Run:
    """One of the current tenant's runs, by run_by_id() or a statement made from it (what a
    page loads with the run), or 404."""
    chosen = run_by_id() if statement is None else statement
    run = db.session.scalar(chosen, bound(run_id=run_id))
    if run is None:
        abort(404)
    return run


def get_rw_run_or_404(run_id: int) -> Run:
    """A run the current user may cancel: 404 for another tenant's id, 403 for a viewer."""
    run = get_run_or_404(run_id)
    require_admin()
    return run


def get_rw_schedule_or_404(schedule_id: int) -> Schedule:
    """A schedule the current user may change: 404 for another tenant's id, 403 for a viewer."""
    schedule = get_schedule_or_404(schedule_id)
    require_admin()
    return schedule


def get_rw_token_or_404(token_id: int) -> ApiToken:
    """One of the current tenant's API tokens, for an admin: 404 for another tenant's id, 403
    for a viewer."""
    tenant = require_admin()
    token: ApiToken = db.first_or_404(
        select(ApiToken).where(ApiToken.tenant_id == tenant.id, ApiToken.id == token_id)
    )
    return token
