"""Leases on runs: take queued runs, keep them alive, take back those of dead workers."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, case, or_, update
from sqlalchemy.orm import Session

from webapp.database import UTCDateTime, write_transaction
from webapp.models import Run, Trigger
from webapp.scheduler import claims
from webapp.scheduler.claims import LOST_ERROR, REQUEUE_ERROR
from webapp.scheduler.notify import FinishedAttempt, record_finished_runs

log = logging.getLogger("webapp.scheduler")

# What a reaper writes on a run whose worker was lost after leasing it and before starting it.
NOT_STARTED_ERROR = (
    "the worker that leased it was lost before starting it; queued again, no attempt spent"
)
STOPPED_LOST_ERROR = "asked to stop, and its worker was lost before it stopped; not run again"


@dataclass(frozen=True)
class LeasedRun:
    id: int
    tenant_id: int | None
    tenant_slug: str | None
    schedule_id: int | None
    schedule_key: str | None
    job: str
    args: dict[str, Any]
    trigger: Trigger
    scheduled_for: datetime
    idempotency_key: str
    attempt: int
    max_attempts: int
    started_at: datetime | None  # None until the start mark (the lease's or claims.mark_started)


def lease_once(
    session: Session,
    worker_id: int,
    now: datetime | None,
    lock_ttl: timedelta,
    limit: int,
    max_running: int | None = None,
) -> list[LeasedRun]:
    """Takes up to `limit` queued runs whose start time has come, in one transaction: fairly
    between tenants, and never more running at once of a tenant than its cap (its own
    `max_running`, else `max_running` here: SCHEDULER_MAX_RUNNING; None: no cap).

    `now=None` reads the database's clock in the lease statement itself.
    """
    if limit <= 0:
        return []
    with write_transaction(session):
        rows = claims.lease_runs(session, worker_id, now, lock_ttl, limit, max_running)
    return leased_runs(rows, worker_id)


@dataclass(frozen=True)
class Lease:
    """What one lease transaction gave: the runs leased (by id) and the start marks written."""

    runs: list[LeasedRun]
    started: set[int]


def lease_with_starts(
    session: Session,
    worker_id: int,
    now: datetime | None,
    lock_ttl: timedelta,
    limit: int,
    waiting: list[int],
    start_new: int,
    max_running: int | None = None,
) -> Lease:
    """A worker's lease and the start marks of the runs its free slots take next, in one
    transaction (one commit for both): `waiting`, runs it leased before, and the first
    `start_new` (by id) of the up to `limit` runs leased now (marked by the lease statement
    itself). Only runs marked may start (claims.mark_started). Fair and capped as
    lease_once."""
    with write_transaction(session):
        rows = (
            claims.lease_runs(
                session, worker_id, now, lock_ttl, limit, max_running, start_new=start_new
            )
            if limit > 0
            else []
        )
        leased = leased_runs(rows, worker_id)
        marked = {run.id for run in leased if run.started_at is not None}
        # A lease that marks nothing (bench.unfair_lease's) leaves its runs to mark_started.
        unmarked = [run.id for run in leased[:start_new] if run.id not in marked]
        started = claims.mark_started(session, worker_id, waiting + unmarked, now)
    return Lease(leased, started | marked)


def leased_runs(rows: Sequence[Any], worker_id: int) -> list[LeasedRun]:
    leased = [
        LeasedRun(
            id=row.id,
            tenant_id=row.tenant_id,
            tenant_slug=row.tenant_slug,
            schedule_id=row.schedule_id,
            schedule_key=row.schedule_key,
            job=row.job,
            args=row.args,
            trigger=row.trigger,
            scheduled_for=row.scheduled_for,
            idempotency_key=row.idempotency_key,
            attempt=row.attempt,
            max_attempts=row.max_attempts,
            started_at=row.started_at,
        )
        for row in sorted(rows, key=lambda r: r.id)
    ]
    if log.isEnabledFor(logging.DEBUG):  # `run_started` is logged when a slot starts the job
        for run in leased:
            log.debug(
                "run_leased",
                extra={
                    "action": "run_leased",
                    "run_id": run.id,
                    "attempt": run.attempt,
                    "worker_id": worker_id,
                },
            )
    return leased


def start_runs(
    session: Session, worker_id: int, run_ids: list[int], now: datetime | None = None
) -> set[int]:
    """Writes the start mark of runs a worker's slots are about to start, in one transaction;
    returns those marked: only they may start (the others' leases have passed or are no longer
    this worker's). `now=None` reads the database's clock in the statement itself."""
    if not run_ids:
        return set()
    with write_transaction(session):
        return claims.mark_started(session, worker_id, run_ids, now)


def renew_leases(
    session: Session, worker_id: int, run_ids: list[int], now: datetime, lock_ttl: timedelta
) -> dict[int, bool]:
    """The worker's heartbeat for the jobs it holds: a lease that is renewed never expires.

    Returns the ids renewed, each with whether an admin asked that run to stop: a run of
    `run_ids` missing from them is no longer this worker's (a reaper took it back), and the
    worker must not start it or store over it.
    """
    if not run_ids:
        return {}
    with write_transaction(session):
        return claims.extend_leases(session, worker_id, run_ids, now + lock_ttl)


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
        .where(Run.status == "running", Run.locked_until < now)
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


def reap_once(session: Session, now: datetime, settings: Mapping[str, Any] | None = None) -> int:
    """Takes back runs whose lease expired: queued again, or failed when attempts are spent;
    a run its worker never started is queued again without spending an attempt.

    A run failed so is a failure of its schedule like any other: counted, and notified in the
    same transaction (scheduler.notify). `settings`: the app's by default."""
    with write_transaction(session):
        reaped = session.connection().execute(REAP, {"now": now}).all()
        lost = [
            FinishedAttempt(run_id, schedule_id, succeeded=False)
            for run_id, status, schedule_id, _error in sorted(reaped)
            if status == "failed"
        ]
        if lost:
            record_finished_runs(session, settings, lost, now)
    for run_id, status, _schedule_id, error in reaped:
        log.warning(
            "run_lease_expired",
            extra={
                "action": "run_lease_expired",
                "run_id": run_id,
                "requeued": status == "queued",
                "cancelled": status == "cancelled",
                "started": error != NOT_STARTED_ERROR,
            },
        )
    return len(reaped)


def release_leases(session: Session, worker_id: int, run_ids: list[int]) -> int:
    """On shutdown: unfinished runs go back to the queue, in their place (available_at kept),
    and the attempt does not count."""
    if not run_ids:
        return 0
    with write_transaction(session):
        released = (
            session.execute(
                update(Run)
                .where(Run.id.in_(run_ids), Run.worker_id == worker_id, Run.status == "running")
                .values(
                    status="queued",
                    worker_id=None,
                    locked_until=None,
                    attempt=Run.attempt - 1,
                )
                .returning(Run.id)
                .execution_options(synchronize_session=False)
            )
            .scalars()
            .all()
        )
    for run_id in released:
        log.info("run_released", extra={"action": "run_released", "run_id": run_id})
    return len(released)
