"""A run's lifecycle: every statement that inserts or updates `runs`, one function per transition.

    (insert) -> queued | skipped | failed       fire (tick), Run now, backfill
    queued   -> running                         lease_runs (a worker's lease), start mark after
    queued   -> cancelled                       cancel_queued_run
    running  -> running                         mark_started, unmark_started (a slot never
                                                took it), extend_leases, request_stop, take_over
    running  -> queued                          release_leases, release_run (attempt not spent),
                                                reap_expired (lease passed), record_outcomes (retry)
    running  -> succeeded | failed | cancelled  record_outcomes, reap_expired

Each function runs in its caller's transaction: docs/architecture.md says which one, for each
transition. Deleting runs is elsewhere: retention, and fire_ahead.withdraw_fires_ahead (a queued
fire ahead of its time, when its schedule changes).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import (
    Integer,
    Interval,
    String,
    Table,
    and_,
    bindparam,
    case,
    func,
    insert,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine, Row
from sqlalchemy.orm import Session

from webapp.database import (
    UTCDateTime,
    among_ids,
    is_postgresql,
    json_records,
    json_rows,
    now_or_database_clock,
    utcnow,
)
from webapp.models import AuditEvent, Run, Worker, run_status_is
from webapp.scheduler.lease_query import LEASE_WINDOW, LEASED_COLUMNS, lease_query
from webapp.scheduler.wakeup import wake_workers_column

RUNS: Table = Run.__table__  # type: ignore[assignment]

# --- new runs: a fire of the tick, a backfill, a Run now ----------------------------------------


# Every column a new run is inserted with (the others take their defaults); a row without one
# of the last four gets NULL.
INSERT_COLUMNS = (
    "tenant_id",
    "schedule_id",
    "job",
    "args",
    "trigger",
    "scheduled_for",
    "idempotency_key",
    "status",
    "attempt",
    "max_attempts",
    "fires_covered",
    "queued_at",
    "available_at",
    "finished_at",
    "error",
    "started_at",
    "output",
    "requested_by",
)


def insert_statement_postgresql() -> Any:
    """The batch travels as one JSON document, unpacked by jsonb_to_recordset: one statement,
    one parameter. Several times cheaper per row than an executemany INSERT, whose per-row
    parameter processing dominated the tick (bench/README.md, fire throughput)."""
    rows = json_records(Run.__table__, INSERT_COLUMNS)
    return (
        postgresql_insert(RUNS)  # the table: the ORM's bulk INSERT takes no SELECT
        .from_select(INSERT_COLUMNS, select(*rows.c), include_defaults=False)
        .on_conflict_do_nothing()
        .returning(Run.schedule_id, Run.scheduled_for)
    )


INSERT_POSTGRESQL = insert_statement_postgresql()
INSERT_SQLITE = (
    sqlite_insert(Run).on_conflict_do_nothing().returning(Run.schedule_id, Run.scheduled_for)
)


def insert_runs(session: Session, rows: list[dict[str, Any]]) -> set[tuple[int, datetime]]:
    """Inserts runs (run_row's, manual_run_row's) in one statement; a fire already recorded is
    left alone (the unique index on schedule_id, scheduled_for). Returns the (schedule_id,
    scheduled_for) pairs actually inserted."""
    if not rows:
        return set()
    if is_postgresql(session):  # jsonb_to_recordset: a column a row leaves out is NULL
        inserted = session.execute(INSERT_POSTGRESQL, {"rows": json_rows(rows)})
    else:
        full = [{name: row.get(name) for name in INSERT_COLUMNS} for row in rows]
        inserted = session.execute(INSERT_SQLITE, full)
    return {(sid, at) for sid, at in inserted if sid is not None}  # UTCDateTime's: in UTC


def insert_manual_run(session: Session, row: dict[str, Any]) -> int:
    """Inserts one run (manual_run_row's); returns its id."""
    run_id: int = session.execute(insert(Run).values(row).returning(Run.id)).scalar_one()
    return run_id


def manual_run_statement() -> Any:
    """PostgreSQL: a Run now's run, its audit event and the workers' wake-up in one statement (a
    click's own time is mostly round trips): WITH queued AS (INSERT INTO runs ... RETURNING id),
    audited AS (INSERT INTO audit_events ... FROM queued) SELECT queued.id, pg_notify(...)."""
    runs, events = Run.__table__.c, AuditEvent.__table__.c
    queued = (
        insert(Run)
        .values({name: bindparam(name, type_=runs[name].type) for name in INSERT_COLUMNS})
        .returning(Run.id)
        .cte("queued")
    )
    names = [column.name for column in events if column.name != "id"]
    after = func.jsonb_build_object(
        "run_id", queued.c.id, "at", bindparam("event_at", type_=String)
    )
    audited = insert(AuditEvent).from_select(
        names,
        select(
            *(
                after if name == "after" else bindparam(f"event_{name}", type_=events[name].type)
                for name in names
            )
        ).select_from(queued),
    )
    return select(queued.c.id, wake_workers_column()).add_cte(audited.cte("audited"))


MANUAL_RUN_POSTGRESQL = manual_run_statement()


def insert_manual_run_audited(session: Session, row: dict[str, Any], event: dict[str, Any]) -> int:
    """PostgreSQL: inserts the run and its audit event (`event`, whose `after` gets the run's
    id) and wakes the workers, in one statement; returns the run's id."""
    parameters = {
        **{name: row.get(name) for name in INSERT_COLUMNS},
        **{f"event_{name}": value for name, value in event.items() if name != "after"},
        "event_at": event["after"]["at"],
    }
    run_id: int = session.execute(MANUAL_RUN_POSTGRESQL, parameters).one()[0]
    return run_id


# --- queued -> running: the lease, then the start mark ------------------------------------------


def lease_statement(postgresql: bool) -> Any:
    """The lease UPDATE, built once per dialect (which runs: lease_query.lease_query). On
    PostgreSQL `:now` may be NULL: the database's clock (one round trip less for Run now)."""
    now: Any = now_or_database_clock() if postgresql else bindparam("now", type_=UTCDateTime)
    ttl = bindparam("lock_ttl", type_=Interval)
    locked_until = now + ttl if postgresql else bindparam("locked_until", type_=UTCDateTime)
    leased = (
        lease_query(now, bindparam("limit", type_=Integer), postgresql)
        .cte("lease_ids")
        .prefix_with("MATERIALIZED")
    )
    # The first :start_new leased (by id) get their start mark here (start_statement): a second
    # UPDATE would write each row and its index entries twice; just leased, the fence is met.
    start_now = (
        select(leased.c.id).order_by(leased.c.id).limit(bindparam("start_new", 0, type_=Integer))
    )
    return (
        update(Run)
        .where(Run.id.in_(select(leased.c.id)))
        .values(
            status="running",
            worker_id=bindparam("worker_id", type_=Integer),
            started_at=case((Run.id.in_(start_now), now), else_=null()),
            locked_until=locked_until,
            attempt=Run.attempt + 1,
            finished_at=None,
        )
        .returning(*LEASED_COLUMNS)
        .execution_options(synchronize_session=False)
    )


LEASE_POSTGRESQL = lease_statement(postgresql=True)
LEASE_SQLITE = lease_statement(postgresql=False)
# Each worker's cursor, by database (engine) and worker id: the last tenant its previous lease
# window reached. Only a starting point: a lost or stale one costs a window somewhere else.
LEASE_CURSORS: WeakKeyDictionary[Engine, dict[int, int]] = WeakKeyDictionary()


def lease_runs(
    session: Session,
    worker_id: int,
    now: datetime | None,
    lock_ttl: timedelta,
    limit: int,
    max_running: int | None = None,
    start_new: int = 0,
) -> Sequence[Row[Any]]:
    """Marks up to `limit` available queued runs as running for this worker, in one statement
    (on PostgreSQL after the one that finds this lease's window of tenants and locks its capped
    ones; once more with the next window if leases in flight held every run of this one and it
    locked none: workers meet at the same tenants of a wide, shallow queue), fairly between
    tenants and never beyond a tenant's cap (`max_running`: the default cap,
    SCHEDULER_MAX_RUNNING). The first `start_new` of them (by id) are marked started too (their
    `started_at` returned set), as mark_started would.

    `now=None`: the database's clock on PostgreSQL, the host's on SQLite.
    """
    parameters: dict[str, Any] = {
        "limit": limit,
        "worker_id": worker_id,
        "max_running": max_running,
        "start_new": start_new,
    }
    connection = session.connection()
    if not is_postgresql(session):
        now = now or utcnow()
        parameters.update(now=now, locked_until=now + lock_ttl)
        return connection.execute(LEASE_SQLITE, parameters).all()
    parameters.update(now=now, lock_ttl=lock_ttl)
    cursors = LEASE_CURSORS.setdefault(connection.engine, {})
    for _ in range(2):  # see above; never past a window that locked tenants (lock order)
        cursor = cursors.get(worker_id)
        tenants = connection.execute(LEASE_WINDOW, {**parameters, "after": cursor}).all()
        if tenants:  # on, even if nothing is leased: tenants full at their cap starve nobody
            cursors[worker_id] = tenants[-1].tenant_id
        parameters["window"] = [row.tenant_id for row in tenants if row.open]
        parameters["locked"] = [row.tenant_id for row in tenants if row.locked]
        rows = connection.execute(LEASE_POSTGRESQL, parameters).all()
        if rows or not parameters["window"] or parameters["locked"]:
            return rows
    return rows


def start_statement(postgresql: bool, mark: bool) -> Any:
    """The start mark, built once per dialect: `started_at` on the runs a worker's slots are
    about to start, each only while this worker holds its lease and the lease has not passed.
    Written before any job starts, so that a reaper can tell a run that never started (queued
    again, no attempt spent) from one that did; the runs it does not return are not this
    worker's any more and must not start. Not `mark`: the mark taken back (unmark_started)."""
    now: Any = now_or_database_clock() if postgresql else bindparam("now", type_=UTCDateTime)
    owner = Run.worker_id == bindparam("owner", type_=Integer)
    statement = update(Run).where(among_ids(Run.id, postgresql), owner, Run.status == "running")
    if mark:
        statement = statement.where(Run.locked_until > now).returning(Run.id)
    return statement.values(started_at=now if mark else None).execution_options(
        synchronize_session=False
    )


START = {
    (postgresql, mark): start_statement(postgresql, mark)
    for postgresql in (True, False)
    for mark in (True, False)
}


def mark_started(
    session: Session, worker_id: int, run_ids: Iterable[int], now: datetime | None = None
) -> set[int]:
    """Marks these runs started; returns the ids marked, the only ones that may start.
    `now=None`: the database's clock on PostgreSQL (the one reapers compare leases with), the
    host's on SQLite."""
    ids = list(run_ids)
    if not ids:
        return set()
    postgresql = is_postgresql(session)
    parameters = {"ids": ids, "owner": worker_id, "now": now or (None if postgresql else utcnow())}
    return set(session.connection().execute(START[postgresql, True], parameters).scalars())


def unmark_started(session: Session, worker_id: int, run_ids: list[int]) -> None:
    """Takes back the start marks of these runs of this worker, whose slots have not started
    them (pool.JobPool.stale_marks): a reaper sees them as never started."""
    if run_ids:
        statement = START[is_postgresql(session), False]
        session.connection().execute(statement, {"ids": run_ids, "owner": worker_id})


def take_over(
    session: Session,
    run_id: int,
    attempt: int,
    idempotency_key: str,
    sent_by: int | None,
    worker_id: int,
    now: datetime,
    lock_ttl: timedelta,
) -> Row[Any] | None:
    """A Celery worker's take-over: the lease of that attempt moves from the worker that sent it
    (`sent_by`) to `worker_id`, marked started; None when that lease is not its sender's any
    more or has passed (the task is stale), or when the run has started: a sender never marks
    what it sends, so a started run was taken over already, and a message naming its taker as
    the sender (forged, or sent again) must not run it a second time."""
    statement = (
        update(Run)
        .where(
            Run.id == run_id,
            Run.attempt == attempt,
            Run.idempotency_key == idempotency_key,
            Run.status == "running",
            Run.worker_id == sent_by,
            Run.started_at.is_(None),
            Run.locked_until > now,
        )
        .values(worker_id=worker_id, started_at=now, locked_until=now + lock_ttl)
        .returning(*LEASED_COLUMNS)
        .execution_options(synchronize_session=False)
    )
    return session.execute(statement).one_or_none()


# --- running -> running: the lease renewed, a stop asked ----------------------------------------


def extend_leases(
    session: Session, worker_id: int, run_ids: Iterable[int], locked_until: datetime
) -> dict[int, bool]:
    """Extends this worker's leases on these runs; returns the ids it still held, each with
    whether an admin has asked that run to stop (the same statement tells, at no extra cost)."""
    ids = list(run_ids)
    if not ids:
        return {}
    statement = (
        update(Run)
        .where(Run.id.in_(ids), Run.worker_id == worker_id, Run.status == "running")
        .values(locked_until=locked_until)
        .returning(Run.id, Run.cancel_requested_at)
        .execution_options(synchronize_session=False)
    )
    return {run_id: asked is not None for run_id, asked in session.execute(statement)}


def request_stop(session: Session, run_id: int, user_id: int | None, now: datetime) -> bool:
    """Asks a running run to stop, once: its worker sees the request at its next lease
    renewal (extend_leases). Returns whether this statement asked."""
    statement = (
        update(Run)
        .where(Run.id == run_id, Run.status == "running", Run.cancel_requested_at.is_(None))
        .values(cancel_requested_at=now, cancelled_by=user_id)
        .returning(Run.id)
        .execution_options(synchronize_session=False)
    )
    return session.execute(statement).first() is not None


# --- queued -> cancelled -----------------------------------------------------------------------


def cancel_queued_run(session: Session, run_id: int, user_id: int | None, now: datetime) -> bool:
    """Cancels the run if it is still queued, in one conditional UPDATE: a worker leasing it at
    the same instant either took it first (this finds it running) or finds it cancelled (on
    PostgreSQL the lease's SKIP LOCKED passes over the row this holds, and re-checks `queued`
    on a row changed meanwhile). Returns whether it was cancelled."""
    statement = (
        update(Run)
        .where(Run.id == run_id, Run.status == "queued")
        .values(
            status="cancelled",
            cancelled_by=user_id,
            cancelled_at=now,
            finished_at=now,
            locked_until=None,
        )
        .returning(Run.id)
        .execution_options(synchronize_session=False)
    )
    return session.execute(statement).first() is not None


# --- running -> queued: back to the queue, the attempt not spent --------------------------------

# A run given back unstarted or unfinished by its worker (shutdown) or by an operator: it keeps
# its place in the queue (available_at) and the attempt does not count.
BACK_TO_THE_QUEUE = {
    "status": "queued",
    "worker_id": None,
    "locked_until": None,
    "attempt": Run.attempt - 1,
}


def release_leases(session: Session, worker_id: int, run_ids: list[int]) -> list[int]:
    """A worker's shutdown: its unfinished runs go back to the queue. Returns those released."""
    statement = (
        update(Run)
        .where(Run.id.in_(run_ids), Run.worker_id == worker_id, Run.status == "running")
        .values(BACK_TO_THE_QUEUE)
        .returning(Run.id)
        .execution_options(synchronize_session=False)
    )
    return list(session.execute(statement).scalars())


def release_run(
    session: Session, run_id: int, worker_id: int, now: datetime, stale_before: datetime
) -> bool:
    """An operator's release of one run held by `worker_id`: back to the queue as
    release_leases puts it, but only while the lease is dead: expired, or its worker stopped or
    silent since `stale_before`. The condition is part of the UPDATE, so a worker that renews
    meanwhile keeps its run. Returns whether it was released. Its worker, if it comes back,
    finds the run no longer its own (fencing)."""
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
        .values(BACK_TO_THE_QUEUE)
        .returning(Run.id)
        .execution_options(synchronize_session=False)
    )
    return session.execute(statement).first() is not None


