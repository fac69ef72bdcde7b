"""Tenant scoping: the one entry point through which views load tenant data.

The current tenant comes from the session and is checked against the user's memberships on
every request. Objects are loaded by id *and* tenant, so another tenant's id answers 404 (never
403, which would confirm that the id exists). Writes need the admin role (403 otherwise).

An operator may view any tenant (the operator area's "View"): the session then names that
tenant, and the operator's membership in it is a transient viewer one, never saved. So every
page reads that tenant's data through the same helpers below, and every write answers 403.
"""

from __future__ import annotations

from typing import TypeVar

from flask import abort, g, session
from flask_login import current_user
from sqlalchemy import select

from webapp.calendar_models import Calendar
from webapp.extensions import db
from webapp.models import Membership, Run, Schedule, Tenant
from webapp.services import scope
from webapp.token_models import ApiToken
from webapp.web.auth import renew_login

T = TypeVar("T")

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
    """Leaves a read-only view, on the server too: the login moves to a new session, so a copy
    of the cookie taken during the view (which names the tenant) is worthless afterwards."""
    if session.pop(OPERATOR_VIEW_KEY, None) is not None:
        renew_login()
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
    end_operator_view()  # switching to one's own tenant ends a read-only view
    g.membership = membership
    g.operator_view = False
    return membership.tenant


def get_schedule_or_404(schedule_id: int) -> Schedule:
    """One of the current tenant's schedules, or 404."""
    schedule: Schedule = db.first_or_404(
        scope.schedules(current_tenant().id).where(Schedule.id == schedule_id)
    )
    return schedule


def get_run_or_404(run_id: int) -> Run:
    """One of the current tenant's runs, or 404."""
    run: Run = db.first_or_404(scope.runs(current_tenant().id).where(Run.id == run_id))
    return run


def for_admin(found: T) -> T:
    """What a loader found, for an admin: 403 for a viewer (after the loader's 404 for another
    tenant's id, so that a viewer learns nothing of other tenants either)."""
    require_admin()
    return found


def get_rw_run_or_404(run_id: int) -> Run:
    """A run the current user may cancel: 404 for another tenant's id, 403 for a viewer."""
    return for_admin(get_run_or_404(run_id))


def get_rw_schedule_or_404(schedule_id: int) -> Schedule:
    """A schedule the current user may change: 404 for another tenant's id, 403 for a viewer."""
    return for_admin(get_schedule_or_404(schedule_id))


def get_rw_token_or_404(token_id: int) -> ApiToken:
    """One of the current tenant's API tokens, for an admin: 404 for another tenant's id, 403
    for a viewer."""
    tenant = require_admin()
    token: ApiToken = db.first_or_404(
        select(ApiToken).where(ApiToken.tenant_id == tenant.id, ApiToken.id == token_id)
    )
    return token


def get_calendar_or_404(calendar_id: int) -> Calendar:
    """One of the current tenant's business calendars, or 404."""
    calendar: Calendar = db.first_or_404(
        scope.calendars(current_tenant().id).where(Calendar.id == calendar_id)
    )
    return calendar


def get_rw_calendar_or_404(calendar_id: int) -> Calendar:
    """A calendar the current user may change: 404 for another tenant's id, 403 for a viewer."""
    return for_admin(get_calendar_or_404(calendar_id))
