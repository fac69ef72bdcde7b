"""Default schedules declared by job modules, materialised idempotently.

A default is created once per tenant (or once, for system scope) and is the tenant's from then
on: syncing again never overwrites their edits of cron or args, nor re-activates one they paused.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from webapp.catalog import Catalog, CatalogError, DefaultSchedule
from webapp.catalog.current import current_catalog
from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import Schedule, Tenant
from webapp.services.audit import DEFAULTS
from webapp.services.schedules import NewSchedule, add_schedules
from webapp.services.schema import ScheduleError, ScheduleIn, ScheduleRules


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
    # The arguments are checked as at registration, without the app's settings: a default is
    # the operator's own, and refusing it here would refuse to create the tenant.
    rules = ScheduleRules(catalog=catalog, settings=None, now=now)
    in_zone: dict[tuple[str, str], ScheduleIn] = {}  # checked once per zone, not per tenant
    new = []
    for default in defaults:
        owners: list[Tenant | None] = list(tenants) if default.scope == "tenant" else [None]
        for tenant in owners:
            tenant_id = tenant.id if tenant else None
            if (tenant_id, default.key) in present:
                continue
            zone = default.time_zone or (tenant.time_zone if tenant else "UTC")
            if (default.key, zone) not in in_zone:
                in_zone[default.key, zone] = checked(default, zone, rules)
            new.append(NewSchedule(in_zone[default.key, zone], tenant_id, default.scope))
    # No quota: a default is the operator's own, and refusing it would refuse to create the tenant.
    return len(add_schedules(session, new, DEFAULTS, now))


def checked(default: DefaultSchedule, time_zone: str, rules: ScheduleRules) -> ScheduleIn:
    """The default as a schedule in `time_zone`, checked as any other, or CatalogError."""
    data = {
        "key": default.key,
        "name": default.name,
        "job": default.job,
        "args": default.args,
        "cron": default.cron,
        "time_zone": time_zone,
    }
    try:
        return ScheduleIn.check(data, replace(rules, scope=default.scope))
    except ScheduleError as error:
        raise CatalogError(f"default schedule {default.key!r}: {error}") from None
