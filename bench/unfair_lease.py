"""The lease before fair leasing (oldest `available_at` first, whatever the tenant): the same-run
baseline of bench.fairness. Importing it (SCHEDULER_JOB_MODULES=bench.jobs,bench.unfair_lease in
a benchmark's worker) makes that process lease the old way; `lease_runs` is also called directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from webapp.catalog import Catalog
from webapp.models import Run
from webapp.scheduler import runs

catalog = Catalog()  # no jobs: SCHEDULER_JOB_MODULES asks every module for one


def unfair_lease_query(now: Any, limit: Any, skip_locked: bool) -> Any:
    """The candidates as they were: one index range scan of ix_runs_queue."""
    candidates = (
        select(Run.id)
        .where(Run.status == "queued", Run.available_at <= now)
        .order_by(Run.available_at, Run.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return select(candidates.cte("lease_candidates").prefix_with("MATERIALIZED").c.id)


def unfair_statements() -> Any:
    """The project's lease UPDATE (its SET and RETURNING as they are now) over the old
    candidates (PostgreSQL's: :now, or the database's clock when it is NULL)."""
    fair = runs.lease_query
    runs.lease_query = unfair_lease_query
    try:
        return runs.lease_statement(postgresql=True)
    finally:
        runs.lease_query = fair


UNFAIR_LEASE = unfair_statements()


def lease_runs(
    session: Session,
    worker_id: int,
    now: datetime | None,
    lock_ttl: timedelta,
    limit: int,
    max_running: int | None = None,
    start_new: int = 0,
) -> Sequence[Row[Any]]:
    """runs.lease_runs as it was (PostgreSQL only; no cap; it marks no start: the caller's
    runs.mark_started does)."""
    parameters = {"limit": limit, "worker_id": worker_id, "now": now, "lock_ttl": lock_ttl}
    return session.connection().execute(UNFAIR_LEASE, parameters).all()


runs.lease_runs = lease_runs  # type: ignore[assignment]
