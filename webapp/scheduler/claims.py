"""Claims of due schedules for the tick, and the other statements that lock schedules and
notifications: the overdue watchdog's, the failure counts', the outbox's lease.

PostgreSQL claims rows with `FOR UPDATE SKIP LOCKED`, so that several workers take disjoint
batches at once. SQLite has one writer at a time: the caller's `BEGIN IMMEDIATE` transaction
(see webapp.database.write_transaction) is the lock, and the same queries run without the clause.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Integer,
    Interval,
    Select,
    bindparam,
    false,
    func,
    not_,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from webapp.database import (
    UTCDateTime,
    is_postgresql,
    json_records,
    json_rows,
    utcnow,
)
from webapp.models import Notification, Schedule, Tenant, schedule_overdue

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
DUE_SKIP_LOCKED = DUE.with_for_update(of=Schedule, skip_locked=True)
# The same, reading PostgreSQL's clock in the claim itself (one round trip less per tick).
# statement_timestamp() is stable within the statement, so the index still bounds the scan.
DUE_BY_DATABASE_CLOCK = (
    due_schedules_query(
        func.statement_timestamp(),
        func.statement_timestamp() + bindparam("ahead", type_=Interval),
        bindparam("limit", type_=Integer),
    )
    .add_columns(func.statement_timestamp(type_=UTCDateTime).label("claimed_at"))
    .with_for_update(of=Schedule, skip_locked=True)
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
            .with_for_update()
        )


def claim_due_postgresql(
    session: Session, now: datetime | None, limit: int, ahead: timedelta
) -> tuple[datetime | None, Sequence[Row[Any]]]:
    connection = session.connection()
    if now is None:
        rows = connection.execute(DUE_BY_DATABASE_CLOCK, {"ahead": ahead, "limit": limit}).all()
        return (rows[0].claimed_at if rows else None), rows
    bounds = {"now": now, "horizon": now + ahead, "limit": limit}
    return now, connection.execute(DUE_SKIP_LOCKED, bounds).all()


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


# --- the overdue watchdog (webapp.scheduler.watchdog) -------------------------------------------


def flag_overdue_schedules(
    session: Session, now: datetime, grace: timedelta, limit: int
) -> Sequence[Row[int, int | None, datetime | None]]:
    """Sets overdue_since = now on up to `limit` overdue schedules not yet flagged, oldest fire
    time first; returns (id, tenant_id, next_run_at) of those this statement flipped.

    The condition is part of the UPDATE, so of several workers only one flips (and reports)
    a row: PostgreSQL skips rows another transaction holds (a tick firing them, another
    watchdog) and re-checks the condition on rows committed meanwhile; SQLite has one writer.
    """
    candidates = (
        select(Schedule.id)
        .where(schedule_overdue(now, grace), Schedule.overdue_since.is_(None))
        .order_by(Schedule.next_run_at, Schedule.id)
        .limit(limit)
    )
    if is_postgresql(session):
        candidates = candidates.with_for_update(of=Schedule, skip_locked=True)
    # Materialized: as a subquery, PostgreSQL may run it again for each row it updates (a
    # nested loop), skipping the rows this statement has just changed, so the LIMIT would not
    # bound it.
    chosen = candidates.cte("overdue_candidates").prefix_with("MATERIALIZED")
    statement = (
        update(Schedule)
        .where(Schedule.id.in_(select(chosen.c.id)), Schedule.overdue_since.is_(None))
        .values(overdue_since=now)
        .returning(Schedule.id, Schedule.tenant_id, Schedule.next_run_at)
        .execution_options(synchronize_session=False)
    )
    return session.execute(statement).all()


def clear_recovered_schedules(
    session: Session, now: datetime, grace: timedelta, limit: int
) -> Sequence[Row[int, int | None, datetime | None]]:
    """Clears overdue_since on up to `limit` flagged schedules that are no longer overdue
    (fired since, paused); returns (id, tenant_id, overdue_since) as they were flagged.

    Selected with their lock first, then updated: the caller needs overdue_since from before
    the update, which RETURNING cannot give on SQLite.
    """
    # NULL (an active schedule without next_run_at) counts as not overdue.
    still_overdue = func.coalesce(schedule_overdue(now, grace), false())
    query = (
        select(Schedule.id, Schedule.tenant_id, Schedule.overdue_since)
        .where(Schedule.overdue_since.is_not(None), not_(still_overdue))
        # In ix_schedules_overdue's order (flagged schedules only): by id, SQLite walked
        # every schedule in the table's order rather than sort the few flagged ones.
        .order_by(Schedule.overdue_since, Schedule.id)
        .limit(limit)
    )
    if is_postgresql(session):
        query = query.with_for_update(of=Schedule, skip_locked=True)
    rows = session.execute(query).all()
    if rows:
        session.execute(
            update(Schedule)
            .where(Schedule.id.in_([row.id for row in rows]))
            .values(overdue_since=None)
            .execution_options(synchronize_session=False)
        )
    return rows


def lock_failure_counts(session: Session, schedule_ids: list[int]) -> Sequence[Any]:
    """The failure counts of these schedules, locked for the caller's transaction (in id order,
    so that two workers storing outcomes never wait on each other in a circle): the count goes
    on from what the last transaction wrote. SQLite: the write transaction is the lock."""
    if not schedule_ids:
        return []
    query = (
        select(
            Schedule.id,
            Schedule.consecutive_failures,
            Schedule.pause_after_failures,
            Schedule.active,
        )
        .where(Schedule.id.in_(schedule_ids))
        .order_by(Schedule.id)
    )
    if is_postgresql(session):
        query = query.with_for_update(of=Schedule)
    return session.execute(query).all()


def notification_lease_statement(skip_locked: bool) -> Any:
    """The outbox's lease: pending rows that are due and not held by a live lease get this
    worker, a lease and one more attempt; built once per dialect. A row stays `pending` while
    it is sent, so that the lease of a worker that died runs out and another worker sends it."""
    now = bindparam("now", type_=UTCDateTime)
    candidates = (
        select(Notification.id)
        .where(
            Notification.status == "pending",
            Notification.available_at <= now,
            or_(Notification.locked_until.is_(None), Notification.locked_until < now),
        )
        .order_by(Notification.available_at, Notification.id)
        .limit(bindparam("limit", type_=Integer))
    )
    if skip_locked:
        candidates = candidates.with_for_update(skip_locked=True)
    secret = select(Tenant.webhook_secret).where(Tenant.id == Notification.tenant_id)
    return (
        update(Notification)
        .where(Notification.id.in_(candidates.scalar_subquery()))
        .values(
            worker_id=bindparam("worker_id", type_=Integer),
            locked_until=bindparam("locked_until", type_=UTCDateTime),
            attempts=Notification.attempts + 1,
        )
        .returning(
            Notification.id,
            Notification.channel,
            Notification.target,
            Notification.subject,
            Notification.body,
            Notification.idempotency_key,
            Notification.attempts,
            secret.scalar_subquery().label("webhook_secret"),
        )
        .execution_options(synchronize_session=False)
    )


LEASE_NOTIFICATIONS_SKIP_LOCKED = notification_lease_statement(skip_locked=True)
LEASE_NOTIFICATIONS = notification_lease_statement(skip_locked=False)


def any_notification_due(session: Session, now: datetime) -> bool:
    """Whether the outbox has a row to send (the partial index on pending rows answers)."""
    query = (
        select(Notification.id)
        .where(
            Notification.status == "pending",
            Notification.available_at <= now,
            or_(Notification.locked_until.is_(None), Notification.locked_until < now),
        )
        .limit(1)
    )
    return session.scalar(query) is not None


def lease_notifications(
    session: Session, worker_id: int, now: datetime, locked_until: datetime, limit: int
) -> Sequence[Row[Any]]:
    """Takes up to `limit` due notifications for this worker until `locked_until`."""
    statement = LEASE_NOTIFICATIONS_SKIP_LOCKED if is_postgresql(session) else LEASE_NOTIFICATIONS
    parameters = {"now": now, "locked_until": locked_until, "limit": limit, "worker_id": worker_id}
    return session.connection().execute(statement, parameters).all()
