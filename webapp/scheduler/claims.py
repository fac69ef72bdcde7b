"""The claim and lease SQL, one function per dialect: the only place that locks rows.

PostgreSQL claims rows with `FOR UPDATE SKIP LOCKED`, so that several workers take disjoint
batches at once. SQLite has one writer at a time: the caller's `BEGIN IMMEDIATE` transaction
(see webapp.database.write_transaction) is the lock, and the same queries run without the clause.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from webapp.database import utcnow
from webapp.models import Run, Schedule

DUE_COLUMNS = (
    Schedule.id,
    Schedule.tenant_id,
    Schedule.key,
    Schedule.job,
    Schedule.args,
    Schedule.cron,
    Schedule.time_zone,
    Schedule.next_run_at,
    Schedule.misfire_policy,
    Schedule.overlap_policy,
)
LEASED_COLUMNS = (
    Run.id,
    Run.tenant_id,
    Run.schedule_id,
    Run.job,
    Run.args,
    Run.trigger,
    Run.scheduled_for,
    Run.idempotency_key,
    Run.attempt,
    Run.max_attempts,
    Run.started_at,
)


def is_postgresql(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def database_now(session: Session) -> datetime:
    """PostgreSQL's clock, so that a worker with a skewed clock cannot fire early."""
    if is_postgresql(session):
        moment: datetime = session.scalar(text("SELECT clock_timestamp()"))
        return moment
    return utcnow()


def due_schedules_query(now: datetime, limit: int) -> Select[Any]:
    return (
        select(*DUE_COLUMNS)
        .where(Schedule.active, Schedule.next_run_at <= now)
        .order_by(Schedule.next_run_at)
        .limit(limit)
    )


def claim_due_postgresql(session: Session, now: datetime, limit: int) -> Sequence[Row[Any]]:
    query = due_schedules_query(now, limit).with_for_update(of=Schedule, skip_locked=True)
    return session.execute(query).all()


def claim_due_sqlite(session: Session, now: datetime, limit: int) -> Sequence[Row[Any]]:
    return session.execute(due_schedules_query(now, limit)).all()


def claim_due_schedules(session: Session, now: datetime, limit: int) -> Sequence[Row[Any]]:
    """Locks up to `limit` due active schedules, oldest first, for the caller's transaction."""
    claim = claim_due_postgresql if is_postgresql(session) else claim_due_sqlite
    return claim(session, now, limit)


def schedules_with_unfinished_runs(session: Session, schedule_ids: Iterable[int]) -> set[int]:
    ids = list(schedule_ids)
    if not ids:
        return set()
    query = (
        select(Run.schedule_id)
        .where(Run.schedule_id.in_(ids), Run.status.in_(("queued", "running")))
        .distinct()
    )
    return {schedule_id for schedule_id in session.scalars(query) if schedule_id is not None}


def insert_runs(session: Session, rows: list[dict[str, Any]]) -> set[tuple[int, datetime]]:
    """Inserts runs in one statement; a fire already recorded is left alone.

    Returns the (schedule_id, scheduled_for) pairs actually inserted.
    """
    if not rows:
        return set()
    insert = postgresql_insert if is_postgresql(session) else sqlite_insert
    statement = insert(Run).on_conflict_do_nothing().returning(Run.schedule_id, Run.scheduled_for)
    return {(sid, at) for sid, at in session.execute(statement, rows) if sid is not None}


def advance_schedules(session: Session, rows: list[dict[str, Any]]) -> None:
    """Bulk UPDATE by primary key: one statement for the batch."""
    if rows:
        session.execute(update(Schedule), rows)


def earliest_next_run(session: Session) -> datetime | None:
    query = select(func.min(Schedule.next_run_at)).where(Schedule.active)
    earliest: datetime | None = session.scalar(query)
    return earliest


def lease_query(now: datetime, limit: int, skip_locked: bool) -> Any:
    candidates = (
        select(Run.id)
        .where(Run.status == "queued", Run.available_at <= now)
        .order_by(Run.available_at, Run.id)
        .limit(limit)
    )
    if skip_locked:
        candidates = candidates.with_for_update(skip_locked=True)
    return candidates.scalar_subquery()


def lease_runs(
    session: Session, worker_id: int, now: datetime, locked_until: datetime, limit: int
) -> Sequence[Row[Any]]:
    """Marks up to `limit` available queued runs as running for this worker, in one statement."""
    statement = (
        update(Run)
        .where(Run.id.in_(lease_query(now, limit, skip_locked=is_postgresql(session))))
        .values(
            status="running",
            worker_id=worker_id,
            started_at=now,
            locked_until=locked_until,
            attempt=Run.attempt + 1,
            finished_at=None,
        )
        .returning(*LEASED_COLUMNS)
        .execution_options(synchronize_session=False)
    )
    return session.execute(statement).all()


def extend_leases(
    session: Session, worker_id: int, run_ids: Iterable[int], locked_until: datetime
) -> None:
    ids = list(run_ids)
    if ids:
        session.execute(
            update(Run)
            .where(Run.id.in_(ids), Run.worker_id == worker_id, Run.status == "running")
            .values(locked_until=locked_until)
            .execution_options(synchronize_session=False)
        )


def any_run_available(session: Session, now: datetime) -> bool:
    query = select(Run.id).where(Run.status == "queued", Run.available_at <= now).limit(1)
    return session.scalar(query) is not None
