"""The tick's statements on schedules: claim the due ones, advance them; and the questions it
and an idle worker ask (an unfinished run, the next fire, a run that may start).

PostgreSQL claims rows with `FOR UPDATE SKIP LOCKED`, so that several workers take disjoint
batches at once. SQLite has one writer at a time: the caller's `BEGIN IMMEDIATE` transaction
(see webapp.database.write_transaction) is the lock, and the same queries run without the clause.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Integer,
    Interval,
    Select,
    bindparam,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from webapp.calendar_models import Calendar
from webapp.database import (
    UTCDateTime,
    is_postgresql,
    json_records,
    json_rows,
    now_or_database_clock,
    utcnow,
)
from webapp.models import UNFINISHED_STATUSES, Run, Schedule, Tenant, run_status_is

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
    Schedule.jitter_seconds,
    Schedule.calendar_id,
    Schedule.calendar_policy,
    # The calendar's version: its rules are cached by it (scheduler.calendar_rules), so a tick
    # reads no calendar that has not changed, and none when no schedule has one.
    select(Calendar.updated_at)
    .where(Calendar.id == Schedule.calendar_id)
    .scalar_subquery()
    .label("calendar_updated_at"),
    # The tenant's default jitter, for a schedule without its own (a system schedule has none).
    select(Tenant.jitter_seconds)
    .where(Tenant.id == Schedule.tenant_id)
    .scalar_subquery()
    .label("tenant_jitter_seconds"),
)


def due_schedules_query(now: Any, horizon: Any, limit: Any) -> Select[Any]:
    """Active schedules due by `horizon`: `now` plus the fire-ahead (SCHEDULER_FIRE_AHEAD).
    A schedule with the overlap policy `skip` is never fired ahead: whether an earlier run is
    still going is only known at its fire time."""
    return (
        select(*DUE_COLUMNS)
        .where(
            Schedule.active,
            Schedule.next_run_at <= horizon,
            or_(Schedule.next_run_at <= now, Schedule.overlap_policy != "skip"),
        )
        .order_by(Schedule.next_run_at)
        .limit(limit)
    )


# Built once: an idle tick is mostly this statement, and building it cost more than running it.
DUE = due_schedules_query(
    bindparam("now", type_=UTCDateTime),
    bindparam("horizon", type_=UTCDateTime),
    bindparam("limit", type_=Integer),
)
# PostgreSQL's: :now, or the database's clock when it is NULL (one round trip less per tick),
# and the instant claimed at returned; the rows locked, skipping those another tick holds.
CLAIM_NOW = now_or_database_clock()
DUE_POSTGRESQL = (
    due_schedules_query(
        CLAIM_NOW, CLAIM_NOW + bindparam("ahead", type_=Interval), bindparam("limit", type_=Integer)
    )
    .add_columns(CLAIM_NOW.label("claimed_at"))
    .with_for_update(of=Schedule, skip_locked=True, key_share=True)
)


def lock_schedules(session: Session, schedule_ids: Sequence[int]) -> None:
    """Holds these schedules' rows until the caller commits, first waiting for a tick that
    claimed any of them and is still queuing its runs, so that the caller's next statement sees
    those runs. In id order, so that two callers never deadlock. On SQLite the caller's
    `BEGIN IMMEDIATE` already keeps every tick out."""
    if schedule_ids and is_postgresql(session):
        session.execute(
            select(Schedule.id)
            .where(Schedule.id.in_(schedule_ids))
            .order_by(Schedule.id)
            .with_for_update(key_share=True)
        )


def claim_due_postgresql(
    session: Session, now: datetime | None, limit: int, ahead: timedelta
) -> tuple[datetime | None, Sequence[Row[Any]]]:
    bounds = {"now": now, "ahead": ahead, "limit": limit}
    rows = session.connection().execute(DUE_POSTGRESQL, bounds).all()
    return (rows[0].claimed_at if rows else now), rows


def claim_due_sqlite(
    session: Session, now: datetime | None, limit: int, ahead: timedelta
) -> tuple[datetime | None, Sequence[Row[Any]]]:
    now = now or utcnow()
    bounds = {"now": now, "horizon": now + ahead, "limit": limit}
    return now, session.connection().execute(DUE, bounds).all()


def claim_due_schedules(
    session: Session, now: datetime | None, limit: int, ahead: timedelta = timedelta(0)
) -> tuple[datetime | None, Sequence[Row[Any]]]:
    """Locks up to `limit` active schedules due by now + `ahead`, oldest first, for the
    caller's transaction.

    Returns the instant they were claimed at with them: `now`, or when it is None the
    database's clock on PostgreSQL (a worker with a skewed clock cannot fire early), the host's
    on SQLite.
    """
    claim = claim_due_postgresql if is_postgresql(session) else claim_due_sqlite
    return claim(session, now, limit, ahead)


def advance_statement(columns: tuple[str, ...]) -> Any:
    """PostgreSQL: one UPDATE ... FROM jsonb_to_recordset for a batch of schedules (not one
    UPDATE per row, an executemany); updated_at as the ORM's onupdate would set it."""
    rows = json_records(Schedule.__table__, ("id", *columns))
    return (
        update(Schedule)
        .where(Schedule.id == rows.c.id)
        .values({name: rows.c[name] for name in columns})
        .values(updated_at=bindparam("updated_at", type_=UTCDateTime))
        .execution_options(synchronize_session=False)
    )


# The tick's two kinds of change: a schedule fired (advanced), one it cannot fire (deactivated).
ADVANCED = ("next_run_at", "last_run_at")
DEACTIVATED = ("active", "inactive_reason")
ADVANCE: dict[tuple[str, ...], Any] = {
    columns: advance_statement(columns) for columns in (ADVANCED, DEACTIVATED)
}


def advance_schedules(session: Session, rows: list[dict[str, Any]]) -> None:
    """Bulk UPDATE by primary key: one statement for the batch, whose rows all have the columns
    `id` and ADVANCED, or `id` and DEACTIVATED."""
    if not rows:
        return
    if not is_postgresql(session):
        session.execute(update(Schedule), rows)
        return
    statement = ADVANCE[tuple(name for name in rows[0] if name != "id")]
    session.execute(statement, {"rows": json_rows(rows), "updated_at": utcnow()})


def earliest_next_run(session: Session) -> datetime | None:
    query = select(func.min(Schedule.next_run_at)).where(Schedule.active)
    earliest: datetime | None = session.scalar(query)
    return earliest


def schedules_with_unfinished_runs(session: Session, schedule_ids: Iterable[int]) -> set[int]:
    """Those of the schedules that have a run queued or running: the overlap policy's question,
    asked by the tick and by Run now."""
    ids = list(schedule_ids)
    if not ids:
        return set()
    query = (
        select(Run.schedule_id)
        .where(Run.schedule_id.in_(ids), Run.status.in_(UNFINISHED_STATUSES))
        .distinct()
    )
    return {schedule_id for schedule_id in session.scalars(query) if schedule_id is not None}


def any_run_available(session: Session, now: datetime) -> bool:
    """Whether a queued run may start now (an idle worker's question before it sleeps). The
    oldest one, in ix_runs_queue's order: asked for any one, PostgreSQL read the table from its
    start where its statistics said most runs were queued (lease_query's window asks alike)."""
    query = (
        select(Run.id)
        .where(run_status_is("queued"), Run.available_at <= now)
        .order_by(Run.available_at)
        .limit(1)
    )
    return session.scalar(query) is not None
