"""Acceptance: real worker processes against one database, counting rows."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask
from sqlalchemy import func, select

from tests.conftest import World, make_run
from tests.scheduler_helpers import get_run
from tests.worker_support import (
    Workers,
    also_pgbouncer,
    heavy_one_at_a_time,
    one_at_a_time,
    postgresql_and_pgbouncer,
    postgresql_only,
    wait_for,
    warnings_in,
)
from webapp.extensions import db
from webapp.models import Run, Schedule, Tenant, Worker
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleInput, create_schedule, run_now
from webapp.services.transfer import import_schedules

# The tests whose workers race a short bound (a wake-up, stopping at once) run one at a time
# (one_at_a_time); the bursts and those that race a generous bound (a grace, a job's timeout, a
# reconnection, a poll, the lease of a killed worker) in the second queue (heavy_one_at_a_time);
# the console-script and start-failure tests only wait for an outcome and run beside the rest.
pytestmark = pytest.mark.slow


@heavy_one_at_a_time
@also_pgbouncer
def test_workers_in_burst_fire_every_due_schedule_exactly_once(
    app: Flask, world: World, workers: Workers, database_url: str
) -> None:
    """4 processes on PostgreSQL (SKIP LOCKED), 2 on SQLite (BEGIN IMMEDIATE)."""
    items = [
        {
            "key": f"s{n:03d}",
            "name": f"S{n}",
            "job": "demo.echo",
            "args": {"message": str(n)},
            "cron": "0 0 1 1 *",
            "time_zone": "UTC",
        }
        for n in range(300)
    ]
    import_schedules(
        world.alpha, json.dumps(items), Actor.cli(), datetime(2025, 12, 31, tzinfo=UTC)
    )
    count = 4 if database_url.startswith("postgresql") else 2
    processes = [workers.start("--burst", "--concurrency", "4") for _ in range(count)]
    for process in processes:
        assert process.wait(timeout=180) == 0, workers.logs()
    db.session.rollback()
    runs = db.session.execute(select(Run.schedule_id, Run.scheduled_for, Run.status)).all()
    assert len(runs) == 300
    assert len({(sid, at) for sid, at, _ in runs}) == 300
    assert {status for _, _, status in runs} == {"succeeded"}
    assert {at for _, at, _ in runs} == {datetime(2026, 1, 1, tzinfo=UTC)}
    due = (
        select(func.count())
        .select_from(Schedule)
        .where(Schedule.next_run_at <= datetime(2026, 12, 31, tzinfo=UTC))
    )
    assert db.session.scalar(due) == 0
    stopped = db.session.scalars(select(Worker.stopped_at)).all()
    assert len(stopped) == count and all(stopped)
    assert warnings_in(workers.logs()) == []


@heavy_one_at_a_time  # killed: no live worker races its lease
def test_a_run_of_a_killed_worker_is_finished_by_another(
    app: Flask, world: World, workers: Workers
) -> None:
    # demo.sleep allows 2 attempts, which run_now and the tick copy from the catalog.
    run = make_run(
        world.alpha,
        scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
        job="demo.sleep",
        args={"seconds": 2},
        max_attempts=2,
    )
    first = workers.start(SCHEDULER_LOCK_TTL="2")
    wait_for(
        lambda: get_run(run.id).status == "running",
        30,
        "the first worker to start the run",
    )
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    second = workers.start(SCHEDULER_LOCK_TTL="2")
    wait_for(
        lambda: get_run(run.id).status == "succeeded",
        60,
        "the second worker to finish the run",
    )
    finished = db.session.get(Run, run.id)
    assert finished is not None and finished.attempt == 2
    _first_id, second_id = db.session.scalars(select(Worker.id).order_by(Worker.id)).all()
    assert finished.worker_id == second_id
    assert db.session.scalar(select(func.count()).select_from(Run)) == 1
    assert "run_lease_expired" in workers.logs()
    second.send_signal(signal.SIGTERM)
    # A clean exit, however slow the machine (it took over 15 s once in CI, beside the
    # heavy-workers queue's lock-order minute).
    assert second.wait(60) == 0


@one_at_a_time
def test_sigterm_stops_an_idle_worker_at_once(app: Flask, world: World, workers: Workers) -> None:
    process = workers.start(SCHEDULER_POLL_INTERVAL="30")
    wait_for(lambda: db.session.scalar(select(Worker.id)), 30, "the worker to register")
    time.sleep(0.5)  # let it fall asleep in its 30 s poll
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    assert time.monotonic() - sent < 5
    db.session.rollback()
    assert db.session.scalar(select(Worker.stopped_at)) is not None


@one_at_a_time
def test_ctrl_c_then_sigterm_stops_an_idle_worker(
    app: Flask, world: World, workers: Workers
) -> None:
    """What Ctrl-C on `make run` sends: SIGINT to the worker and to `flask serve`, which sends
    SIGTERM a moment later. A worker whose handler set an Event could hang in it for good when
    the second signal came while the first handler held the Event's lock (on_stop_signals)."""
    process = workers.start(SCHEDULER_POLL_INTERVAL="30")
    wait_for(lambda: db.session.scalar(select(Worker.id)), 30, "the worker to register")
    time.sleep(0.5)  # asleep in its 30 s poll
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    db.session.rollback()
    assert db.session.scalar(select(Worker.stopped_at)) is not None


