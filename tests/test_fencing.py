"""Fault tests: a worker frozen past its leases, and PostgreSQL stopped for twice the lease.

Real worker processes run `probe.work` (tests/probe_jobs.py), which records every execution of
every run, so that the tests count executions and check that no two copies of one run were
ever running at the same time, whatever the database says afterwards.
"""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from flask import Flask
from sqlalchemy import ColumnElement, func, select

from tests.conftest import World, migrated_app, require_postgres, run_migrations
from tests.pg_cluster import Cluster, ClusterUnavailable, start_cluster
from tests.probe_jobs import concurrent_copies, executions
from tests.scheduler_helpers import get_run
from tests.worker_support import (
    Workers,
    also_pgbouncer,
    one_at_a_time,
    postgresql_and_pgbouncer,
    wait_for,
)
from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import Run, Tenant
from webapp.scheduler.runs import LOST_ERROR

pytestmark = [pytest.mark.slow, one_at_a_time]
TTL = 3  # seconds: SCHEDULER_LOCK_TTL of the workers here
START = datetime(2026, 1, 1, tzinfo=UTC)


def worker_settings() -> dict[str, str]:
    return {
        "SCHEDULER_LOCK_TTL": str(TTL),
        "SCHEDULER_JOB_MODULES": "tests.probe_jobs",
        "SCHEDULER_SHUTDOWN_GRACE": "10",
    }


def add_probes(
    tenant_id: int, directory: Path, count: int, seconds: float, **args: object
) -> list[int]:
    """`count` queued probe runs, oldest first, in one commit."""
    args = {"directory": str(directory), "seconds": seconds, **args}
    runs = [
        Run(
            tenant_id=tenant_id,
            job="probe.work",
            args=args,
            trigger="manual",
            scheduled_for=START + timedelta(microseconds=n),
            available_at=START + timedelta(microseconds=n),
            queued_at=START,
            idempotency_key=f"probe:{seconds}:{n}",
            max_attempts=3,
        )
        for n in range(count)
    ]
    db.session.add_all(runs)
    db.session.commit()
    return [run.id for run in runs]


def statuses() -> dict[int, str | None]:
    db.session.rollback()
    return {run.id: run.error or run.status for run in db.session.scalars(select(Run))}


def worker_id_in(log: Path) -> int:
    """The database id of the worker writing this log, once it has registered (a loaded
    machine may take seconds to start it)."""
    pattern = r"action=worker_started worker_id=(\d+)"
    wait_for(lambda: re.search(pattern, log.read_text()), 60, f"the worker of {log.name} to start")
    match = re.search(pattern, log.read_text())
    assert match is not None, log.read_text()
    return int(match.group(1))


def runs_held_by(worker_id: int) -> int:
    db.session.rollback()
    held = select(Run.id).where(Run.status == "running", Run.worker_id == worker_id)
    return len(db.session.scalars(held).all())


def count_runs(*conditions: ColumnElement[bool]) -> int:
    """Counted by the database: the polls below run ten times a second over thousands of runs."""
    db.session.rollback()
    return db.session.scalar(select(func.count()).select_from(Run).where(*conditions)) or 0


def count_succeeded() -> int:
    return count_runs(Run.status == "succeeded")


def all_finished() -> bool:
    return count_runs(Run.status.in_(("queued", "running"))) == 0


def stop(workers: Workers) -> None:
    for process in workers.processes:
        process.send_signal(signal.SIGTERM)
    for process in workers.processes:
        assert process.wait(60) == 0, workers.logs()


def freeze(process: subprocess.Popen[bytes]) -> float:
    """SIGSTOP, and the instant every thread of the process has stopped (a running thread may
    go on for a moment after the signal is sent)."""
    process.send_signal(signal.SIGSTOP)
    tasks = Path(f"/proc/{process.pid}/task")

    def stopped() -> bool:
        states = [
            (task / "stat").read_text().rpartition(")")[2].split()[0] for task in tasks.iterdir()
        ]
        return all(state in ("T", "t") for state in states)

    deadline = time.monotonic() + 30
    while not stopped():
        assert time.monotonic() < deadline, "the worker did not stop"
        time.sleep(0.001)
    return time.time()


