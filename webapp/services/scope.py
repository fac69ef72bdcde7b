"""A tenant's rows: the one tenant filter of each table that pages read.

Every read of a page takes the tenant's id as an argument and starts from these queries, so a
statement never holds another tenant's id: it is built for the tenant it is run for.
"""

from __future__ import annotations

from sqlalchemy import Select, select

from webapp.models import AuditEvent, Run, Schedule


def schedules(tenant_id: int) -> Select[Schedule]:
    """The tenant's schedules (tenant scope only: system schedules are the operator's)."""
    return select(Schedule).where(Schedule.tenant_id == tenant_id, Schedule.scope == "tenant")


def runs(tenant_id: int) -> Select[Run]:
    return select(Run).where(Run.tenant_id == tenant_id)


def audit_events(tenant_id: int) -> Select[AuditEvent]:
    return select(AuditEvent).where(AuditEvent.tenant_id == tenant_id)
