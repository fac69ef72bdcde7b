"""Default schedules declared by job modules, materialised idempotently.

A default is created once per tenant (or once, for system scope) and is the tenant's from then
on: syncing again never overwrites their edits of cron or args, nor re-activates one they paused.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from webapp import cron
from webapp.catalog import Catalog, CatalogError
from webapp.catalog.current import current_catalog
from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import AuditEvent, Schedule, Tenant
from webapp.services.audit import DEFAULTS, audit_row, schedule_snapshot


def sync_defaults(now: datetime) -> int:
    """`flask scheduler sync`: every tenant's missing defaults and the system ones, committed."""
    with write_transaction(db.session) as session:
        return materialise_defaults(session, current_catalog(), now)


def materialise_defaults(
    session: Session, catalog: Catalog, now: datetime, tenants: list[Tenant] | None = None
) -> int:
    """Creates the missing default schedules (inside the caller's transaction); returns how many.

    The tenant-scope ones for `tenants` (None: every tenant), and the missing system-scope ones
    either way: creating a tenant is all a new installation does, and it must not be left
    without them (without `maintenance.prune_runs`, history would never be pruned).
    """
    defaults = catalog.defaults()
    if not defaults:
        return 0
    if tenants is None:
        tenants = list(session.scalars(select(Tenant)))
    keys = [default.key for default in defaults]
    present = {
        (tenant_id, key)
        for tenant_id, key in session.execute(
            select(Schedule.tenant_id, Schedule.key).where(Schedule.key.in_(keys))
        )
    }
    rows = []
    for default in defaults:
        owners: list[Tenant | None] = list(tenants) if default.scope == "tenant" else [None]
        for tenant in owners:
            tenant_id = tenant.id if tenant else None
            if (tenant_id, default.key) in present:
                continue
            zone = default.time_zone or (tenant.time_zone if tenant else "UTC")
            try:
                spec = cron.validate(default.cron, zone)
            except cron.CronError as error:
                raise CatalogError(f"default schedule {default.key!r}: {error}") from None
            rows.append(
                {
                    "tenant_id": tenant_id,
                    "scope": default.scope,
                    "key": default.key,
                    "name": default.name,
                    "job": default.job,
                    "args": default.args,
                    "cron": spec.expression,
                    "time_zone": zone,
                    "active": True,
                    "misfire_policy": "fire_once",
                    "overlap_policy": "allow",
                    "next_run_at": spec.next_fire_after(now),
                    "created_at": now,
                    "updated_at": now,
                }
            )
    if not rows:
        return 0
    schedules = session.scalars(
        insert(Schedule).returning(Schedule, sort_by_parameter_order=True), rows
    ).all()
    session.execute(
        insert(AuditEvent),
        [audit_row(DEFAULTS, "schedule.created", s, after=schedule_snapshot(s)) for s in schedules],
    )
    return len(rows)