@contextmanager
def no_write_in_progress(database_url: str) -> Iterator[None]:
    """SQLite: holds the write lock, so that a worker frozen meanwhile is not inside a write
    transaction (a frozen lock holder would stop every worker, and nothing would be taken
    back). PostgreSQL locks rows, not the database: nothing to do."""
    if not database_url.startswith("sqlite:///"):
        yield
        return
    connection = sqlite3.connect(database_url.removeprefix("sqlite:///"), timeout=60)
    connection.isolation_level = None
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        connection.execute("ROLLBACK")
        connection.close()


@also_pgbouncer
def test_a_worker_frozen_past_its_lease_starts_nothing_it_no_longer_owns(
    app: Flask, world: World, workers: Workers, tmp_path: Path, database_url: str
) -> None:
    """SIGSTOP for four leases while it holds short runs (waiting and running), then SIGCONT,
    while a second worker takes its runs back. Each probe asks the database as it begins
    whether its worker owns the run at that instant.

    A worker frozen mid-commit holds PostgreSQL row locks that may stop the other worker's
    reaper until it wakes: the freeze is tried again until the other worker's reaper has taken
    runs back during one."""
    probes = tmp_path / "probes"
    probes.mkdir()
    add_probes(world.alpha.id, probes, 4000, seconds=0, check_owner=True)
    frozen = workers.start("--concurrency", "2", **worker_settings())
    frozen_id = worker_id_in(tmp_path / "worker-0.log")
    workers.start("--concurrency", "2", **worker_settings())
    other_log = tmp_path / "worker-1.log"
    wait_for(lambda: count_succeeded() >= 50, 60, "the workers to run some probes")
    freezes: list[tuple[float, float]] = []
    holding = 0
    while holding < 4:
        reaped_before = other_log.read_text().count("run_lease_expired")
        with no_write_in_progress(database_url):
            frozen_at = freeze(frozen)
        if not runs_held_by(frozen_id):
            # Frozen between two leases (an idle machine drains the probes in seconds): nothing
            # of its own to take back, so this freeze proves nothing. Try again at once.
            frozen.send_signal(signal.SIGCONT)
            freezes.append((frozen_at, time.time()))
            assert not all_finished(), "the probes ran out before a freeze caught held runs"
            continue
        holding += 1
        time.sleep(4 * TTL)  # its leases pass; the other worker's reaper takes its runs back
        reaped = other_log.read_text().count("run_lease_expired") > reaped_before
        frozen.send_signal(signal.SIGCONT)
        freezes.append((frozen_at, time.time()))
        if reaped:
            break
        time.sleep(1)
    else:
        pytest.fail(f"no freeze let the other worker take runs back: {workers.logs()}")
    wait_for(all_finished, 240, "every probe to finish")
    stop(workers)
    assert set(statuses().values()) == {"succeeded"}, workers.logs()
    # Every job began while its worker owned the run, except one that its slot had started
    # before a freeze, which froze it before its first line: its lease held when it started.
    starts = [lines[0] for lines in executions(probes)]
    not_owned = [
        start
        for start in starts
        if not start["owned"] and not any(start["decided"] < at < start["at"] for at, _ in freezes)
    ]
    assert not_owned == [], (not_owned, freezes)
    # No job began before its start mark (asked while the run was still its worker's).
    assert all(start["marked"] for start in starts if start["owned"]), starts
    assert concurrent_copies(probes) == []
    frozen_log = (tmp_path / "worker-0.log").read_text()
    taken_back = ("run_lease_lost", "run_outcome_dropped", "lease=taken_back")
    assert any(key in frozen_log for key in taken_back), frozen_log


def queue_probes(
    tenant_id: int,
    directory: Path,
    seconds: float,
    count: int = 1,
    check_owner: bool = True,
    delay: float = 0.0,
) -> list[int]:
    """`count` queued probe runs with one attempt each, after every run queued so far;
    available `delay` seconds from now. One write transaction from its first read: on SQLite a
    read that a worker's commit overtakes cannot become a write ("database is locked" at once)."""
    db.session.rollback()
    with write_transaction(db.session) as session:
        first = len(session.scalars(select(Run.id)).all())
        available = datetime.now(UTC) + timedelta(seconds=delay)
        args = {"directory": str(directory), "seconds": seconds, "check_owner": check_owner}
        runs = [
            Run(
                tenant_id=tenant_id,
                job="probe.work",
                args=args,
                trigger="manual",
                scheduled_for=START + timedelta(seconds=first + n),
                available_at=available + timedelta(microseconds=n),
                queued_at=START,
                idempotency_key=f"probe:{first + n}",
                max_attempts=1,
            )
            for n in range(count)
        ]
        session.add_all(runs)
    return [run.id for run in runs]


