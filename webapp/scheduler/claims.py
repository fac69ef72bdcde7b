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
from weakref import WeakKeyDictionary

from sqlalchemy import (
    Integer,
    Interval,
    Select,
    and_,
    any_,
    bindparam,
    case,
    false,
    func,
    literal,
    not_,
    null,
    or_,
    select,
    text,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine, Row
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
    Schedule.jitter_seconds,
    # The tenant's default jitter, for a schedule without its own (a system schedule has none).
    select(Tenant.jitter_seconds)
    .where(Tenant.id == Schedule.tenant_id)
    .scalar_subquery()
    .label("tenant_jitter_seconds"),
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


# --- the lease: fair between tenants, within each tenant's cap -----------------------------------
#
# A lease serves tenants with available queued runs in turns: each run's turn is its rank among
# its tenant's queued runs (oldest first), and the lease takes the lowest turns (ties: oldest
# first), each tenant at most its share (limit / tenants served). A tenant's cap
# (tenants.max_running, else SCHEDULER_MAX_RUNNING) bounds its share by cap - running; on
# PostgreSQL that count is sound only under the capped tenant's row lock, which the lease
# transaction takes first (lease_window_statement, passed as :locked).
#
# Which tenants: on PostgreSQL a window of at most `limit` of them, found by rotation. Each worker
# keeps a cursor, the last tenant its previous window reached; the next window is the tenants
# after it that have an available run and (by a count outside the lock: a hint) room under their
# cap, wrapping around to the first tenant. So a lease costs O(runs leased), not O(tenants with
# work); the rotation, not a count of each tenant's running runs, decides who goes next.
# SQLite, one writer at a time, visits every tenant with queued runs on each lease (its installs
# are small), and a run's turn also counts its tenant's runs running: a tenant with 10,000 queued
# runs and 16 running waits while one with 0 running starts its first run.

QUEUED = Run.status == "queued"


def queued_tenants() -> Any:
    """Every tenant with a queued run, in id order, one index probe each (a loose index scan of
    ix_runs_tenant_queue): finding who has work never reads a deep queue. The recursion ends on
    a NULL row, which the join with `tenants` drops."""
    first = select(func.min(Run.tenant_id).label("tenant_id")).where(QUEUED)
    found = first.cte("queued_tenants", recursive=True)
    following = select(func.min(Run.tenant_id)).where(QUEUED, Run.tenant_id > found.c.tenant_id)
    return found.union_all(
        select(following.scalar_subquery()).where(found.c.tenant_id.is_not(None))
    )


def window_tenants() -> Any:
    """PostgreSQL: the tenants of this lease's window (:window, lease_window_statement's)."""
    window = func.unnest(bindparam("window", type_=ARRAY(Integer))).label("tenant_id")
    return select(window).subquery("lease_window")


def running_count(group: Any) -> Any:
    return select(func.count()).where(group, Run.status == "running").scalar_subquery()


def lease_groups(
    now: Any, limit: Any, default_cap: Any, locked: Any, tenants: Any, whole_queue: bool
) -> Any:
    """The groups this lease serves, each with how many runs it may take (`take`) and how
    many turns it is behind (`ahead`: its runs running now with `whole_queue`, else 0). A
    group is one of `tenants` with available queued runs, or the tenant-less (system) runs,
    which are never capped.

    `locked` is true for the tenants whose row this transaction has locked: a capped tenant
    without it has no room in this lease (the next one locks it). Without `whole_queue` (the
    PostgreSQL window, whose rotation spreads the turns) only capped tenants' running runs are
    counted: the planner, whose statistics lag behind a herd, counts them through the partial
    index of all running runs (ix_runs_leases), one whole scan per count."""
    cap = func.coalesce(Tenant.max_running, default_cap)
    tenant_running = running_count(Run.tenant_id == tenants.c.tenant_id)
    if not whole_queue:
        tenant_running = case((cap.is_(None), 0), else_=tenant_running)
    tenant_groups = select(
        tenants.c.tenant_id,
        select(func.min(Run.available_at))
        .where(QUEUED, Run.tenant_id == tenants.c.tenant_id)
        .scalar_subquery()
        .label("head_at"),
        tenant_running.label("running"),
        cap.label("cap"),
        locked.label("locked"),
    ).join_from(tenants, Tenant, Tenant.id == tenants.c.tenant_id)
    system_group = select(
        null(),
        func.min(Run.available_at),
        running_count(Run.tenant_id.is_(None)) if whole_queue else literal(0),
        null(),
        true(),
    ).where(QUEUED, Run.tenant_id.is_(None))
    groups = union_all(tenant_groups, system_group).cte("lease_groups").prefix_with("MATERIALIZED")
    room = case(
        (groups.c.cap.is_(None), limit),
        (groups.c.locked, groups.c.cap - groups.c.running),
        else_=0,
    )
    ahead = groups.c.running if whole_queue else literal(0)
    # At most `limit` groups, the least served first: a run of any other would come after
    # `limit` runs of these.
    served = (
        select(groups.c.tenant_id, ahead.label("ahead"), room.label("room"))
        .where(groups.c.head_at <= now, room > 0)
        .order_by(ahead, groups.c.head_at)
        .limit(limit)
        .subquery("served")
    )
    # Each its share of the lease, about limit / groups, within its room.
    share = (limit + func.count().over() - 1) // func.count().over()
    return select(
        served.c.tenant_id,
        served.c.ahead,
        case((served.c.room < share, served.c.room), else_=share).label("take"),
    ).cte("lease_served")


def oldest_queued(now: Any, group: Any, take: Any) -> Any:
    """A group's oldest available queued runs, up to `take`; rows another lease holds are
    skipped, so that concurrent leases take disjoint runs."""
    return (
        select(Run.id, Run.available_at)
        .where(QUEUED, Run.available_at <= now, group)
        .order_by(Run.available_at, Run.id)
        .limit(take)
        .with_for_update(skip_locked=True)
    )


def lease_candidates_postgresql(now: Any, served: Any) -> Any:
    """Each served group's runs through a LATERAL subquery that stops after its share: a
    tenant's deep queue costs an index probe, not a scan. The tenant-less group has its own
    (`tenant_id = NULL` matches nothing)."""
    tenant_runs = oldest_queued(now, Run.tenant_id == served.c.tenant_id, served.c.take)
    system_runs = oldest_queued(
        now, and_(served.c.tenant_id.is_(None), Run.tenant_id.is_(None)), served.c.take
    )
    parts = []
    for runs in (tenant_runs.lateral("tenant_runs"), system_runs.lateral("system_runs")):
        rank = func.row_number().over(
            partition_by=served.c.tenant_id, order_by=(runs.c.available_at, runs.c.id)
        )
        parts.append(
            select(runs.c.id, runs.c.available_at, (served.c.ahead + rank).label("turn")).join_from(
                served, runs, true()
            )
        )
    return union_all(*parts)


def lease_candidates_sqlite(now: Any, served: Any) -> Any:
    """SQLite has no LATERAL: the served groups' available runs ranked by a window function
    (this reads their whole available queue; the write lock makes it safe, not fast)."""
    ranked = (
        select(
            Run.id,
            Run.available_at,
            served.c.ahead,
            served.c.take,
            func.row_number()
            .over(partition_by=served.c.tenant_id, order_by=(Run.available_at, Run.id))
            .label("rank"),
        )
        .join_from(served, Run, Run.tenant_id.is_not_distinct_from(served.c.tenant_id))
        .where(QUEUED, Run.available_at <= now)
        .subquery("ranked")
    )
    return select(
        ranked.c.id, ranked.c.available_at, (ranked.c.ahead + ranked.c.rank).label("turn")
    ).where(ranked.c.rank <= ranked.c.take)


def lease_query(now: Any, limit: Any, skip_locked: bool) -> Any:
    """The ids a lease takes: the lowest turns, fairly between tenants and within their caps
    (see above); `skip_locked` builds PostgreSQL's version, else SQLite's. Parameters besides
    `now` and `limit`: max_running (the default cap) and, on PostgreSQL, window (the tenants
    this lease may serve) and locked (those of them that are capped and that this transaction
    has locked).

    MATERIALIZED CTEs (as the watchdog's flag_overdue_schedules): as a subquery, PostgreSQL
    may run it again for each row it updates (a nested loop), skipping the rows this statement
    has just locked, so the LIMIT would not bound the lease."""
    default_cap = bindparam("max_running", type_=Integer)
    if skip_locked:
        locked: Any = Tenant.id == any_(bindparam("locked", type_=ARRAY(Integer)))
        served = lease_groups(now, limit, default_cap, locked, window_tenants(), False)
        candidates = lease_candidates_postgresql(now, served)
    else:  # SQLite: BEGIN IMMEDIATE already holds every tenant
        served = lease_groups(now, limit, default_cap, true(), queued_tenants(), True)
        candidates = lease_candidates_sqlite(now, served)
    chosen = candidates.cte("lease_candidates").prefix_with("MATERIALIZED")
    leased = (
        select(chosen.c.id)
        .order_by(chosen.c.turn, chosen.c.available_at, chosen.c.id)
        .limit(limit)
        .cte("leased")
        .prefix_with("MATERIALIZED")
    )
    return select(leased.c.id)


# The next tenant with queued runs after `w.tenant_id` (its first index entry, so its oldest
# available_at), else the first tenant: one probe of ix_runs_tenant_queue, two when wrapping.
# `open`: it has an available run and looks to have room (the count is a hint outside the lock;
# the lease statement counts again under it).
NEXT_TENANT = """
SELECT h.tenant_id,
       COALESCE(h.available_at <= {now} AND CASE WHEN c.cap IS NULL THEN true ELSE
           (SELECT count(*) FROM runs AS r WHERE r.tenant_id = h.tenant_id
            AND r.status = 'running') < c.cap END, false) AS open
FROM ((SELECT tenant_id, available_at FROM runs
       WHERE status = 'queued' AND tenant_id > w.tenant_id
       ORDER BY tenant_id, available_at LIMIT 1)
      UNION ALL
      (SELECT tenant_id, available_at FROM runs
       WHERE status = 'queued' AND tenant_id IS NOT NULL
       ORDER BY tenant_id, available_at LIMIT 1)
      LIMIT 1) AS h
CROSS JOIN LATERAL (
    SELECT COALESCE((SELECT max_running FROM tenants WHERE id = h.tenant_id),
                    CAST(:max_running AS INTEGER)) AS cap
) AS c
"""


def lease_window_statement(database_clock: bool) -> Any:
    """PostgreSQL: the first statement of a lease transaction. Walks the tenants with queued
    runs from the one after `:after` (this worker's cursor), wrapping around, until it has
    passed `:limit` open ones (NEXT_TENANT) or come back to where it started; returns each
    tenant it passed, in that order, with `open` and `locked`. It locks, in id order (no
    deadlock between leases), the open tenants that are capped: two leases of one capped tenant
    so take turns, and the second one's lease statement (a new snapshot under READ COMMITTED)
    counts the runs the first has leased. NO KEY UPDATE: the tick's inserts of runs (KEY SHARE
    on their tenant) go on meanwhile.

    Tenants passed over (nothing available yet, or full at their cap) cost a probe each and
    count for nothing: the window's cost is O(limit) plus those."""
    now = "statement_timestamp()" if database_clock else ":now"
    step = NEXT_TENANT.format(now=now)
    statement = text(
        f"""
WITH RECURSIVE lease_window(step, tenant_id, first_id, opened, open) AS (
    SELECT 0, CAST(:after AS INTEGER), CAST(NULL AS INTEGER), 0, false
  UNION ALL
    SELECT w.step + 1, n.tenant_id, COALESCE(w.first_id, n.tenant_id),
           w.opened + CAST(n.open AS INTEGER), n.open
    FROM lease_window AS w
    CROSS JOIN LATERAL ({step}) AS n
    WHERE w.opened < :limit AND n.tenant_id IS DISTINCT FROM w.first_id
),
locked AS MATERIALIZED (
    SELECT t.id FROM tenants AS t
    WHERE t.id IN (SELECT tenant_id FROM lease_window WHERE open)
      AND COALESCE(t.max_running, CAST(:max_running AS INTEGER)) IS NOT NULL
    ORDER BY t.id
    FOR NO KEY UPDATE
)
SELECT w.tenant_id, w.open, l.id IS NOT NULL AS locked
FROM lease_window AS w LEFT JOIN locked AS l ON l.id = w.tenant_id
WHERE w.step > 0
ORDER BY w.step
"""
    )
    types = [] if database_clock else [bindparam("now", type_=UTCDateTime)]
    return statement.bindparams(
        *types,
        bindparam("limit", type_=Integer),
        bindparam("after", type_=Integer),
        bindparam("max_running", type_=Integer),
    )


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
    leased = (
        lease_query(now, bindparam("limit", type_=Integer), skip_locked)
        .cte("lease_ids")
        .prefix_with("MATERIALIZED")
    )
    # The first :start_new leased (by id) get their start mark here (see start_statement):
    # a second UPDATE of the same rows in the same transaction would write each row, and
    # every index entry of it, twice. Just leased, their lease holds: the mark's fence is met.
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
        .returning(
            *LEASED_COLUMNS, tenant_slug.label("tenant_slug"), schedule_key.label("schedule_key")
        )
        .execution_options(synchronize_session=False)
    )


