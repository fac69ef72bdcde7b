"""Leasing, executing and reaping runs, step by step with an explicit now, on both databases."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from threading import Event

import pytest
from flask import Flask
from sqlalchemy import select

from tests.conftest import WorkerFactory, World, make_run, make_schedule
from tests.scheduler_helpers import all_runs, execute_leased, get_run, lease_and_start
from webapp.catalog.current import current_catalog
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Run
from webapp.scheduler import execution
from webapp.scheduler.leases import lease_once, reap_once, release_leases, renew_leases
from webapp.scheduler.logs import KeyValueFormatter
from webapp.scheduler.pool import ThreadJobPool
from webapp.scheduler.worker import WorkerProcess

NOW = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)


def lease(worker: int, now: datetime = NOW, limit: int = 10) -> list[int]:
    """Leased and started, as a worker's round leaves them before their jobs end."""
    return [run.id for run in lease_and_start(worker, now, TTL, limit)]


def run_leased(worker: int, now: datetime = NOW) -> list[Run]:
    for run in lease_once(db.session(), worker, now, TTL, 10):
        execute_leased(run, worker)
    return all_runs()


def test_lease_takes_available_runs_only(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    ready = make_run(world.alpha, scheduled_for=NOW - timedelta(seconds=1))
    make_run(world.alpha, scheduled_for=NOW + timedelta(minutes=5))  # a run requested for later
    assert [run.id for run in lease_once(db.session(), worker, NOW, TTL, 10)] == [ready.id]
    run = get_run(ready.id)
    assert (run.status, run.worker_id, run.attempt, run.started_at, run.locked_until) == (
        "running",
        worker,
        1,
        None,  # leased, not started: see tests/test_start_marks.py
        NOW + TTL,
    )
    assert lease(worker) == []


def test_lease_respects_the_limit_oldest_first(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    runs = [make_run(world.alpha, scheduled_for=NOW - timedelta(minutes=n)) for n in range(3)]
    assert lease(worker, limit=2) == sorted([runs[2].id, runs[1].id])


def test_a_run_succeeds_with_its_output(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    make_run(world.alpha, scheduled_for=NOW, args={"message": "<b>hello</b>"})
    (run,) = run_leased(worker)
    assert (run.status, run.output, run.error, run.locked_until) == (
        "succeeded",
        "<b>hello</b>\n",
        None,
        None,
    )
    assert run.started_at is not None and run.finished_at is not None
    assert run.finished_at >= run.started_at


def test_a_failing_job_records_its_error_and_traceback(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    make_run(world.alpha, scheduled_for=NOW, job="demo.fail", args={"message": "disk full"})
    (run,) = run_leased(worker)
    assert run.status == "failed"
    # Tenants: the type, the message and the job's own frame, by module name (no file path).
    assert run.error is not None
    assert re.fullmatch(
        r"RuntimeError: disk full\n  webapp\.catalog\.builtin, line \d+, in fail", run.error
    )
    # Operators: the whole traceback, with the worker's frames and the server's paths.
    assert run.error_detail is not None
    assert run.error_detail.startswith("Traceback (most recent call last):\n")
    assert f'"{execution.__file__}"' in run.error_detail
    assert run.error_detail.endswith("RuntimeError: disk full\n")


def test_a_failed_run_is_logged_with_its_full_traceback(
    app: Flask, world: World, caplog: pytest.LogCaptureFixture, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    make_run(world.alpha, scheduled_for=NOW, job="demo.fail", args={"message": "disk full"})
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        (run,) = run_leased(worker)
    (record,) = [r for r in caplog.records if getattr(r, "action", None) == "run_failed"]
    line = KeyValueFormatter().format(record)
    assert f"run_id={run.id}" in line and 'error="RuntimeError: disk full"' in line
    assert line.endswith(f"{run.error_detail}".rstrip())


def test_a_failed_attempt_is_retried_with_backoff(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    make_run(
        world.alpha, scheduled_for=NOW, job="demo.fail", args={"message": "flaky"}, max_attempts=3
    )
    before = utcnow()
    (run,) = run_leased(worker)
    assert (run.status, run.attempt, run.worker_id) == ("queued", 1, None)
    assert run.error is not None and run.error.startswith("attempt 1 failed: RuntimeError: flaky")
    # demo.fail keeps the catalog's default backoff of 30 s for the first retry.
    assert run.available_at >= before + timedelta(seconds=29)


def test_one_failing_job_does_not_stop_the_others(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    make_run(world.alpha, scheduled_for=NOW, job="demo.fail", args={"message": "boom"})
    make_run(world.alpha, scheduled_for=NOW, args={"message": "still here"})
    assert sorted(run.status for run in run_leased(worker)) == ["failed", "succeeded"]


def test_a_job_name_outside_the_catalog_fails_the_run(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    make_run(world.alpha, scheduled_for=NOW, job="os.system", args={"command": "rm -rf /"})
    (run,) = run_leased(worker)
    assert (run.status, run.error) == ("failed", "job 'os.system' is not in the catalog")


def test_args_are_validated_again_before_execution(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    make_run(world.alpha, scheduled_for=NOW, args={"message": 42})
    (run,) = run_leased(worker)
    assert run.status == "failed"
    assert run.error is not None and "args.message: Input should be a valid string" in run.error


def test_stored_arguments_over_the_size_limits_fail_the_run_at_once(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    make_run(world.alpha, scheduled_for=NOW, args={"message": "x" * 5000}, max_attempts=3)
    (run,) = run_leased(worker)
    assert (run.status, run.attempt, run.error) == (
        "failed",
        1,
        "not retried: args.message: should be at most 4096 bytes, not 5000",
    )
    assert run.output == ""  # the job never ran


def test_the_reaper_requeues_an_expired_lease_and_fails_a_spent_one(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    retryable = make_run(
        world.alpha, scheduled_for=NOW, job="demo.sleep", args={"seconds": 1}, max_attempts=2
    )
    spent = make_run(world.alpha, scheduled_for=NOW, job="demo.sleep", args={"seconds": 1})
    lease(worker)
    assert reap_once(db.session(), NOW + TTL - timedelta(seconds=1)) == 0
    assert reap_once(db.session(), NOW + TTL + timedelta(seconds=1)) == 2
    by_id = {run.id: run for run in all_runs()}
    assert (by_id[retryable.id].status, by_id[retryable.id].worker_id) == ("queued", None)
    assert (by_id[spent.id].status, by_id[spent.id].error) == (
        "failed",
        "worker lost: the worker running it stopped renewing its lease",
    )
    # Another worker takes the run over as its second attempt; still one row for it.
    other = make_worker().id
    assert lease(other, NOW + TTL + timedelta(seconds=2)) == [retryable.id]
    assert get_run(retryable.id).attempt == 2


def test_a_renewed_lease_does_not_expire(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    run = make_run(world.alpha, scheduled_for=NOW, job="demo.sleep", args={"seconds": 1})
    lease(worker)
    renew_leases(db.session(), worker, [run.id], NOW + timedelta(seconds=50), TTL)
    assert reap_once(db.session(), NOW + TTL + timedelta(seconds=1)) == 0


def test_shutdown_returns_unfinished_runs_without_spending_an_attempt(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    run = make_run(world.alpha, scheduled_for=NOW, job="demo.sleep", args={"seconds": 1})
    lease(worker)
    assert release_leases(db.session(), worker, [run.id]) == 1
    (released,) = all_runs()
    assert (released.status, released.attempt, released.worker_id) == ("queued", 0, None)
    assert released.available_at == NOW  # its place in the queue is kept


def test_an_outcome_is_dropped_once_another_worker_holds_the_run(
    app: Flask, world: World, caplog: pytest.LogCaptureFixture, make_worker: WorkerFactory
) -> None:
    first = make_worker().id
    make_run(world.alpha, scheduled_for=NOW, args={"message": "late"}, max_attempts=2)
    (leased,) = lease_and_start(first, NOW, TTL)
    reap_once(db.session(), NOW + TTL * 2)
    second = make_worker().id
    lease(second, NOW + TTL * 2)
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        execute_leased(leased, first)  # the lost worker wakes up
    (run,) = all_runs()
    assert (run.status, run.worker_id, run.attempt) == ("running", second, 2)
    (record,) = [r for r in caplog.records if getattr(r, "action", None) == "run_outcome_dropped"]
    assert (getattr(record, "attempt", None), getattr(record, "outcome", None)) == (1, "succeeded")


def test_a_system_job_gets_the_database(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    old = utcnow() - timedelta(days=400)
    make_run(
        world.alpha, scheduled_for=old, status="succeeded", finished_at=old, idempotency_key="old"
    )
    make_run(
        None, scheduled_for=NOW, job="maintenance.prune_runs", args={}, idempotency_key="prune"
    )
    run_leased(worker)
    runs = all_runs()
    assert [r.idempotency_key for r in runs] == ["prune"]
    assert (runs[0].output or "").startswith("folded 1 run into 1 new and 0 merged daily roll-ups")


def test_a_scheduled_run_tells_the_job_its_fire_time(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    schedule = make_schedule(world.alpha, "hourly", NOW)
    from tests.test_tick import run_tick

    run_tick(NOW + timedelta(seconds=1))
    (run,) = run_leased(worker, NOW + timedelta(seconds=2))
    assert run.status == "succeeded" and run.schedule_id == schedule.id
    assert db.session.scalar(select(Run.idempotency_key)) == (
        f"schedule:{schedule.id}:2026-03-07T12:00:00Z"
    )


def test_a_job_whose_scope_does_not_match_its_run_fails(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    make_run(
        world.alpha, scheduled_for=NOW, job="maintenance.prune_runs", args={}, idempotency_key="t"
    )
    make_run(None, scheduled_for=NOW, job="demo.echo", args={"message": "x"}, idempotency_key="s")
    runs = {run.idempotency_key: run for run in run_leased(worker)}
    assert (runs["t"].status, runs["t"].error) == (
        "failed",
        "job 'maintenance.prune_runs' is a system job and cannot be used in a tenant schedule",
    )
    assert (runs["s"].status, runs["s"].error) == (
        "failed",
        "job 'demo.echo' is a tenant job and cannot be used in a system schedule",
    )


def test_an_outcome_is_stored_when_a_reaper_took_the_run_back_and_nobody_leased_it(
    app: Flask, world: World, caplog: pytest.LogCaptureFixture, make_worker: WorkerFactory
) -> None:
    """The worker could not renew (the database was down) and a reaper queued the run again;
    the job had finished meanwhile. Its real outcome is stored: the job does not run twice."""
    worker = make_worker().id
    run = make_run(world.alpha, scheduled_for=NOW, args={"message": "done"}, max_attempts=2)
    (leased,) = lease_and_start(worker, NOW, TTL)
    assert reap_once(db.session(), NOW + TTL * 2) == 1
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        execute_leased(leased, worker)
    stored = get_run(run.id)
    assert (stored.status, stored.attempt, stored.worker_id, stored.error, stored.output) == (
        "succeeded",
        1,
        worker,
        None,
        "done\n",
    )
    (record,) = [r for r in caplog.records if getattr(r, "action", None) == "run_succeeded"]
    assert getattr(record, "lease", None) == "taken_back"


def test_a_job_that_succeeded_is_not_recorded_as_worker_lost(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    # One attempt: reaped = failed.
    run = make_run(world.alpha, scheduled_for=NOW, args={"message": "done"})
    (leased,) = lease_and_start(worker, NOW, TTL)
    reap_once(db.session(), NOW + TTL * 2)
    assert get_run(run.id).error == "worker lost: the worker running it stopped renewing its lease"
    execute_leased(leased, worker)
    stored = get_run(run.id)
    assert (stored.status, stored.error, stored.output) == ("succeeded", None, "done\n")


def test_renewal_returns_the_leases_still_held(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    taken = make_run(world.alpha, scheduled_for=NOW, max_attempts=2)
    lease(worker)
    held = make_run(world.alpha, scheduled_for=NOW)
    lease(worker, NOW + timedelta(seconds=30))
    reap_once(db.session(), NOW + TTL + timedelta(seconds=1))
    renewed = renew_leases(db.session(), worker, [taken.id, held.id], NOW + TTL * 1.1, TTL)
    assert renewed == {held.id: False}  # renewed, and nobody asked it to stop


def expired_lease_of_another_worker(world: World, make_worker: WorkerFactory) -> int:
    """A run whose lease expired an hour ago: its worker may be reconnecting as we speak."""
    run = make_run(
        world.alpha, scheduled_for=NOW, job="demo.sleep", args={"seconds": 1}, max_attempts=2
    )
    lease_once(db.session(), make_worker().id, utcnow() - timedelta(hours=1), TTL, 1)
    return run.id


def idle_worker(app: Flask) -> WorkerProcess:
    worker = WorkerProcess(app, concurrency=1)
    worker.register()
    worker.pool = ThreadJobPool(app, current_catalog(), {}, 1, Event())
    return worker


def assert_reaped_only_after_renewing_for_a_ttl(worker: WorkerProcess, run_id: int) -> None:
    ttl = worker.lock_ttl.total_seconds()
    for step in range(3):  # renewing every third of the TTL, as the loop does
        worker.renew_and_reap(db.session(), started=2000.0 + step * ttl / 3)
        assert get_run(run_id).status == "running"
    worker.renew_and_reap(db.session(), started=2000.0 + ttl)
    assert (get_run(run_id).status, get_run(run_id).worker_id) == ("queued", None)


def test_after_a_lost_connection_a_worker_reaps_only_once_connected_for_a_ttl(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    """The other worker could not renew either while the database was down: it gets a whole
    TTL to renew before this one reaps."""
    run_id = expired_lease_of_another_worker(world, make_worker)
    worker = idle_worker(app)
    worker.connection_lost()
    assert_reaped_only_after_renewing_for_a_ttl(worker, run_id)


def test_a_worker_paused_past_its_renewals_reaps_only_after_renewing_for_a_ttl(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    """Frozen (SIGSTOP) while it held SQLite's write lock, a worker kept the others from
    renewing: on waking it must not take their runs back at once."""
    worker = idle_worker(app)
    worker.renew_and_reap(db.session(), started=1000.0)
    run_id = expired_lease_of_another_worker(world, make_worker)
    assert_reaped_only_after_renewing_for_a_ttl(worker, run_id)  # 1000 s later: a pause