def expired_lease_lines(log: str, run_ids: list[int]) -> dict[int, str]:
    return {
        run_id: line
        for line in log.splitlines()
        for run_id in run_ids
        if "action=run_lease_expired" in line and f" run_id={run_id} " in f"{line} "
    }


def leased_behind_a_long_job(
    world: World, workers: Workers, probes: Path, settings: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int, list[int]]:
    """Worker A (one slot, short jobs so far) starts an 8 s job and leases 3 short runs behind
    it (one attempt each), leased and not started: (A, the long run, the short runs). A leases
    a backlog only while the job it has just started is young (pool.wanted), a 1 s window that
    a loaded machine may miss: then A runs them all, and the scene is set again."""
    a = workers.start("--concurrency", "1", **settings)
    # Short jobs first (they ask nothing of the database), so that A knows its jobs are short.
    warm = queue_probes(world.alpha.id, probes, 0, count=20, check_owner=False)
    wait_for(lambda: count_succeeded() == len(warm), 60, "A to run the short jobs")
    for _ in range(3):
        scene = long_job_then_short_runs(world, probes)
        if scene is not None:
            return (a, *scene)
        wait_for(all_finished, 60, "A to run them all")
    pytest.fail(f"A never leased runs behind its long job: {workers.logs()}")


def long_job_then_short_runs(world: World, probes: Path) -> tuple[int, list[int]] | None:
    """The long job, and 3 short runs available 0.4 s later (once A has started it): (the long
    run, the short runs) if A leased them behind it, None if it missed the window."""
    (long_run,) = queue_probes(world.alpha.id, probes, 8)
    short_runs = queue_probes(world.alpha.id, probes, 0, count=3, delay=0.4)
    wait_for(lambda: get_run(long_run).started_at is not None, 30, "A to start the long job")
    a_id = get_run(long_run).worker_id

    def leased_not_started() -> bool:
        runs = [get_run(run_id) for run_id in short_runs]
        return all((r.status, r.worker_id, r.started_at) == ("running", a_id, None) for r in runs)

    try:
        wait_for(leased_not_started, 3, "A to lease the short runs behind its long job")
    except AssertionError:
        return None
    return long_run, short_runs


def assert_short_runs_ran_once_elsewhere(
    workers: Workers, probes: Path, a_id: int | None, long_run: int, short_runs: list[int]
) -> None:
    shorts = [get_run(run_id) for run_id in short_runs]
    assert [(r.status, r.attempt, r.error, r.worker_id != a_id) for r in shorts] == [
        ("succeeded", 1, None, True)
    ] * 3, workers.logs()
    reaped = expired_lease_lines(workers.logs(), [*short_runs, long_run])
    assert all("started=False" in reaped[run_id] for run_id in short_runs), reaped
    assert "started=True" in reaped[long_run], reaped
    # Each ran once, on B, with its lease and its start mark written as it began.
    starts = [lines[0] for lines in executions(probes) if lines[0]["run_id"] in short_runs]
    assert sorted(start["run_id"] for start in starts) == short_runs
    assert all(start["owned"] and start["marked"] for start in starts), starts
    assert concurrent_copies(probes) == []


def test_runs_a_killed_worker_leased_and_never_started_come_back_without_spending_an_attempt(
    app: Flask, world: World, workers: Workers, tmp_path: Path
) -> None:
    """A (see leased_behind_a_long_job) is killed with SIGKILL: B's reaper queues the 3 short
    runs again, their attempt unspent, and B runs each once as attempt 1, never "worker lost";
    the long job, started, fails as "worker lost" as before (its one attempt spent)."""
    probes = tmp_path / "probes"
    probes.mkdir()
    settings = {**worker_settings(), "SCHEDULER_LOCK_TTL": "6"}
    a, long_run, short_runs = leased_behind_a_long_job(world, workers, probes, settings)
    a_id = get_run(long_run).worker_id
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    b = workers.start("--concurrency", "2", **settings)
    wait_for(lambda: get_run(long_run).status == "failed", 60, "B to reap the long job")
    wait_for(
        lambda: all(get_run(run_id).status == "succeeded" for run_id in short_runs),
        60,
        "B to run the short runs",
    )
    b.send_signal(signal.SIGTERM)
    assert b.wait(60) == 0, workers.logs()
    ended = get_run(long_run)
    assert (ended.status, ended.attempt, ended.error) == ("failed", 1, LOST_ERROR)
    assert_short_runs_ran_once_elsewhere(workers, probes, a_id, long_run, short_runs)


