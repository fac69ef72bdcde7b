"""The claim and lease SQL, one function per dialect: the only place that locks rows.

PostgreSQL claims rows with `FOR UPDATE SKIP LOCKED`, so that several workers take disjoint
batches at once. SQLite has one writer at a time: the caller's `BEGIN IMMEDIATE` transaction
(see webapp.database.write_transaction) is the lock, and the same queries run without the clause.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Integer,
    Interval,
    Select,
    and_,
    bindparam,
    false,
    func,
    not_,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from webapp.database import UTCDateTime, utcnow
from webapp.models import (
    UNFINISHED_STATUSES,
    Notification,
    Run,
    Schedule,
    Tenant,
    Worker,
    schedule_overdue,
)

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


CLOCK = text("SELECT clock_timestamp()")


def database_now(session: Session) -> datetime:
    """PostgreSQL's clock, so that a worker with a skewed clock cannot fire early."""
    if is_postgresql(session):
        moment: datetime = session.connection().execute(CLOCK).scalar_one()
        return moment.astimezone(UTC)
    return utcnow()


def due_schedules_query(now: Any, limit: Any) -> Select[Any]:
    return (
        select(*DUE_COLUMNS)
        .where(Schedule.active, Schedule.next_run_at <= now)
        .order_by(Schedule.next_run_at)
        .limit(limit)
    )


# Built once: an idle tick is mostly this statement, and building it cost more than running it.
DUE = due_schedules_query(bindparam("now", type_=UTCDateTime), bindparam("limit", type_=Integer))
DUE_SKIP_LOCKED = DUE.with_for_update(of=Schedule, skip_locked=True)
# The same, reading PostgreSQL's clock in the claim itself (one round trip less per tick).
# statement_timestamp() is stable within the statement, so the index still bounds the scan.
DUE_BY_DATABASE_CLOCK = (
    due_schedules_query(func.statement_timestamp(), bindparam("limit", type_=Integer))
    .add_columns(func.statement_timestamp(type_=UTCDateTime).label("claimed_at"))
    .with_for_update(of=Schedule, skip_locked=True)
)


def claim_due_postgresql(
    session: Session, now: datetime | None, limit: int
) -> tuple[datetime | None, Sequence[Row[Any]]]:
    connection = session.connection()
    if now is None:
        rows = connection.execute(DUE_BY_DATABASE_CLOCK, {"limit": limit}).all()
        return (rows[0].claimed_at if rows else None), rows
    return now, connection.execute(DUE_SKIP_LOCKED, {"now": now, "limit": limit}).all()


def claim_due_sqlite(
    session: Session, now: datetime | None, limit: int
) -> tuple[datetime | None, Sequence[Row[Any]]]:
    now = now or utcnow()
    return now, session.connection().execute(DUE, {"now": now, "limit": limit}).all()


def claim_due_schedules(
    session: Session, now: datetime | None, limit: int
) -> tuple[datetime | None, Sequence[Row[Any]]]:
    """Locks up to `limit` due active schedules, oldest first, for the caller's transaction.

    Returns the instant they were due at with them: `now`, or when it is None the database's
    clock on PostgreSQL (a worker with a skewed clock cannot fire early), the host's on SQLite.
    """
    claim = claim_due_postgresql if is_postgresql(session) else claim_due_sqlite
    return claim(session, now, limit)


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


def insert_runs(session: Session, rows: list[dict[str, Any]]) -> set[tuple[int, datetime]]:
    """Inserts runs in one statement; a fire already recorded is left alone.

    Returns the (schedule_id, scheduled_for) pairs actually inserted.
    """
    if not rows:
        return set()
    if is_postgresql(session):
        return insert_runs_postgresql(session, rows)
    statement = (
        sqlite_insert(Run).on_conflict_do_nothing().returning(Run.schedule_id, Run.scheduled_for)
    )
    return {(sid, at) for sid, at in session.execute(statement, rows) if sid is not None}


