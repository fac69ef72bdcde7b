"""A tenant's rows: the one tenant filter of each table, and the lookups built on it.

The panel's pages and loaders (`web/tenancy.py`), the API (`api/auth.py`) and the services start
their queries from these, always with the tenant's id as an argument, so a statement never holds
another tenant's id: it is built for the tenant it is run for.
"""

from __future__ import annotations

from sqlalchemy import BindParameter, Select, func, select

from webapp.calendar_models import Calendar
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule


def schedules(tenant_id: int | BindParameter[int]) -> Select[Schedule]:
    """The tenant's schedules (tenant scope only: system schedules are the operator's)."""
    return select(Schedule).where(Schedule.tenant_id == tenant_id, Schedule.scope == "tenant")


def runs(tenant_id: int | BindParameter[int]) -> Select[Run]:
    return select(Run).where(Run.tenant_id == tenant_id)


def audit_events(tenant_id: int | BindParameter[int]) -> Select[AuditEvent]:
    return select(AuditEvent).where(AuditEvent.tenant_id == tenant_id)


def calendars(tenant_id: int | BindParameter[int]) -> Select[Calendar]:
    """The tenant's business calendars (their entries are read through them)."""
    return select(Calendar).where(Calendar.tenant_id == tenant_id)


def calendar_by_key(tenant_id: int, key: str) -> Calendar | None:
    return db.session.scalar(calendars(tenant_id).where(Calendar.key == key))


def schedule_by_key(tenant_id: int, key: str) -> Schedule | None:
    return db.session.scalar(schedules(tenant_id).where(Schedule.key == key))


def run_of(tenant_id: int, run_id: int) -> Run | None:
    return db.session.scalar(runs(tenant_id).where(Run.id == run_id))


def schedule_count(tenant_id: int) -> int:
    query = schedules(tenant_id).with_only_columns(func.count(Schedule.id))
    return int(db.session.scalar(query) or 0)