@postgresql_and_pgbouncer
def test_runs_a_frozen_worker_leased_and_never_started_go_to_another_worker_unspent(
    app: Flask, world: World, workers: Workers, tmp_path: Path
) -> None:
    """A (see leased_behind_a_long_job) is frozen with SIGSTOP past its lease, and resumed once
    B has run the 3 short runs: B's reaper queued them again, their attempt unspent; A starts
    none of them after its lease passed (renewal finds them lost); the long job's real outcome
    replaces the reaper's "worker lost" (nobody had taken the run over)."""
    probes = tmp_path / "probes"
    probes.mkdir()
    settings = {**worker_settings(), "SCHEDULER_LOCK_TTL": "6"}
    a, long_run, short_runs = leased_behind_a_long_job(world, workers, probes, settings)
    a_id = get_run(long_run).worker_id
    freeze(a)
    b = workers.start("--concurrency", "2", **settings)
    wait_for(
        lambda: all(get_run(run_id).status == "succeeded" for run_id in short_runs),
        60,
        "B to run the short runs",
    )
    a.send_signal(signal.SIGCONT)
    wait_for(lambda: get_run(long_run).status == "succeeded", 60, "A to finish the long job")
    stop(workers)
    ended = get_run(long_run)
    assert (ended.status, ended.attempt, ended.worker_id) == ("succeeded", 1, a_id)
    assert "run_lease_lost" in (tmp_path / "worker-0.log").read_text()
    assert_short_runs_ran_once_elsewhere(workers, probes, a_id, long_run, short_runs)
    assert b.poll() == 0


@pytest.fixture
def own_postgres() -> Iterator[tuple[Cluster, str]]:
    """A PostgreSQL server of this test's own, that it may stop and start: the session's
    server serves the other tests' databases."""
    try:
        cluster = start_cluster()
    except ClusterUnavailable as reason:
        require_postgres(str(reason))
        raise
    try:
        url = f"postgresql+psycopg://postgres@127.0.0.1:{cluster.port}/outage"
        admin = f"postgresql://postgres@127.0.0.1:{cluster.port}/postgres"
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute("CREATE DATABASE outage")
        run_migrations(url)
        yield cluster, url
    finally:
        cluster.stop()


@pytest.mark.postgres_only
def test_a_postgresql_outage_of_twice_the_lease_loses_and_repeats_nothing(
    own_postgres: tuple[Cluster, str], tmp_path: Path
) -> None:
    """Two workers run long probes (across the outage) and short ones (waiting, running and
    finishing during it). PostgreSQL stops for 2 x TTL, then comes back: every run succeeds,
    each ran exactly once, and no two copies of a run ever ran at the same time."""
    cluster, url = own_postgres
    probes = tmp_path / "probes"
    probes.mkdir()
    app = migrated_app(url)
    with app.app_context():
        tenant = Tenant(slug="outage", name="Outage", time_zone="UTC")
        db.session.add(tenant)
        db.session.commit()
        long = add_probes(tenant.id, probes, 4, seconds=4 * TTL)
        add_probes(tenant.id, probes, 150, seconds=0.05)
        workers = Workers(url, tmp_path)
        try:
            for _ in range(2):
                workers.start("--concurrency", "3", **worker_settings())

            def long_ones_running() -> bool:
                now = statuses()
                return all(now[run] == "running" for run in long) and count_succeeded() >= 5

            wait_for(long_ones_running, 60, "the long probes to run")
            db.session.remove()
            cluster.stop_server()
            time.sleep(2 * TTL)
            cluster.start_server()
            wait_for(all_finished, 240, "every probe to finish")
            stop(workers)
        finally:
            workers.stop_all()
        assert set(statuses().values()) == {"succeeded"}, workers.logs()
        ran = [lines[0]["run_id"] for lines in executions(probes)]
        assert sorted(ran) == sorted(set(ran)), "a run was executed twice"
        assert len(ran) == 154
        assert concurrent_copies(probes) == []
        assert "database_unavailable" in workers.logs()
        db.session.remove()
        db.engine.dispose()