@heavy_one_at_a_time
def test_sigterm_lets_a_running_job_finish_within_the_grace(
    app: Flask, world: World, workers: Workers
) -> None:
    run = make_run(
        world.alpha,
        scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
        job="demo.sleep",
        args={"seconds": 1},
    )
    process = workers.start(SCHEDULER_SHUTDOWN_GRACE="20")
    wait_for(
        lambda: get_run(run.id).status == "running",
        30,
        "the run to start",
    )
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    db.session.rollback()
    assert get_run(run.id).status == "succeeded"


@heavy_one_at_a_time
def test_sigterm_returns_a_job_that_outlasts_the_grace_to_the_queue(
    app: Flask, world: World, workers: Workers
) -> None:
    run = make_run(
        world.alpha,
        scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
        job="demo.sleep",
        args={"seconds": 30},
    )
    process = workers.start(SCHEDULER_SHUTDOWN_GRACE="0.5")
    wait_for(
        lambda: get_run(run.id).status == "running",
        30,
        "the run to start",
    )
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    db.session.rollback()
    returned = db.session.get(Run, run.id)
    assert returned is not None
    assert (returned.status, returned.attempt, returned.worker_id) == ("queued", 0, None)


def add_timeout_runs(tenant: Tenant, pid_file: Path) -> tuple[int, int, int]:
    """A job that stops at its deadline, one that ignores it, and one after them: with one slot,
    the last runs only if the slot is freed."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    cooperative = make_run(tenant, scheduled_for=at, job="sample.cooperative", args={})
    stubborn = make_run(
        tenant,
        scheduled_for=at + timedelta(seconds=1),
        job="sample.slow",
        args={"pid_file": str(pid_file)},
    )
    after = make_run(
        tenant, scheduled_for=at + timedelta(seconds=2), job="demo.echo", args={"message": "next"}
    )
    return cooperative.id, stubborn.id, after.id


def assert_timed_out_and_slot_freed(
    cooperative: int, stubborn: int, after: int, workers: Workers
) -> None:
    outcomes = [(get_run(run).status, get_run(run).error) for run in (cooperative, stubborn)]
    assert outcomes == [
        ("failed", "timed out after 0.3 s"),
        ("failed", "timed out after 0.5 s"),
    ], workers.logs()
    assert get_run(after).status == "succeeded"


@heavy_one_at_a_time
def test_the_thread_pool_fails_a_job_over_its_timeout_and_frees_its_slot(
    app: Flask, world: World, workers: Workers, tmp_path: Path
) -> None:
    cooperative, stubborn, after = add_timeout_runs(world.alpha, tmp_path / "pid")
    process = workers.start(
        "--burst", "--concurrency", "1", SCHEDULER_JOB_MODULES="tests.sample_jobs"
    )
    assert process.wait(timeout=60) == 0, workers.logs()
    assert_timed_out_and_slot_freed(cooperative, stubborn, after, workers)
    # Only the job that ignored its deadline left a thread behind, and the log counts it.
    abandoned = [line for line in workers.logs().splitlines() if "job_thread_abandoned" in line]
    assert len(abandoned) == 1, workers.logs()
    assert f"run_id={stubborn} " in abandoned[0] and "abandoned_threads=1" in abandoned[0]


@heavy_one_at_a_time
def test_the_process_pool_kills_a_job_over_its_timeout_and_frees_its_slot(
    app: Flask, world: World, workers: Workers, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    cooperative, stubborn, after = add_timeout_runs(world.alpha, pid_file)
    printer = make_run(
        world.alpha,
        scheduled_for=datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC),
        job="sample.printer",
        args={},
    )
    process = workers.start(
        "--burst",
        "--concurrency",
        "1",
        "--pool",
        "process",
        SCHEDULER_JOB_MODULES="tests.sample_jobs",
    )
    assert process.wait(timeout=90) == 0, workers.logs()
    assert_timed_out_and_slot_freed(cooperative, stubborn, after, workers)
    assert get_run(printer.id).output == "printed by the job\n"
    # The job's process is gone, not left running beside the worker. Its id is the log's: on a
    # loaded machine the process may be killed before the job wrote its pid file (and the
    # cooperative job's too, when its process starts too slowly to see its own deadline).
    killed = [
        line
        for line in workers.logs().splitlines()
        if "job_process_killed" in line and f"run_id={stubborn} " in line
    ]
    assert len(killed) == 1, workers.logs()
    pid = re.search(r" pid=(\d+)", killed[0])
    assert pid is not None, killed[0]
    job_pid = int(pid.group(1))
    assert job_pid != process.pid
    if pid_file.exists():
        assert int(pid_file.read_text()) == job_pid
    with pytest.raises(ProcessLookupError):
        os.kill(job_pid, 0)


def run_sample_job(world: World, workers: Workers, job: str) -> Run:
    """One run of a job of tests/sample_jobs.py by a real burst worker, read back once done."""
    run = make_run(world.alpha, scheduled_for=datetime(2026, 1, 1, tzinfo=UTC), job=job, args={})
    process = workers.start("--burst", SCHEDULER_JOB_MODULES="tests.sample_jobs")
    assert process.wait(timeout=60) == 0, workers.logs()
    db.session.rollback()
    done = db.session.get(Run, run.id)
    assert done is not None
    return done


def test_what_a_job_prints_lands_in_its_output(app: Flask, world: World, workers: Workers) -> None:
    printed = run_sample_job(world, workers, "sample.printer")
    assert printed.output == "printed by the job\n"
    assert "printed by the job" not in workers.logs()


def test_a_full_collection_in_a_worker_walks_only_what_it_made_since_start_up(
    app: Flask, world: World, workers: Workers
) -> None:
    """The app, the catalog and the libraries' classes are frozen once the worker has started
    (worker.freeze_start_up): a full collection, which stops every thread of the worker, no
    longer walks them."""
    shown = run_sample_job(world, workers, "sample.collector")
    assert shown.status == "succeeded", shown.error
    counts = re.fullmatch(r"walked=(\d+) frozen=(\d+)\n", shown.output or "")
    assert counts is not None, shown.output
    walked, frozen = int(counts[1]), int(counts[2])
    assert frozen > 50_000  # start-up's objects
    assert walked < frozen / 5


def test_the_console_script_runs_a_worker(app: Flask, world: World, database_url: str) -> None:
    run = make_run(world.alpha, scheduled_for=datetime(2026, 1, 1, tzinfo=UTC))
    script = Path(sys.executable).with_name("scheduler-worker")
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "SECRET_KEY": "test",
        "SCHEDULER_DEMO_JOBS": "1",
    }
    finished = subprocess.run([str(script), "--burst"], env=env, capture_output=True, timeout=60)
    assert finished.returncode == 0, finished.stderr.decode()
    db.session.rollback()
    assert get_run(run.id).status == "succeeded"
    usage = subprocess.run([str(script), "--concurrency", "0"], env=env, capture_output=True)
    assert usage.returncode == 2 and b"0 is not in the range 1<=x<=256" in usage.stderr


def test_scheduler_tick_prints_what_it_fired(app: Flask, world: World) -> None:
    import_schedules(
        world.alpha,
        json.dumps(
            [
                {
                    "key": "a",
                    "name": "A",
                    "job": "demo.echo",
                    "args": {"message": "a"},
                    "cron": "0 0 1 1 *",
                    "time_zone": "UTC",
                }
            ]
        ),
        Actor.cli(),
        datetime(2025, 12, 31, tzinfo=UTC),
    )
    result = app.test_cli_runner().invoke(args=["scheduler", "tick"])
    assert result.output == (
        "fired 1 runs (0 skipped, 0 failed, 0 already recorded) for 1 schedules\n"
    )


def yearly_echo(world: World) -> Schedule:
    """A schedule of alpha's that fires next year: a Run now is all that runs."""
    return create_schedule(
        world.alpha,
        ScheduleInput(
            name="Yearly",
            job="demo.echo",
            args={"message": "hi"},
            cron="0 0 1 1 *",
            time_zone="UTC",
        ),
        Actor.cli(),
        datetime(2026, 6, 1, tzinfo=UTC),
    )