# --- a lease that passed: the reaper ------------------------------------------------------------

# What a reaper writes on a run it takes back (reap_expired).
REQUEUE_ERROR = "the worker running this attempt was lost; retrying"
LOST_ERROR = "worker lost: the worker running it stopped renewing its lease"
NOT_STARTED_ERROR = (
    "the worker that leased it was lost before starting it; queued again, no attempt spent"
)
STOPPED_LOST_ERROR = "asked to stop, and its worker was lost before it stopped; not run again"


def reap_statement() -> Any:
    """One UPDATE for every outcome (the worker runs it every round: one round trip, not
    three). A run an admin asked to stop ends cancelled: the request outlives its lost worker,
    so the job is not started again. A run never started (no start mark: its worker was lost
    while it waited for a slot) is queued again and its attempt does not count, whatever its
    attempts; a started one is queued again while attempts remain, failed otherwise."""
    now = bindparam("now", type_=UTCDateTime)
    stop_requested = Run.cancel_requested_at.is_not(None)
    never_started = Run.started_at.is_(None)
    retry = and_(~stop_requested, or_(never_started, Run.attempt < Run.max_attempts))
    return (
        update(Run)
        .where(run_status_is("running"), Run.locked_until < now)
        .values(
            status=case((stop_requested, "cancelled"), (retry, "queued"), else_="failed"),
            worker_id=case((retry, None), else_=Run.worker_id),
            locked_until=None,
            # A run never started keeps its place in the queue (and its jitter shown).
            available_at=case((and_(retry, ~never_started), now), else_=Run.available_at),
            finished_at=case((retry, Run.finished_at), else_=now),
            cancelled_at=case((stop_requested, now), else_=Run.cancelled_at),
            attempt=case((never_started, Run.attempt - 1), else_=Run.attempt),
            error=case(
                (stop_requested, STOPPED_LOST_ERROR),
                (never_started, NOT_STARTED_ERROR),
                (retry, REQUEUE_ERROR),
                else_=LOST_ERROR,
            ),
            error_detail=None,  # an earlier attempt's traceback would not explain this
        )
        .returning(Run.id, Run.status, Run.schedule_id, Run.error)
        .execution_options(synchronize_session=False)
    )


