"""Factories for the scheduler tests: schedules and runs written straight to the database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from webapp import config
from webapp.catalog import Catalog
from webapp.catalog.current import current_catalog
from webapp.extensions import db
from webapp.models import Run, Schedule
from webapp.scheduler.execution import FinishedRun, run_attempt, store_outcomes
from webapp.scheduler.leases import LeasedRun, lease_once, start_runs
from webapp.scheduler.tick import TickSettings


def add_schedule(tenant_id: int | None, key: str, next_run_at: datetime, **fields: Any) -> Schedule:
    values: dict[str, Any] = {
        "tenant_id": tenant_id,
        "scope": "tenant" if tenant_id else "system",
        "key": key,
        "name": key,
        "job": "demo.echo",
        "args": {"message": key},
        "cron": "0 * * * *",
        "time_zone": "UTC",
        "next_run_at": next_run_at,
    }
    values.update(fields)
    schedule = Schedule(**values)
    db.session.add(schedule)
    db.session.commit()
    return schedule


def add_run(tenant_id: int | None, available_at: datetime, **fields: Any) -> Run:
    values: dict[str, Any] = {
        "tenant_id": tenant_id,
        "job": "demo.echo",
        "args": {"message": "hello"},
        "trigger": "manual",
        "scheduled_for": available_at,
        "available_at": available_at,
        "queued_at": available_at,
        "idempotency_key": f"manual:{available_at.isoformat()}:"
        f"{fields.get('job', 'demo.echo')}:{len(all_runs())}",
    }
    values.update(fields)
    run = Run(**values)
    db.session.add(run)
    db.session.commit()
    return run


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
