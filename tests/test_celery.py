"""Celery execution (SCHEDULER_EXECUTOR=celery), with real processes: a scheduler worker that
ticks, leases and sends, real Celery workers that run the jobs, a real Redis and PostgreSQL.
The tick stays exactly-once, each attempt's outcome is recorded once, and faults of the Celery
side (a worker killed mid-task, the broker restarted) lose no run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

import pytest
from flask import Flask
from sqlalchemy import func, select

from tests.conftest import World, make_run, make_schedule
from tests.pg_cluster import free_port
from tests.redis_support import RedisServer, redis_server
from tests.scheduler_helpers import get_run
from tests.worker_support import PROJECT, Workers, postgresql_only, succeeded_ids, wait_for
from webapp import release
from webapp.config import settings as settings_of
from webapp.extensions import db
from webapp.models import Run, Worker
from webapp.scheduler.celery_tasks import CeleryNode
from webapp.services.audit import Actor
from webapp.services.metrics import read_figures

__all__ = ["redis_server"]  # the session fixture, used here

LOCK_TTL = "3"  # seconds: a killed Celery worker's run is taken back within a few seconds


class CeleryWorkers:
    """Starts `celery -A webapp.cli.celery_worker worker` processes (each its own process group,
    so that a kill takes its pool's processes with it) and stops what is left at the end."""

    def __init__(self, settings: dict[str, str], log_dir: Path) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen[bytes]] = []
        self.log_files: list[IO[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        number = len(self.processes)
        log = open(self.log_dir / f"celery-{number}.log", "wb")
        self.log_files.append(log)
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "webapp.cli.celery_worker",
                "worker",
                "--pool",
                "prefork",
                "--concurrency",
                "2",
                "--queues",
                "scheduler",
                "--loglevel",
                "INFO",
                "--hostname",
                f"celery{number}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=PROJECT,
            env={**os.environ, **self.settings},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        for log in self.log_files:
            log.close()

    def logs(self) -> str:
        return "\n".join(path.read_text() for path in sorted(self.log_dir.glob("celery-*.log")))


@pytest.fixture
def settings(database_url: str, redis_server: RedisServer) -> dict[str, str]:
    redis_server.flush()
    return {
        "DATABASE_URL": database_url,
        "SECRET_KEY": "test",
        "SCHEDULER_DEMO_JOBS": "1",
        "SCHEDULER_JOB_MODULES": "tests.celery_jobs",
        "SCHEDULER_EXECUTOR": "celery",
        "SCHEDULER_CELERY_BROKER_URL": redis_server.url,
        "SCHEDULER_LOCK_TTL": LOCK_TTL,
    }


@pytest.fixture
def celery_workers(app: Flask, settings: dict[str, str], tmp_path: Path) -> Iterator[CeleryWorkers]:
    started = CeleryWorkers(settings, tmp_path)
    yield started
    started.stop_all()


def registered(process: subprocess.Popen[bytes]) -> int:
    """The `workers` row of a Celery worker, once it has registered."""
    found: list[int] = []

    def row() -> bool:
        found[:] = db.session.scalars(select(Worker.id).where(Worker.pid == process.pid)).all()
        return bool(found)

    wait_for(row, 30, f"Celery worker {process.pid} to register")
    return found[0]


def logs(workers: Workers, celery_workers: CeleryWorkers) -> str:
    return workers.logs() + "\n" + celery_workers.logs()


def both_started(
    workers: Workers, celery_workers: CeleryWorkers, settings: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int]:
    workers.start(**settings)
    celery = celery_workers.start()
    return celery, registered(celery)


@pytest.mark.slow
@postgresql_only
def test_a_due_schedule_fires_once_and_run_now_runs_in_the_celery_worker(
    app: Flask,
    world: World,
    workers: Workers,
    celery_workers: CeleryWorkers,
    settings: dict[str, str],
) -> None:
    from webapp.services.schedules import run_now

    now = datetime.now(UTC)
    schedule = make_schedule(
        world.alpha,
        "yearly",
        now - timedelta(seconds=1),
        cron="0 0 1 1 *",
        args={"message": "from celery"},
    )
    settings["SCHEDULER_LOG_LEVEL"] = "DEBUG"  # the Celery worker's lines too
    _, celery_row = both_started(workers, celery_workers, settings)

    def succeeded() -> bool:
        runs = db.session.scalars(select(Run).where(Run.schedule_id == schedule.id)).all()
        return len(runs) == 1 and runs[0].status == "succeeded"

    wait_for(succeeded, 30, "the fire to succeed")
    run = db.session.scalars(select(Run).where(Run.schedule_id == schedule.id)).one()
    assert (run.output, run.attempt, run.worker_id) == ("from celery\n", 1, celery_row)
    worker = db.session.get(Worker, celery_row)
    assert worker is not None and worker.version and worker.concurrency == 2
    text = logs(workers, celery_workers)
    assert f"action=run_sent run_id={run.id} " in text
    assert f"action=run_started run_id={run.id} " in celery_workers.logs()
    assert succeeded_ids(text).count(run.id) == 1, text

    pressed = run_now(schedule, Actor.cli(), datetime.now(UTC))
    wait_for(lambda: get_run(pressed.id).status == "succeeded", 20, "Run now to succeed")
    assert (get_run(pressed.id).output, get_run(pressed.id).worker_id) == (
        "from celery\n",
        celery_row,
    )


@pytest.mark.slow
@postgresql_only
def test_a_failing_job_is_retried_then_fails_and_a_job_over_its_timeout_times_out(
    app: Flask,
    world: World,
    workers: Workers,
    celery_workers: CeleryWorkers,
    settings: dict[str, str],
) -> None:
    now = datetime.now(UTC)
    run = make_run(world.alpha, scheduled_for=now, job="celery.flaky", args={}, max_attempts=2)
    soft = make_run(
        world.alpha, scheduled_for=now + timedelta(seconds=1), job="celery.stubborn", args={}
    )
    hard = make_run(
        world.alpha, scheduled_for=now + timedelta(seconds=2), job="celery.unstoppable", args={}
    )
    both_started(workers, celery_workers, settings)
    wait_for(
        lambda: all(get_run(r.id).status == "failed" for r in (run, soft, hard)),
        40,
        "the runs to fail",
    )
    failed = get_run(run.id)
    assert failed.attempt == 2
    assert failed.error is not None and failed.error.startswith("RuntimeError: attempt 2 failed")
    text = logs(workers, celery_workers)
    assert text.count(f"action=run_retrying run_id={run.id} attempt=1 ") == 1, text
    # Over the timeout: stopped by Celery's soft limit, or killed at the hard limit.
    assert [get_run(r.id).error for r in (soft, hard)] == ["timed out after 0.5 s"] * 2, text
    assert "Hard time limit" in celery_workers.logs()


@pytest.mark.slow
@postgresql_only
def test_a_run_of_a_killed_celery_worker_is_finished_by_another_once(
    app: Flask,
    world: World,
    workers: Workers,
    celery_workers: CeleryWorkers,
    settings: dict[str, str],
) -> None:
    run = make_run(
        world.alpha,
        scheduled_for=datetime.now(UTC),
        job="demo.sleep",
        args={"seconds": 3},
        max_attempts=2,
    )
    first, first_row = both_started(workers, celery_workers, settings)
    wait_for(
        lambda: (get_run(run.id).status, get_run(run.id).worker_id) == ("running", first_row),
        30,
        "the first Celery worker to start the run",
    )
    celery_workers.kill(first)  # mid-task: the whole Celery worker, its pool's processes too
    second = celery_workers.start()
    second_row = registered(second)
    wait_for(lambda: get_run(run.id).status == "succeeded", 40, "the second worker to finish it")
    finished = get_run(run.id)
    assert (finished.attempt, finished.worker_id) == (2, second_row)
    text = logs(workers, celery_workers)
    assert f"action=run_lease_expired run_id={run.id} requeued=True" in text
    assert succeeded_ids(text).count(run.id) == 1, text
    assert db.session.scalar(select(func.count()).select_from(Run)) == 1


@pytest.mark.slow
@postgresql_only
def test_runs_queued_while_the_broker_is_down_complete_after_it_returns(
    app: Flask,
    world: World,
    workers: Workers,
    celery_workers: CeleryWorkers,
    settings: dict[str, str],
    redis_server: RedisServer,
) -> None:
    before = make_run(world.alpha, scheduled_for=datetime.now(UTC), args={"message": "before"})
    both_started(workers, celery_workers, settings)
    wait_for(lambda: get_run(before.id).status == "succeeded", 20, "a run before the restart")
    redis_server.stop()
    try:
        now = datetime.now(UTC)
        runs = [
            make_run(
                world.alpha, scheduled_for=now + timedelta(milliseconds=n), args={"message": str(n)}
            )
            for n in range(3)
        ]
        wait_for(lambda: "action=celery_send_failed" in workers.logs(), 20, "a send to be refused")
        # Given back, not burnt: the runs wait in the queue with no attempt counted.
        wait_for(lambda: all(get_run(r.id).status == "queued" for r in runs), 10, "runs given back")
    finally:
        redis_server.start()
    wait_for(
        lambda: all(get_run(r.id).status == "succeeded" for r in runs),
        60,
        "the runs to complete once the broker is back",
    )
    assert [get_run(r.id).attempt for r in runs] == [1, 1, 1]
    assert [get_run(r.id).output for r in runs] == ["0\n", "1\n", "2\n"]


@pytest.mark.slow
@postgresql_only
def test_a_worker_without_a_reachable_broker_says_so_once_and_loses_no_run(
    app: Flask, world: World, workers: Workers, settings: dict[str, str]
) -> None:
    run = make_run(world.alpha, scheduled_for=datetime.now(UTC), args={"message": "waits"})
    closed = f"redis://127.0.0.1:{free_port()}/0"
    worker = workers.start(**{**settings, "SCHEDULER_CELERY_BROKER_URL": closed})
    wait_for(lambda: "action=celery_send_failed" in workers.logs(), 30, "a send to be refused")
    assert workers.logs().count("action=celery_broker_unreachable") == 1
    assert worker.poll() is None  # it keeps going, retrying with backoff
    # Given back each time, never burnt: the run waits in the queue with no attempt counted.
    wait_for(lambda: get_run(run.id).status == "queued", 10, "the run given back")
    assert get_run(run.id).attempt == 0


def health(settings: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flask", "--app", "webapp", "scheduler", "health"],
        cwd=PROJECT,
        env={**os.environ, **settings},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
@postgresql_only
def test_a_dead_celery_fleet_raises_the_alarm_and_a_celery_worker_that_starts_clears_it(
    app: Flask,
    world: World,
    workers: Workers,
    celery_workers: CeleryWorkers,
    settings: dict[str, str],
) -> None:
    alarm = {**settings, "SCHEDULER_OVERDUE_GRACE": "1"}
    now = datetime.now(UTC)
    schedule = make_schedule(world.alpha, "yearly", now + timedelta(days=300), cron="0 0 1 1 *")
    run = make_run(schedule, scheduled_for=now, args={"message": "late"})
    workers.start(**alarm)  # the sender; no Celery worker
    sent = f"action=run_sent run_id={run.id} "
    wait_for(lambda: workers.logs().count(sent) >= 2, 30, "the run to be sent, then again")
    assert (get_run(run.id).status, get_run(run.id).started_at) == ("running", None)

    checked = health(alarm)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert "fail no Celery worker heartbeat in the last 6 s (no Celery worker is running)" in lines
    assert any(line.startswith("ok worker heartbeat fresh") for line in lines), lines
    assert any(
        line.startswith("fail 1 run waiting to start beyond the 1 s grace") for line in lines
    ), lines
    assert any(
        line.startswith("fail 1 schedule overdue beyond the 1 s grace (oldest: alpha/yearly, ")
        for line in lines
    ), lines
    grace = settings_of(app).model_copy(update={"SCHEDULER_OVERDUE_GRACE": 1})
    figures = read_figures(db.session(), grace)
    assert (figures.queued_runs_overdue, figures.schedules_overdue) == (1, 1)
    db.session.rollback()

    celery_workers.start()
    wait_for(lambda: get_run(run.id).status == "succeeded", 30, "the run to succeed")
    # The copies the resends left in the queue are dropped, as expected: INFO, not WARNING.
    wait_for(lambda: "action=celery_task_stale" in celery_workers.logs(), 10, "a stale copy")
    assert "WARNING action=celery_task_stale" not in celery_workers.logs()
    assert f"INFO action=celery_task_stale run_id={run.id} " in celery_workers.logs()
    checked = health(alarm)
    assert checked.returncode == 0, checked.stdout
    assert "ok Celery worker heartbeat fresh (Celery worker " in checked.stdout


def test_an_unknown_executor_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from webapp.config import ConfigError, load_settings

    monkeypatch.setenv("SCHEDULER_EXECUTOR", "kafka")
    with pytest.raises(ConfigError, match="SCHEDULER_EXECUTOR='kafka' must be one of"):
        load_settings("/nonexistent")


def test_the_celery_executor_needs_its_broker() -> None:
    from webapp.config import ConfigError, load_settings

    celery = {"SCHEDULER_EXECUTOR": "celery", "SCHEDULER_CELERY_BROKER_URL": "redis://x"}
    assert not load_settings("/nonexistent").settings.uses_celery
    assert load_settings("/nonexistent", celery).settings.uses_celery
    with pytest.raises(
        ConfigError, match="SCHEDULER_EXECUTOR=celery needs SCHEDULER_CELERY_BROKER"
    ):
        load_settings("/nonexistent", {**celery, "SCHEDULER_CELERY_BROKER_URL": ""})


def test_a_long_package_version_registers_its_worker_cut_to_the_column(
    app: Flask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build whose version is longer than workers.version (32 characters) registers its
    Celery worker, the version cut to the column as the scheduler worker's is. It used to be
    written whole: refused on PostgreSQL, and retried forever as "database unavailable"."""
    long = "0.1.0.dev42+g1234567.d20261206.local.build"
    installed = tmp_path / f"{release.DISTRIBUTION}-0.1.0.dist-info"
    installed.mkdir()
    metadata = f"Metadata-Version: 2.1\nName: {release.DISTRIBUTION}\nVersion: {long}\n"
    (installed / "METADATA").write_text(metadata)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert release.version() == long  # as if installed so
    node = CeleryNode(app)
    registering = threading.Thread(target=node.register, args=(2,), daemon=True)
    registering.start()
    registering.join(20)
    assert node.worker_id is not None, "the Celery worker is still trying to register"
    assert db.session.get(Worker, node.worker_id).version == long[:32]  # type: ignore[union-attr]
