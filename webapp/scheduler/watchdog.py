"""The overdue watchdog (the dead-man's switch): a worker step that flags the schedules a tick
has left undispatched for longer than the grace, clears the flag once they recover, logs each
change once, and reports on the queue of runs.

Overdue is defined once, in webapp.models (`schedule_overdue`, `run_overdue`). The panel, the
metrics and the health check compute it from the database at read time, so they work with no
worker alive; this step adds what needs a living worker: `schedules.overdue_since` and the logs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, false, func, not_, select, update
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from webapp.config import Settings
from webapp.database import is_postgresql, write_transaction
from webapp.models import Run, Schedule, Worker, run_status_is
from webapp.run_rules import overdue_runs, schedule_late, schedule_overdue
from webapp.scheduler.notify import record_overdue

log = logging.getLogger("webapp.scheduler")

# Rows each statement of one call changes at most: a herd of 100,000 overdue schedules is
# flagged over several short transactions (WatchResult.more), not one huge one.
WATCH_BATCH = 1000


@dataclass
class WatchResult:
    """What one call changed. `became_overdue` is where "a schedule became overdue" hooks
    (notifications): each id appears in exactly one call's result, across all workers."""

    became_overdue: list[int] = field(default_factory=list)  # schedule ids flagged now
    recovered: list[int] = field(default_factory=list)  # schedule ids whose flag was cleared
    more: bool = False  # a statement reached its limit: call again to continue
    queue_overdue: bool = False  # a queued run waits longer than the grace


def flag_overdue_schedules(
    session: Session, now: datetime, grace: timedelta, limit: int
) -> list[Row[int, int | None, datetime | None]]:
    """Sets overdue_since = now on up to `limit` overdue schedules not yet flagged: the late
    ones first (oldest fire time first), then those with an overdue run (models.schedule_overdue's
    two halves, each read through its indexes); returns (id, tenant_id, next_run_at) of those
    flipped."""
    late = flag_schedules(session, now, schedule_late(now, grace), limit, Schedule.next_run_at)
    if len(late) >= limit:
        return list(late)
    with_overdue_run = and_(
        Schedule.active, Schedule.id.in_(overdue_runs(now, grace, Run.schedule_id))
    )
    return [*late, *flag_schedules(session, now, with_overdue_run, limit - len(late))]


def flag_schedules(
    session: Session,
    now: datetime,
    condition: ColumnElement[bool],
    limit: int,
    *order: Any,
) -> Sequence[Row[int, int | None, datetime | None]]:
    """Sets overdue_since = now on up to `limit` schedules meeting `condition` not yet flagged,
    in `order` (then by id); returns (id, tenant_id, next_run_at) of those this statement
    flipped.

    The condition is part of the UPDATE, so of several workers only one flips (and reports)
    a row: PostgreSQL skips rows another transaction holds (a tick firing them, another
    watchdog) and re-checks the condition on rows committed meanwhile; SQLite has one writer.
    """
    candidates = (
        select(Schedule.id)
        .where(condition, Schedule.overdue_since.is_(None))
        .order_by(*order, Schedule.id)
        .limit(limit)
    )
    if is_postgresql(session):
        candidates = candidates.with_for_update(of=Schedule, skip_locked=True, key_share=True)
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
        query = query.with_for_update(of=Schedule, skip_locked=True, key_share=True)
    rows = session.execute(query).all()
    if rows:
        session.execute(
            update(Schedule)
            .where(Schedule.id.in_([row.id for row in rows]))
            .values(overdue_since=None)
            .execution_options(synchronize_session=False)
        )
    return rows