LEASE_SKIP_LOCKED = lease_statement(skip_locked=True)
LEASE_BY_DATABASE_CLOCK = lease_statement(skip_locked=True, database_clock=True)
LEASE = lease_statement(skip_locked=False)
LEASE_WINDOW = lease_window_statement(database_clock=False)
LEASE_WINDOW_BY_DATABASE_CLOCK = lease_window_statement(database_clock=True)
# Each worker's cursor, by database (engine) and worker id: the last tenant its previous lease
# window reached. Only a starting point: a lost or stale one costs nothing but a window
# somewhere else.
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
    (on PostgreSQL after the statement that finds this lease's window of tenants and locks its
    capped ones), fairly between tenants and never beyond a tenant's cap (`max_running`: the
    default cap, SCHEDULER_MAX_RUNNING). The first `start_new` of them (by id) are marked
    started too (their `started_at` returned set), as mark_started would.

    `now=None`: the database's clock on PostgreSQL, the host's on SQLite.
    """
    parameters: dict[str, Any] = {
        "limit": limit,
        "worker_id": worker_id,
        "max_running": max_running,
        "start_new": start_new,
    }
    connection = session.connection()
    if is_postgresql(session) and now is None:
        statement = LEASE_BY_DATABASE_CLOCK
        parameters["lock_ttl"] = lock_ttl
        window = LEASE_WINDOW_BY_DATABASE_CLOCK
    else:
        statement = LEASE_SKIP_LOCKED if is_postgresql(session) else LEASE
        now = now or utcnow()
        parameters.update(now=now, locked_until=now + lock_ttl)
        window = LEASE_WINDOW
    if is_postgresql(session):
        cursors = LEASE_CURSORS.setdefault(connection.engine, {})
        after = {"after": cursors.get(worker_id)}
        tenants = connection.execute(window, {**parameters, **after}).all()
        if tenants:  # on, even if nothing is leased: tenants full at their cap starve nobody
            cursors[worker_id] = tenants[-1].tenant_id
        parameters["window"] = [row.tenant_id for row in tenants if row.open]
        parameters["locked"] = [row.tenant_id for row in tenants if row.locked]
    return connection.execute(statement, parameters).all()


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


def among_ids(column: Any, postgresql: bool) -> Any:
    """`column` among the list parameter :ids, for a statement built once: on PostgreSQL as one
    array parameter, since an expanding IN renders a placeholder per id on every call (in the
    worker's main thread, for batches of hundreds); SQLite has no arrays."""
    if postgresql:
        return column == any_(bindparam("ids", type_=ARRAY(Integer)))
    return column.in_(bindparam("ids", expanding=True))


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
            among_ids(Run.id, postgresql=database_clock),  # the database's clock: PostgreSQL's
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
        if row["status"] == "cancelled":
            values["cancelled_at"] = row["finished_at"]
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
        "cancelled_at = CASE WHEN v.status = 'cancelled' THEN v.finished_at "
        "ELSE r.cancelled_at END, "
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


# --- cancelling a run (webapp.services.cancellation) --------------------------------------------


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