# LISTEN/NOTIFY and terminating a backend are PostgreSQL features.
@one_at_a_time
@postgresql_and_pgbouncer
def test_run_now_wakes_an_idle_worker_at_once_on_postgresql(
    app: Flask, world: World, workers: Workers, database_url: str
) -> None:
    schedule = yearly_echo(world)
    workers.start(SCHEDULER_POLL_INTERVAL="30")
    wait_for(lambda: db.session.scalar(select(Worker.id)), 30, "the worker to register")
    time.sleep(1.0)  # asleep in its 30 s poll, listening
    run = run_now(schedule, Actor.cli(), datetime.now(UTC))
    started = time.monotonic()
    wait_for(
        lambda: get_run(run.id).status == "succeeded",
        10,
        "the notified worker to run it",
    )
    assert time.monotonic() - started < 5
    assert warnings_in(workers.logs()) == []


@heavy_one_at_a_time
@pytest.mark.parametrize("database_url", ["pgbouncer"], indirect=True)
def test_behind_pgbouncer_without_a_listen_url_a_worker_polls_for_run_now(
    app: Flask, world: World, workers: Workers
) -> None:
    """Only the pooled URL: the worker says it polls (no LISTEN through the pooler, which
    would hear nothing) and takes a Run now at its next poll."""
    schedule = yearly_echo(world)
    workers.start(SCHEDULER_LISTEN_DATABASE_URL="", SCHEDULER_POLL_INTERVAL="1")
    wait_for(lambda: db.session.scalar(select(Worker.id)), 30, "the worker to register")
    # Said once it has registered (at load 12 the test read the log before it was written).
    said = "action=wakeups_by_polling"
    wait_for(lambda: said in workers.logs(), 10, "the worker to say that it polls")
    run = run_now(schedule, Actor.cli(), datetime.now(UTC))
    wait_for(lambda: get_run(run.id).status == "succeeded", 15, "the polling worker to run it")
    assert warnings_in(workers.logs()) == []


