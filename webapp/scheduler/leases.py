"""Leases on runs: take queued runs, mark them started, keep them alive, take back those of dead
workers; each step one transaction (the statements are runs.py's).

The start mark, the one protocol between a worker's lease and its slots: a slot starts only a
run whose `started_at` is written, so that a run leased and never started goes back to the queue
without spending an attempt if its worker is lost (the reaper tells them apart by the mark).
1. Each round the pool says what its free slots take next (pool.to_start): runs leased before
   and still waiting, and how many of the runs leased now.
2. lease_with_starts writes those marks in the lease's own transaction: the lease statement
   marks the first `start_new` runs it leases, runs.mark_started the waiting ones. Both are
   fenced (this worker's lease, not passed): a run not marked is no longer this worker's.
3. The pool starts the marked runs and drops the others, never started (pool.start_marked).
4. A marked run still waiting for a slot LONG_JOB_SECONDS later (behind a job that ran longer
   than the batch foresaw) loses its mark: the pool first, so that no slot starts it
   (pool.stale_marks), then the database, in the next lease's transaction (runs.unmark_started).
   A mark can so be wrong (a run marked, never started, its attempt spent if the worker is lost)
   only from the lease to that transaction: about LONG_JOB_SECONDS and a round.
A Celery worker's take-over writes the mark itself (runs.take_over).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from webapp.config import Settings
from webapp.database import decode_json_object, write_transaction
from webapp.models import Trigger
from webapp.scheduler import runs
from webapp.scheduler.notify import FinishedAttempt, record_finished_runs

log = logging.getLogger("webapp.scheduler")


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
    started_at: datetime | None  # None until the start mark (the lease's or runs.mark_started)
    # Why the stored row cannot be run (its arguments cannot be decoded), or None: the run then
    # fails alone with this reason and its job is not called (execution.run_job).
    unreadable: str | None = None


def leased_run(row: Any) -> LeasedRun:
    """A row of LEASED_COLUMNS as a LeasedRun, its arguments decoded from their JSON text."""
    fields = dict(zip(row._fields, row, strict=True))  # cheaper than row._asdict()
    fields["args"], fields["unreadable"] = decode_json_object(fields["args"])
    return LeasedRun(**fields)


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
        rows = runs.lease_runs(session, worker_id, now, lock_ttl, limit, max_running)
    leased = leased_runs(rows)
    log_leased(leased, worker_id)
    return leased


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
    unmark: list[int] | None = None,
) -> Lease:
    """A worker's lease and the start marks of the runs its free slots take next, in one
    transaction (one commit for both): `waiting`, runs it leased before, and the first
    `start_new` (by id) of the up to `limit` runs leased now (marked by the lease statement
    itself). Only runs marked may start (runs.mark_started). Fair and capped as
    lease_once. `unmark`: runs whose marks the pool took back (step 4 above)."""
    with write_transaction(session):
        runs.unmark_started(session, worker_id, unmark or [])
        rows = (
            runs.lease_runs(
                session, worker_id, now, lock_ttl, limit, max_running, start_new=start_new
            )
            if limit > 0
            else []
        )
        leased = leased_runs(rows)
        marked = {run.id for run in leased if run.started_at is not None}
        # A lease that marks nothing (bench.unfair_lease's) leaves its runs to mark_started.
        unmarked = [run.id for run in leased[:start_new] if run.id not in marked]
        started = runs.mark_started(session, worker_id, waiting + unmarked, now)
    log_leased(leased, worker_id)  # committed: no log line inside a transaction
    return Lease(leased, started | marked)


def leased_runs(rows: Sequence[Any]) -> list[LeasedRun]:
    return [leased_run(row) for row in sorted(rows, key=lambda r: r.id)]


def log_leased(leased: list[LeasedRun], worker_id: int) -> None:
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


def start_runs(
    session: Session, worker_id: int, run_ids: list[int], now: datetime | None = None
) -> set[int]:
    """Writes the start mark of runs a worker's slots are about to start, in one transaction;
    returns those marked: only they may start (the others' leases have passed or are no longer
    this worker's). `now=None` reads the database's clock in the statement itself."""
    if not run_ids:
        return set()
    with write_transaction(session):
        return runs.mark_started(session, worker_id, run_ids, now)


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
        return runs.extend_leases(session, worker_id, run_ids, now + lock_ttl)


def reap_once(session: Session, now: datetime, settings: Settings | None = None) -> int:
    """Takes back runs whose lease expired: queued again, or failed when attempts are spent;
    a run its worker never started is queued again without spending an attempt.

    A run failed so is a failure of its schedule like any other: counted, and notified in the
    same transaction (scheduler.notify). `settings`: the app's by default."""
    with write_transaction(session):
        reaped = runs.reap_expired(session, now)
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
                "started": error != runs.NOT_STARTED_ERROR,
            },
        )
    return len(reaped)


def release_leases(session: Session, worker_id: int, run_ids: list[int]) -> int:
    """On shutdown: unfinished runs go back to the queue, in their place (available_at kept),
    and the attempt does not count."""
    if not run_ids:
        return 0
    with write_transaction(session):
        released = runs.release_leases(session, worker_id, run_ids)
    for run_id in released:
        log.info("run_released", extra={"action": "run_released", "run_id": run_id})
    return len(released)