def insert_runs_postgresql(
    session: Session, rows: list[dict[str, Any]]
) -> set[tuple[int, datetime]]:
    """The batch travels as one JSON document, unpacked by jsonb_to_recordset: one statement,
    one parameter.

    Several times cheaper per row than an executemany INSERT, whose per-row parameter
    processing dominated the tick (bench/README.md, fire throughput).
    """
    columns = list(rows[0])
    names = ", ".join(f'"{name}"' for name in columns)
    statement = text(
        f"INSERT INTO runs ({names}) SELECT {names} "
        f"FROM jsonb_to_recordset(CAST(:rows AS JSONB)) AS v({record_type(session, Run, columns)}) "
        "ON CONFLICT DO NOTHING RETURNING schedule_id, scheduled_for"
    )
    inserted = session.execute(statement, {"rows": json_rows(rows)})
    return {(sid, at.astimezone(UTC)) for sid, at in inserted if sid is not None}


def advance_schedules(session: Session, rows: list[dict[str, Any]]) -> None:
    """Bulk UPDATE by primary key: one statement for the batch."""
    if not rows:
        return
    if not is_postgresql(session):
        session.execute(update(Schedule), rows)
        return
    # One UPDATE ... FROM jsonb_to_recordset, not one UPDATE per row (executemany); updated_at
    # as the ORM's onupdate would set it.
    columns = list(rows[0])
    assert columns[0] == "id", "rows start with the primary key"
    assignments = ", ".join(f'"{name}" = v."{name}"' for name in columns[1:])
    statement = text(
        f"UPDATE schedules AS s SET {assignments}, updated_at = :updated_at "
        f"FROM jsonb_to_recordset(CAST(:rows AS JSONB)) "
        f"AS v({record_type(session, Schedule, columns)}) WHERE s.id = v.id"
    )
    session.execute(statement, {"rows": json_rows(rows), "updated_at": utcnow()})


def record_type(session: Session, model: Any, columns: list[str]) -> str:
    """The column definition list of jsonb_to_recordset: `"id" INTEGER, "args" JSONB, ...`."""
    dialect = session.get_bind().dialect
    table = model.__table__
    return ", ".join(f'"{name}" {table.c[name].type.compile(dialect=dialect)}' for name in columns)


def json_rows(rows: list[dict[str, Any]]) -> str:
    """Rows as a JSON array; datetimes (aware, UTC) as ISO 8601, which PostgreSQL parses."""
    return json.dumps(rows, default=iso_datetime, separators=(",", ":"))


def iso_datetime(value: Any) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: store aware UTC datetimes only")
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def earliest_next_run(session: Session) -> datetime | None:
    query = select(func.min(Schedule.next_run_at)).where(Schedule.active)
    earliest: datetime | None = session.scalar(query)
    return earliest


def lease_query(now: Any, limit: Any, skip_locked: bool) -> Any:
    """The runs a lease takes, oldest `available_at` first, as a MATERIALIZED CTE (as the
    watchdog's flag_overdue_schedules): as a subquery, PostgreSQL may run it again for each row
    it updates (a nested loop), skipping the rows this statement has just locked, so the LIMIT
    would not bound the lease."""
    candidates = (
        select(Run.id)
        .where(Run.status == "queued", Run.available_at <= now)
        .order_by(Run.available_at, Run.id)
        .limit(limit)
    )
    if skip_locked:
        candidates = candidates.with_for_update(skip_locked=True)
    return select(candidates.cte("lease_candidates").prefix_with("MATERIALIZED").c.id)


def lease_statement(skip_locked: bool, database_clock: bool = False) -> Any:
    """The lease UPDATE, built once per dialect; it returns the tenant slug and schedule key
    too (correlated subqueries), which spares the lease a second query. With `database_clock`
    it reads PostgreSQL's clock itself (one round trip less for a Run now)."""
    now: Any = (
        func.statement_timestamp(type_=UTCDateTime)
        if database_clock
        else bindparam("now", type_=UTCDateTime)
    )
    locked_until: Any = (
        now + bindparam("lock_ttl", type_=Interval)
        if database_clock
        else bindparam("locked_until", type_=UTCDateTime)
    )
    tenant_slug = select(Tenant.slug).where(Tenant.id == Run.tenant_id).scalar_subquery()
    schedule_key = select(Schedule.key).where(Schedule.id == Run.schedule_id).scalar_subquery()
    return (
        update(Run)
        .where(Run.id.in_(lease_query(now, bindparam("limit", type_=Integer), skip_locked)))
        .values(
            status="running",
            worker_id=bindparam("worker_id", type_=Integer),
            started_at=None,  # leased, not started: see start_statement
            locked_until=locked_until,
            attempt=Run.attempt + 1,
            finished_at=None,
        )
        .returning(
            *LEASED_COLUMNS, tenant_slug.label("tenant_slug"), schedule_key.label("schedule_key")
        )
        .execution_options(synchronize_session=False)
    )