@heavy_one_at_a_time
@postgresql_only
def test_a_lost_database_connection_is_retried_not_fatal(
    app: Flask, world: World, workers: Workers, database_url: str
) -> None:
    process = workers.start(SCHEDULER_POLL_INTERVAL="0.2")
    wait_for(lambda: db.session.scalar(select(Worker.id)), 30, "the worker to register")
    from sqlalchemy import text

    db.session.execute(
        text(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    )
    db.session.commit()
    run = make_run(world.alpha, scheduled_for=datetime(2026, 1, 1, tzinfo=UTC))
    wait_for(
        lambda: get_run(run.id).status == "succeeded",
        30,
        "the worker to reconnect and run it",
    )
    assert process.poll() is None


def test_a_job_process_that_cannot_start_is_logged_retried_and_its_run_handed_back(
    app: Flask, world: World, workers: Workers
) -> None:
    run = make_run(world.alpha, scheduled_for=datetime(2026, 1, 1, tzinfo=UTC))
    process = workers.start(
        "--pool",
        "process",
        "--concurrency",
        "1",
        SCHEDULER_JOB_MODULES="tests.child_fails_jobs",
        SCHEDULER_SHUTDOWN_GRACE="1",
    )

    def failed_starts() -> int:
        return workers.logs().count("job_process_failed_to_start")

    wait_for(lambda: failed_starts() >= 2, 60, "the job process to fail to start twice")
    assert "cannot be imported in a job process" in workers.logs()
    assert get_run(run.id).status not in ("succeeded", "failed")  # never run, never lost
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0, workers.logs()
    handed_back = get_run(run.id)
    assert (handed_back.status, handed_back.worker_id) == ("queued", None), workers.logs()
