"""Helpers for the scheduler tests: what a worker does with a run, step by step, and the rows
as stored (the factories of schedules and runs are conftest's make_schedule and make_run)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from webapp import config
from webapp.catalog import Catalog
from webapp.catalog.current import current_catalog
from webapp.extensions import db
from webapp.models import Run
from webapp.scheduler.execution import FinishedRun, run_attempt, store_outcomes
from webapp.scheduler.leases import LeasedRun, lease_once, start_runs
from webapp.scheduler.tick import TickSettings


def all_runs() -> list[Run]:
    db.session.expire_all()
    return list(db.session.scalars(select(Run).order_by(Run.scheduled_for, Run.id)))


def settings(**changes: Any) -> TickSettings:
    base = TickSettings.of(config.settings())
    values = {**vars(base), **changes}
    if "grace" in changes and not isinstance(changes["grace"], timedelta):
        values["grace"] = timedelta(seconds=changes["grace"])
    return TickSettings(**values)


def catalog() -> Catalog:
    return current_catalog()


def execute_leased(run: LeasedRun, worker_id: int) -> FinishedRun:
    """What a worker's job slot and its flush do with a leased run, in this thread: run it,
    then store its outcome."""
    done = run_attempt(run, current_catalog(), config.settings().job_settings(), db.session())
    store_outcomes(db.session(), worker_id, [done])
    return done


def lease_and_start(
    worker_id: int, now: datetime, lock_ttl: timedelta, limit: int = 10
) -> list[LeasedRun]:
    """A lease and its start mark at `now`, as a worker's round writes them before its slots
    start the runs: what the reaper treats as an attempt under way."""
    leased = lease_once(db.session(), worker_id, now, lock_ttl, limit)
    started = start_runs(db.session(), worker_id, [run.id for run in leased], now)
    assert started == {run.id for run in leased}
    return leased


def leased_run(run_id: int, job: str = "demo.echo", **args: Any) -> LeasedRun:
    """A run as a lease hands it to the job pool, without a row: for what runs it, not stores."""
    at = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    return LeasedRun(
        id=run_id,
        tenant_id=1,
        tenant_slug="alpha",
        schedule_id=None,
        schedule_key=None,
        job=job,
        args=args,
        trigger="manual",
        scheduled_for=at,
        idempotency_key=f"manual:{run_id}",
        attempt=1,
        max_attempts=1,
        started_at=at,
    )


def get_run(run_id: int) -> Run:
    """The run as stored now: a fresh snapshot, as another process would read it."""
    db.session.rollback()
    run = db.session.get(Run, run_id)
    assert run is not None
    return run