REAP = reap_statement()


def reap_expired(session: Session, now: datetime) -> Sequence[Any]:
    """Takes back every run whose lease passed before `now`; returns (id, status, schedule_id,
    error) of each, as reap_statement left it."""
    return session.connection().execute(REAP, {"now": now}).all()


# --- running -> succeeded | failed | cancelled | queued (a retry): the outcome -----------------


def retry_delay(backoff: float, attempt: int) -> timedelta:
    """How long a failed attempt waits before the next: backoff, 2 x backoff, 4 x backoff ..."""
    return timedelta(seconds=backoff * 2 ** (attempt - 1))


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


def outcome_statement(postgresql: bool, taken_back: bool) -> Any:
    """record_outcomes' UPDATE, built once per dialect and fence. PostgreSQL: the batch as one
    JSON parameter (:rows), one statement; SQLite: one row's values as parameters, one
    statement per row (in-process calls; one commit for all of them)."""
    rows: Any = json_records(Run.__table__, OUTCOME_COLUMNS) if postgresql else None

    def value(name: str) -> Any:
        if postgresql:
            return rows.c[name]
        # Not the column's own name: that one is SQLAlchemy's for the SET clause.
        return bindparam(f"new_{name}", type_=Run.__table__.c[name].type)

    worker_id = bindparam("worker_id", type_=Integer)
    status = value("status")
    if taken_back:  # queued again and not leased, or failed as "worker lost" (reap_statement)
        owner = or_(
            and_(Run.status == "queued", Run.worker_id.is_(None), Run.error == REQUEUE_ERROR),
            and_(Run.status == "failed", Run.worker_id == worker_id, Run.error == LOST_ERROR),
        )
    else:
        # Not `status = 'running'`: PostgreSQL may then use ix_runs_leases (test_query_plans.py).
        owner = and_(func.coalesce(Run.status, "") == "running", Run.worker_id == worker_id)
    statement = update(Run)
    if postgresql:
        statement = statement.where(Run.id == rows.c.id, Run.attempt == rows.c.attempt, owner)
    else:
        statement = statement.where(Run.id == value("id"), Run.attempt == value("attempt"), owner)
    return (
        statement.values(
            status=status,
            output=value("output"),
            error=value("error"),
            error_detail=value("error_detail"),
            started_at=value("started_at"),
            finished_at=value("finished_at"),
            locked_until=None,
            available_at=func.coalesce(value("available_at"), Run.available_at),
            cancelled_at=case(
                (status == "cancelled", value("finished_at")), else_=Run.cancelled_at
            ),
            # A retry leaves the worker; a reaper's requeue had cleared it.
            worker_id=case((status == "queued", None), else_=worker_id),
        )
        .returning(Run.id)
        .execution_options(synchronize_session=False)
    )


