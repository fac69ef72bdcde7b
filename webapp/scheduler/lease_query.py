"""Which queued runs a lease takes, fair between tenants and within each tenant's cap, and what
it returns of each (LEASED_COLUMNS).

Only the query (which ids, in which order); the lease's UPDATE that marks them running is
runs.lease_statement. PostgreSQL's version locks the rows it picks (SKIP LOCKED) and first finds
the lease's window of tenants (lease_window_statement), locking the capped ones among them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Integer,
    Text,
    and_,
    any_,
    bindparam,
    case,
    cast,
    func,
    literal,
    null,
    select,
    text,
    true,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY

from webapp.database import UTCDateTime
from webapp.models import Run, Schedule, Tenant, run_status_is

# What a lease returns of each run (a worker's LeasedRun): its columns, its tenant's slug and its
# schedule's key (correlated subqueries, which spare the lease a second query). The arguments as
# their JSON text, decoded run by run (leases.leased_run): a stored value that is no JSON of an
# object fails its own run, never the lease of the others.
LEASED_COLUMNS = (
    Run.id,
    Run.tenant_id,
    Run.schedule_id,
    Run.job,
    cast(Run.args, Text).label("args"),
    Run.trigger,
    Run.scheduled_for,
    Run.idempotency_key,
    Run.attempt,
    Run.max_attempts,
    Run.started_at,
    select(Tenant.slug).where(Tenant.id == Run.tenant_id).scalar_subquery().label("tenant_slug"),
    select(Schedule.key)
    .where(Schedule.id == Run.schedule_id)
    .scalar_subquery()
    .label("schedule_key"),
)

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

QUEUED = run_status_is("queued")


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
    return select(func.count()).where(group, run_status_is("running")).scalar_subquery()


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
        .with_for_update(skip_locked=True, key_share=True)
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


def lease_window_statement() -> Any:
    """PostgreSQL: the first statement of a lease transaction; returns the window's tenants in
    rotation order from the one after `:after` (this worker's cursor), each with `open` and
    `locked`.

    It walks the tenants with queued runs from the cursor, wrapping around, until it has passed
    `:limit` open ones (the LATERAL step) or come back to where it started, and returns each
    tenant it passed. Tenants passed over (nothing available yet, or full at their cap) cost a
    probe each and count for nothing, so a walk that has passed `:limit` tenants without
    filling the window reads the queue's head (ix_runs_queue, up to 8 x `:limit` runs
    available now): if that is all of them, the window is their tenants instead, in rotation
    order up to the `:limit`-th open one, however many tenants have runs queued for later (a
    retry's backoff, Run once later, fire ahead, jitter). While no run is available, it walks
    none (one probe of the queue's head).

    It locks, in id order (no deadlock between leases), the open tenants that are capped: two
    leases of one capped tenant so take turns, and the second one's lease statement (a new
    snapshot under READ COMMITTED) counts the runs the first has leased. NO KEY UPDATE: the
    tick's inserts of runs (KEY SHARE on their tenant) go on meanwhile."""
    statement = text(
        """
WITH RECURSIVE available AS MATERIALIZED (
    -- Up to 8 x :limit runs available now, the tenant-less ones too: the conditions of
    -- ix_runs_queue and no other, so that PostgreSQL reads that index even while its
    -- statistics have not seen the queue yet (in a herd). Read only by a walk that has passed
    -- :limit tenants without filling the window (the CASEs below).
    SELECT tenant_id, available_at FROM runs
    WHERE status = 'queued'
      AND available_at <= COALESCE(CAST(:now AS TIMESTAMP WITH TIME ZONE), statement_timestamp())
    ORDER BY available_at, id
    LIMIT 8 * :limit
),
heads AS MATERIALIZED (
    -- The tenants of `available` (and each one's oldest available_at), in rotation order from
    -- the cursor: one row of two arrays, which the walk takes one by one.
    SELECT array_agg(tenant_id ORDER BY tenant_id <= COALESCE(CAST(:after AS INTEGER), 0),
                                        tenant_id) AS tenants,
           array_agg(oldest ORDER BY tenant_id <= COALESCE(CAST(:after AS INTEGER), 0),
                                     tenant_id) AS oldest
    FROM (SELECT tenant_id, min(available_at) AS oldest FROM available
          WHERE tenant_id IS NOT NULL GROUP BY tenant_id) AS a
),
lease_window(step, tenant_id, first_id, opened, open, head) AS (
    -- No walk while no run is available (the same conditions; the oldest, not EXISTS:
    -- PostgreSQL drops an EXISTS's ORDER BY, and where its statistics say most runs are
    -- queued it read the table from its start, past every finished run). `head`: the
    -- position in `heads` of a tenant taken from there, NULL for one the walk's probe found.
    SELECT 0, CAST(:after AS INTEGER), CAST(NULL AS INTEGER), 0, false, CAST(NULL AS INTEGER)
    WHERE (SELECT available_at FROM runs WHERE status = 'queued'
           AND available_at <= COALESCE(CAST(:now AS TIMESTAMP WITH TIME ZONE),
                                        statement_timestamp())
           ORDER BY available_at LIMIT 1) IS NOT NULL
  UNION ALL
    SELECT w.step + 1, h.tenant_id, COALESCE(w.first_id, h.tenant_id),
           CASE WHEN h.head = 1 THEN 0 ELSE w.opened END + CAST(n.open AS INTEGER), n.open,
           h.head
    FROM lease_window AS w
    CROSS JOIN LATERAL (
        -- The next tenant with queued runs after `w.tenant_id` (its first index entry, so its
        -- oldest available_at), else the first tenant: one probe of ix_runs_tenant_queue, two
        -- when wrapping.
        SELECT p.tenant_id, p.available_at, CAST(NULL AS INTEGER) AS head
        FROM ((SELECT tenant_id, available_at FROM runs
               WHERE status = 'queued' AND tenant_id > w.tenant_id
               ORDER BY tenant_id, available_at LIMIT 1)
              UNION ALL
              (SELECT tenant_id, available_at FROM runs
               WHERE status = 'queued' AND tenant_id IS NOT NULL
               ORDER BY tenant_id, available_at LIMIT 1)
              LIMIT 1) AS p
        WHERE w.head IS NULL
          AND CASE WHEN w.step < :limit THEN true
                   ELSE (SELECT count(*) FROM available) = 8 * :limit END
      UNION ALL
        -- Past :limit tenants, when `available` holds every run available now: the walk
        -- starts again from the first of `heads` and goes through them.
        SELECT s.tenants[COALESCE(w.head, 0) + 1], s.oldest[COALESCE(w.head, 0) + 1],
               COALESCE(w.head, 0) + 1
        FROM heads AS s
        WHERE COALESCE(w.head, 0) < cardinality(s.tenants)
          AND CASE WHEN w.head IS NOT NULL THEN true
                   WHEN w.step < :limit THEN false
                   ELSE (SELECT count(*) FROM available) < 8 * :limit END
    ) AS h
    CROSS JOIN LATERAL (
        SELECT COALESCE((SELECT max_running FROM tenants WHERE id = h.tenant_id),
                        CAST(:max_running AS INTEGER)) AS cap
    ) AS c
    CROSS JOIN LATERAL (
        -- `open`: it has a run available now (the parameter now, else the clock) and looks to
        -- have room (a hint outside the lock; the lease statement counts again under it).
        SELECT COALESCE(h.available_at <= COALESCE(CAST(:now AS TIMESTAMP WITH TIME ZONE),
                                                   statement_timestamp())
                   AND CASE WHEN c.cap IS NULL THEN true ELSE
                   (SELECT count(*) FROM runs AS r WHERE r.tenant_id = h.tenant_id
                    AND r.status = 'running') < c.cap END, false) AS open
    ) AS n
    WHERE w.opened < :limit
      AND (h.head IS NOT NULL OR h.tenant_id IS DISTINCT FROM w.first_id)
),
passed AS (
    -- The walk's tenants; those from `heads` only, if it went there.
    SELECT step, tenant_id, open FROM lease_window
    WHERE step > 0
      AND (head IS NOT NULL OR NOT EXISTS (SELECT FROM lease_window WHERE head IS NOT NULL))
),
locked AS MATERIALIZED (
    SELECT t.id FROM tenants AS t
    WHERE t.id IN (SELECT tenant_id FROM passed WHERE open)
      AND COALESCE(t.max_running, CAST(:max_running AS INTEGER)) IS NOT NULL
    ORDER BY t.id
    FOR NO KEY UPDATE
)
SELECT p.tenant_id, p.open, l.id IS NOT NULL AS locked
FROM passed AS p LEFT JOIN locked AS l ON l.id = p.tenant_id
ORDER BY p.step
"""
    )
    return statement.bindparams(
        bindparam("now", type_=UTCDateTime),
        bindparam("limit", type_=Integer),
        bindparam("after", type_=Integer),
        bindparam("max_running", type_=Integer),
    )


LEASE_WINDOW = lease_window_statement()
