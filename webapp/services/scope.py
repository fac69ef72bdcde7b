"""The tenant scope: which rows are a tenant's. The one place that says it; the panel
(`web/tenancy.py`), the API (`api/auth.py`) and the services build their queries from these,
always with the tenant's id as an argument."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, func, select

from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule


def schedules_of(tenant_id: Any) -> Select[Schedule]:
    """A tenant's schedules (tenant scope only: system schedules are the operator's).
    `tenant_id` may be a bound parameter, for a statement built once."""
    return select(Schedule).where(Schedule.tenant_id == tenant_id, Schedule.scope == "tenant")


def runs_of(tenant_id: Any) -> Select[Run]:
    return select(Run).where(Run.tenant_id == tenant_id)


def audit_events_of(tenant_id: Any) -> Select[AuditEvent]:
    return select(AuditEvent).where(AuditEvent.tenant_id == tenant_id)


def schedule_of(tenant_id: int, schedule_id: int) -> Schedule | None:
    return db.session.scalar(schedules_of(tenant_id).where(Schedule.id == schedule_id))


def schedule_by_key(tenant_id: int, key: str) -> Schedule | None:
    return db.session.scalar(schedules_of(tenant_id).where(Schedule.key == key))


def run_of(tenant_id: int, run_id: int) -> Run | None:
    return db.session.scalar(runs_of(tenant_id).where(Run.id == run_id))


def schedule_count(tenant_id: int) -> int:
    query = schedules_of(tenant_id).with_only_columns(func.count(Schedule.id))
    return int(db.session.scalar(query) or 0)
