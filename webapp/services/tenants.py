"""A tenant's life after its creation (accounts.create_tenant): its name, zone and limits
changed, and its deletion, only when empty unless asked to take everything with it.

Each change is audited in the tenant's log; a deletion, which takes that log with it, in the
installation's (tenant None), with the counts of what went."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from webapp.calendar_models import Calendar
from webapp.database import utcnow, write_transaction
from webapp.extensions import db
from webapp.models import UNFINISHED_STATUSES, Membership, Notification, Run, Schedule, Tenant
from webapp.services import audit, sessions
from webapp.services.account_schema import AccountError, LimitsIn, TenantIn
from webapp.services.audit import Actor
from webapp.token_models import ApiToken

NAMING_FIELDS = ("name", "time_zone")


@dataclass(frozen=True)
class TenantContents:
    """What a tenant holds, counted: what a deletion with cascade removes."""

    schedules: int
    runs: int
    memberships: int
    tokens: int
    calendars: int
    notifications: int
    audit_events: int

    def holding(self) -> str:
        """What makes it not empty, in words ("" when empty)."""
        kept = {k: v for k, v in asdict(self).items() if v and k in KEEPING_IT}
        return ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in kept.items())


# What an empty tenant may still have: its own audit log and its outbox go with it unasked.
KEEPING_IT = ("schedules", "runs", "memberships", "tokens", "calendars")


class TenantNotEmpty(AccountError):
    """A deletion without cascade of a tenant that holds something, or any deletion while its
    runs are running."""


def contents(session: Session, tenant: Tenant) -> TenantContents:
    def count(model: Any) -> int:
        query = select(func.count()).select_from(model).where(model.tenant_id == tenant.id)
        return int(session.scalar(query) or 0)

    return TenantContents(
        schedules=count(Schedule),
        runs=count(Run),
        memberships=count(Membership),
        tokens=count(ApiToken),
        calendars=count(Calendar),
        notifications=count(Notification),
        audit_events=count(audit.AuditEvent),
    )


def update_tenant(
    tenant: Tenant,
    changes: Mapping[str, Any],
    actor: Actor,
    precondition: Callable[[Tenant], None] | None = None,
) -> Tenant:
    """Changes the given fields of `changes` (name, time_zone, LimitsIn's; a limit None: the
    installation's default), checked as the command line's are, in one transaction. Unknown
    fields and a slug are refused by the models; `precondition` (If-Match) runs first."""
    naming = {k: v for k, v in changes.items() if k in NAMING_FIELDS}
    limits = {k: v for k, v in changes.items() if k not in NAMING_FIELDS}
    current = {"slug": tenant.slug, "name": tenant.name, "time_zone": tenant.time_zone}
    named: dict[str, Any] = {}
    limited: dict[str, Any] = {}
    errors: dict[str, str] = {}
    try:
        if naming:
            named = TenantIn.check({**current, **naming}).model_dump(include=set(naming))
    except AccountError as error:
        errors.update(error.errors)
    try:
        limited = LimitsIn.check(limits).model_dump(include=set(limits))
    except AccountError as error:
        errors.update(error.errors)
    if errors:
        raise AccountError(errors)
    with write_transaction(db.session) as session:
        session.refresh(tenant)
        if precondition is not None:
            precondition(tenant)
        for action, after in (
            ("tenant.changed", named),
            ("tenant.limits_changed", limited),
        ):
            before = {name: getattr(tenant, name) for name in after}
            changed_before, changed_after = audit.changed_fields(before, after)
            if not changed_after:
                continue
            for name, value in changed_after.items():
                setattr(tenant, name, value)
            audit.record_event(
                session,
                actor,
                action,
                ("tenant", tenant.id, tenant.slug),
                tenant_id=tenant.id,
                before=changed_before,
                after=changed_after,
            )
    return tenant


def delete_tenant(
    tenant: Tenant,
    cascade: bool,
    actor: Actor,
    precondition: Callable[[Tenant], None] | None = None,
) -> TenantContents:
    """Deletes the tenant: an empty one (no schedules, runs, members, tokens or calendars),
    or with `cascade` everything it holds, counted in the answer and the audit row. Never while
    its runs are running or queued (a worker holds them): pause and cancel first. The members'
    sessions end (their pages of the tenant are open), as when one is removed."""
    with write_transaction(db.session) as session:
        session.refresh(tenant)
        if precondition is not None:
            precondition(tenant)
        found = contents(session, tenant)
        unfinished = session.scalar(
            select(func.count())
            .select_from(Run)
            .where(Run.tenant_id == tenant.id, Run.status.in_(UNFINISHED_STATUSES))
        )
        if unfinished:
            raise TenantNotEmpty(
                f"tenant {tenant.slug!r} has {unfinished} runs queued or running: pause its "
                "schedules and cancel them (or let them finish) first"
            )
        if not cascade and found.holding():
            raise TenantNotEmpty(
                f"tenant {tenant.slug!r} is not empty ({found.holding()}): delete with "
                "cascade=true to remove it with all of that"
            )
        members = list(
            session.scalars(select(Membership.user_id).where(Membership.tenant_id == tenant.id))
        )
        ended = sum(sessions.end_all(user_id) for user_id in members)
        audit.record_event(
            session,
            actor,
            "tenant.deleted",
            ("tenant", tenant.id, tenant.slug),
            tenant_id=None,
            before={"name": tenant.name, "time_zone": tenant.time_zone},
            after={"cascade": cascade, "removed": asdict(found), "sessions_ended": ended},
            at=utcnow(),
        )
        session.delete(tenant)
    return found