LEASE_SKIP_LOCKED = lease_statement(skip_locked=True)
LEASE_BY_DATABASE_CLOCK = lease_statement(skip_locked=True, database_clock=True)
LEASE = lease_statement(skip_locked=False)


def lease_runs(
    session: Session, worker_id: int, now: datetime | None, lock_ttl: timedelta, limit: int
) -> Sequence[Row[Any]]:
    """Marks up to `limit` available queued runs as running for this worker, in one statement.

    `now=None`: the database's clock on PostgreSQL, the host's on SQLite.
    """
    parameters: dict[str, Any] = {"limit": limit, "worker_id": worker_id}
    if is_postgresql(session) and now is None:
        statement = LEASE_BY_DATABASE_CLOCK
        parameters["lock_ttl"] = lock_ttl
    else:
        statement = LEASE_SKIP_LOCKED if is_postgresql(session) else LEASE
        now = now or utcnow()
        parameters.update(now=now, locked_until=now + lock_ttl)
    return session.connection().execute(statement, parameters).all()


def extend_leases(
    session: Session, worker_id: int, run_ids: Iterable[int], locked_until: datetime
) -> set[int]:
    """Extends this worker's leases on these runs; returns the ids it still held."""
    ids = list(run_ids)
    if not ids:
        return set()
    statement = (
        update(Run)
        .where(Run.id.in_(ids), Run.worker_id == worker_id, Run.status == "running")
        .values(locked_until=locked_until)
        .returning(Run.id)
        .execution_options(synchronize_session=False)
    )
    return set(session.execute(statement).scalars())


def start_statement(database_clock: bool) -> Any:
    """The start mark, built once per dialect: `started_at` on the runs a worker's slots are
    about to start, each only while this worker holds its lease and the lease has not passed.
    Written before any job starts, so that a reaper can tell a run that never started (queued
    again, no attempt spent) from one that did; the runs it does not return are not this
    worker's any more and must not start."""
    now: Any = (
        func.statement_timestamp(type_=UTCDateTime)
        if database_clock
        else bindparam("now", type_=UTCDateTime)
    )
    return (
        update(Run)
        .where(
            Run.id.in_(bindparam("ids", expanding=True)),
            Run.worker_id == bindparam("owner", type_=Integer),
            Run.status == "running",
            Run.locked_until > now,
        )
        .values(started_at=now)
        .returning(Run.id)
        .execution_options(synchronize_session=False)
    )


START_BY_DATABASE_CLOCK = start_statement(database_clock=True)
START = start_statement(database_clock=False)


def mark_started(
    session: Session, worker_id: int, run_ids: Iterable[int], now: datetime | None = None
) -> set[int]:
    """Marks these runs started; returns the ids marked, the only ones that may start.

    `now=None`: the database's clock on PostgreSQL (the one reapers compare leases with), the
    host's on SQLite."""
    ids = list(run_ids)
    if not ids:
        return set()
    parameters: dict[str, Any] = {"ids": ids, "owner": worker_id}
    if is_postgresql(session) and now is None:
        statement = START_BY_DATABASE_CLOCK
    else:
        statement = START
        parameters["now"] = now or utcnow()
    return set(session.connection().execute(statement, parameters).scalars())


def release_run(
    session: Session, run_id: int, worker_id: int, now: datetime, stale_before: datetime
) -> bool:
    """An operator's release of one run held by `worker_id`: back to the queue as
    leases.release_leases puts it (the attempt does not count), but only while the lease is
    dead: expired, or its worker stopped or silent since `stale_before`. The condition is part
    of the UPDATE, so a worker that renews meanwhile keeps its run. Returns whether it was
    released. Its worker, if it comes back, finds the run no longer its own (fencing)."""
    worker_gone = (
        select(Worker.id)
        .where(
            Worker.id == worker_id,
            or_(Worker.stopped_at.is_not(None), Worker.last_heartbeat_at < stale_before),
        )
        .exists()
    )
    statement = (
        update(Run)
        .where(
            Run.id == run_id,
            Run.worker_id == worker_id,
            Run.status == "running",
            or_(Run.locked_until < now, worker_gone),
        )
        .values(
            status="queued",
            worker_id=None,
            locked_until=None,
            available_at=now,
            attempt=Run.attempt - 1,
        )
        .returning(Run.id)
        .execution_options(synchronize_session=False)
    )
    return session.execute(statement).first() is not None