def watch_overdue(
    session: Session,
    now: datetime,
    grace: timedelta,
    queue_was_overdue: bool | None = None,
    limit: int = WATCH_BATCH,
    settings: Settings | None = None,
) -> WatchResult:
    """One transaction: flags newly overdue schedules, clears recovered ones (up to `limit`
    each), logs each change, and logs the queue's change of state.

    `queue_was_overdue` is the caller's memory of the last call's `queue_overdue` (None: no
    earlier call). The queue has no column for its state, so each worker remembers its own:
    with several workers alive each logs `queue_overdue` / `queue_recovered` once per change.
    A schedule that became overdue gets its `overdue` notifications in the same transaction
    (`settings`: the app's, by default).
    """
    with write_transaction(session):
        flagged = flag_overdue_schedules(session, now, grace, limit)
        record_overdue(session, settings, [row.id for row in flagged], now)
        recovered = clear_recovered_schedules(session, now, grace, limit)
        waiting = overdue_runs(now, grace, Run.id, Run.available_at).subquery()
        oldest = session.execute(
            select(waiting).order_by(waiting.c.available_at, waiting.c.id).limit(1)
        ).first()
    for row in flagged:
        due = row.next_run_at
        late = due is not None and due < now - grace
        log.warning(
            "schedule_overdue",
            extra={
                "action": "schedule_overdue",
                "schedule_id": row.id,
                "tenant_id": row.tenant_id,
                **(
                    {"next_run_at": due.isoformat(), "overdue_for": seconds(now - due)}
                    if late
                    else {"reason": "a run could start more than the grace ago and has not"}
                ),
            },
        )
    for row in recovered:
        log.info(
            "schedule_recovered",
            extra={
                "action": "schedule_recovered",
                "schedule_id": row.id,
                "tenant_id": row.tenant_id,
                "overdue_since": row.overdue_since.isoformat(),
                "flagged_for": seconds(now - row.overdue_since),
            },
        )
    if oldest is not None and queue_was_overdue is not True:
        log.warning(
            "queue_overdue",
            extra={
                "action": "queue_overdue",
                "run_id": oldest.id,
                "available_at": oldest.available_at.isoformat(),
                "overdue_for": seconds(now - oldest.available_at),
            },
        )
    elif oldest is None and queue_was_overdue:
        log.info("queue_recovered", extra={"action": "queue_recovered"})
    return WatchResult(
        became_overdue=[row.id for row in flagged],
        recovered=[row.id for row in recovered],
        more=len(flagged) >= limit or len(recovered) >= limit,
        queue_overdue=oldest is not None,
    )


def seconds(delta: timedelta) -> int:
    return int(delta.total_seconds())


# Why a run leased and not started waits, by the kind of worker that holds it.
NOT_TAKEN_BY_CELERY = "no Celery worker has taken it"
NO_FREE_SLOT = "its worker has no free slot for it yet"


def alive_worker(now: datetime, lock_ttl: timedelta) -> ColumnElement[bool]:
    """A worker that has not stopped and has heartbeated within two lock TTLs (it heartbeats
    three times per TTL)."""
    return and_(Worker.stopped_at.is_(None), Worker.last_heartbeat_at >= now - 2 * lock_ttl)


def queue_stall_reason(session: Session, now: datetime, lock_ttl: timedelta) -> str:
    """Why queued runs wait, in words, from the workers table (one statement).

    The slots are the concurrency of the workers alive that run jobs (a Celery sender leases
    and sends, and runs nothing); a slot is busy when its worker holds a running run (one may
    hold more runs than slots, leased and waiting for one: shown as full).
    """
    held = (
        select(func.count(Run.id))
        .where(run_status_is("running"), Run.worker_id == Worker.id)
        .correlate(Worker)
        .scalar_subquery()
    )
    alive = (
        select(Worker.kind, Worker.concurrency, held.label("busy"))
        .where(alive_worker(now, lock_ttl))
        .subquery()
    )
    kinds = {
        kind: (int(slots), int(busy))
        for kind, slots, busy in session.execute(
            select(alive.c.kind, func.sum(alive.c.concurrency), func.sum(alive.c.busy)).group_by(
                alive.c.kind
            )
        )
    }
    if not kinds:
        return "no worker is alive"
    if not kinds.keys() - {"celery-worker"}:
        return "no scheduler worker is alive to lease it"
    if "celery-sender" in kinds and "celery-worker" not in kinds:
        return "no Celery worker is alive"
    running = [each for kind, each in kinds.items() if kind != "celery-sender"]
    slots, busy = sum(slots for slots, _ in running), sum(busy for _, busy in running)
    if busy >= slots:
        return f"all workers are busy ({slots} of {slots} slots running)"
    return "workers are alive but have not taken it yet"


def held_run_reasons(session: Session, run_ids: list[int]) -> dict[int, str]:
    """Why runs leased and not started wait, by run id, from the kind of worker that holds
    each (one statement, none without runs)."""
    if not run_ids:
        return {}
    holders = session.execute(
        select(Run.id, Worker.kind)
        .outerjoin(Worker, Worker.id == Run.worker_id)
        .where(Run.id.in_(run_ids))
    ).all()
    return {
        run_id: NOT_TAKEN_BY_CELERY if kind == "celery-sender" else NO_FREE_SLOT
        for run_id, kind in holders
    }