OUTCOME = {
    (postgresql, taken_back): outcome_statement(postgresql, taken_back)
    for postgresql in (True, False)
    for taken_back in (True, False)
}


def record_outcomes(
    session: Session, worker_id: int, rows: list[dict[str, Any]], taken_back: bool = False
) -> set[int]:
    """Stores finished attempts (rows of OUTCOME_COLUMNS), each only if this worker still holds
    that attempt's lease.

    With `taken_back`, each only if a reaper took that attempt back and nobody has touched the
    run since (queued again and not leased, or failed as "worker lost"): the attempt did end,
    and its real outcome replaces the reaper's guess. A run leased again by anyone is never
    written. A retry (`status` queued) leaves the worker and gets its `available_at`; the
    others keep theirs. Returns the ids stored.
    """
    if not rows:
        return set()
    postgresql = is_postgresql(session)
    statement = OUTCOME[postgresql, taken_back]
    if postgresql:
        payload = json_rows([{name: row[name] for name in OUTCOME_COLUMNS} for row in rows])
        return set(session.execute(statement, {"rows": payload, "worker_id": worker_id}).scalars())
    stored: set[int] = set()
    for row in rows:
        parameters = {f"new_{name}": row[name] for name in OUTCOME_COLUMNS}
        parameters["worker_id"] = worker_id
        stored.update(session.execute(statement, parameters).scalars())
    return stored