def any_run_available(session: Session, now: datetime) -> bool:
    query = select(Run.id).where(Run.status == "queued", Run.available_at <= now).limit(1)
    return session.scalar(query) is not None


# What a reaper writes on a run it takes back (leases.reap_once).
REQUEUE_ERROR = "the worker running this attempt was lost; retrying"
LOST_ERROR = "worker lost: the worker running it stopped renewing its lease"

OUTCOME_COLUMNS = (
    "id",
    "attempt",
    "status",
    "output",
    "error",
    "error_detail",
    "started_at",
    "finished_at",
    "available_at",
)


def record_outcomes(
    session: Session, worker_id: int, rows: list[dict[str, Any]], taken_back: bool = False
) -> set[int]:
    """Stores finished attempts, each only if this worker still holds that attempt's lease.

    With `taken_back`, each only if a reaper took that attempt back and nobody has touched the
    run since (queued again and not leased, or failed as "worker lost"): the attempt did end,
    and its real outcome replaces the reaper's guess. A run leased again by anyone is never
    written. A retry (`status` queued) leaves the worker and gets its `available_at`; the
    others keep theirs. Returns the ids stored.
    """
    if not rows:
        return set()
    if is_postgresql(session):
        return record_outcomes_postgresql(session, worker_id, rows, taken_back)
    stored: set[int] = set()
    for row in rows:  # SQLite: statements are in-process calls; one commit for all of them
        values = {k: row[k] for k in OUTCOME_COLUMNS[2:] if k != "available_at"}
        values["worker_id"] = worker_id  # a reaper's requeue had cleared it
        if row["status"] == "queued":
            values.update(available_at=row["available_at"], worker_id=None)
        if taken_back:
            owner = or_(
                and_(Run.status == "queued", Run.worker_id.is_(None), Run.error == REQUEUE_ERROR),
                and_(Run.status == "failed", Run.worker_id == worker_id, Run.error == LOST_ERROR),
            )
        else:
            owner = and_(Run.status == "running", Run.worker_id == worker_id)
        statement = (
            update(Run)
            .where(Run.id == row["id"], Run.attempt == row["attempt"], owner)
            .values(locked_until=None, **values)
            .returning(Run.id)
            .execution_options(synchronize_session=False)
        )
        stored.update(session.execute(statement).scalars())
    return stored


OWNED = "r.status = 'running' AND r.worker_id = :worker_id"
TAKEN_BACK = (
    "(r.status = 'queued' AND r.worker_id IS NULL AND r.error = :requeue_error "
    "OR r.status = 'failed' AND r.worker_id = :worker_id AND r.error = :lost_error)"
)


def record_outcomes_postgresql(
    session: Session, worker_id: int, rows: list[dict[str, Any]], taken_back: bool
) -> set[int]:
    columns = list(OUTCOME_COLUMNS)
    statement = text(
        "UPDATE runs AS r SET status = v.status, output = v.output, error = v.error, "
        "error_detail = v.error_detail, "
        "started_at = v.started_at, finished_at = v.finished_at, locked_until = NULL, "
        "available_at = COALESCE(v.available_at, r.available_at), "
        "worker_id = CASE WHEN v.status = 'queued' THEN NULL ELSE :worker_id END "
        f"FROM jsonb_to_recordset(CAST(:rows AS JSONB)) AS v({record_type(session, Run, columns)}) "
        f"WHERE r.id = v.id AND r.attempt = v.attempt AND {TAKEN_BACK if taken_back else OWNED} "
        "RETURNING r.id"
    )
    payload = json_rows([{name: row[name] for name in columns} for row in rows])
    parameters: dict[str, Any] = {"rows": payload, "worker_id": worker_id}
    if taken_back:
        parameters.update(requeue_error=REQUEUE_ERROR, lost_error=LOST_ERROR)
    return set(session.execute(statement, parameters).scalars())


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
        .order_by(Schedule.id)
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
