"""Faults, with real worker processes: kill -9 during a tick and during runs, and every database
connection terminated in a loop. Firing stays exactly-once and nothing is lost or left running."""

from __future__ import annotations

import signal
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from flask import Flask
from sqlalchemy import case, func, or_, select, update
from sqlalchemy.engine import make_url

from tests.conftest import World, make_run
from tests.scheduler_helpers import all_runs, get_run
from tests.worker_support import (
    Workers,
    also_pgbouncer,
    heavy_one_at_a_time,
    one_at_a_time,
    postgresql_only,
    wait_for,
)
from webapp.database import database_now, write_transaction
from webapp.extensions import db
from webapp.models import Run, Schedule, Tenant, Worker
from webapp.scheduler.leases import reap_once
from webapp.scheduler.runs import LOST_ERROR

pytestmark = pytest.mark.slow

MINUTE = timedelta(minutes=1)


def add_minutely_backlog(tenant_id: int, count: int, fires: int) -> datetime:
    """`count` schedules `* * * * *` (fire_all) whose last `fires` minutes are due; returns the
    first due fire time. Each one needs a run per minute from then on."""
    first_due = datetime.now(UTC).replace(second=0, microsecond=0) - (fires - 1) * MINUTE
    db.session.add_all(
        Schedule(
            tenant_id=tenant_id,
            scope="tenant",
            key=f"m{n:04d}",
            name=f"Minutely {n}",
            job="demo.echo",
            args={"message": str(n)},
            cron="* * * * *",
            time_zone="UTC",
            misfire_policy="fire_all",
            next_run_at=first_due,
        )
        for n in range(count)
    )
    db.session.commit()
    return first_due


def assert_every_fire_recorded_once(first_due: datetime, advanced_past: datetime) -> int:
    """Each schedule has one run per minute from `first_due` up to its next_run_at, none
    twice and none missing, and has advanced past `advanced_past`. Returns the runs counted."""
    db.session.rollback()
    rows = db.session.execute(
        select(Schedule.id, Schedule.next_run_at, Run.scheduled_for).outerjoin(
            Run, Run.schedule_id == Schedule.id
        )
    ).all()
    fires: dict[int, list[datetime]] = defaultdict(list)
    next_run: dict[int, datetime | None] = {}
    for schedule_id, next_run_at, scheduled_for in rows:
        next_run[schedule_id] = next_run_at
        if scheduled_for is not None:
            fires[schedule_id].append(scheduled_for)
    duplicates = {
        sid: len(at) - len(set(at)) for sid, at in fires.items() if len(at) > len(set(at))
    }
    assert duplicates == {}
    missed = {}
    for schedule_id, next_run_at in next_run.items():
        assert next_run_at is not None and next_run_at > advanced_past, schedule_id
        minutes = int((next_run_at - first_due) / MINUTE)
        expected = {first_due + n * MINUTE for n in range(minutes)}
        if set(fires[schedule_id]) != expected:
            missed[schedule_id] = sorted(expected - set(fires[schedule_id]))
    assert missed == {}
    total = db.session.scalar(select(func.count()).select_from(Run))
    distinct = db.session.scalar(
        select(func.count()).select_from(
            select(Run.schedule_id, Run.scheduled_for).distinct().subquery()
        )
    )
    assert total == distinct
    return int(total or 0)


def add_sleeps(tenant: Tenant, seconds: float, count: int, max_attempts: int = 2) -> list[int]:
    """`count` queued demo.sleep runs, due since 2026."""
    since = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=len(all_runs()))
    return [
        make_run(
            tenant,
            scheduled_for=since + timedelta(seconds=n),
            job="demo.sleep",
            args={"seconds": seconds},
            max_attempts=max_attempts,
        ).id
        for n in range(count)
    ]


def nothing_due_or_unfinished(started: datetime) -> bool:
    due = db.session.scalar(
        select(func.count()).select_from(Schedule).where(Schedule.next_run_at <= started)
    )
    unfinished = db.session.scalar(
        select(func.count()).select_from(Run).where(Run.status.in_(("queued", "running")))
    )
    return due == 0 and unfinished == 0


def fired_lines(log: Path) -> int:
    return log.read_text(errors="replace").count("action=tick_batch")


@one_at_a_time
@also_pgbouncer
def test_kill_9_during_ticks_leaves_every_fire_recorded_exactly_once(
    app: Flask, world: World, workers: Workers, tmp_path: Path
) -> None:
    """100 schedules with 15 due fires each, 3 workers committing one schedule per tick batch;
    each worker seen logging `tick_batch` (logged once a batch commits: it is ticking through
    the next ones) is killed at once and replaced, up to 3 times."""
    first_due = add_minutely_backlog(world.alpha.id, count=100, fires=15)
    started = datetime.now(UTC)
    settings = {"SCHEDULER_BATCH_SIZE": "1", "SCHEDULER_LOCK_TTL": "2"}
    for _ in range(3):
        workers.start(**settings)
    seen: dict[int, int] = defaultdict(int)
    killed: list[int] = []
    deadline = time.monotonic() + 60
    while len(killed) < 3 and time.monotonic() < deadline:
        db.session.rollback()
        if not db.session.scalar(
            select(func.count()).select_from(Schedule).where(Schedule.next_run_at <= started)
        ):
            break  # nothing left due: no tick to interrupt
        for index, process in enumerate(workers.processes):
            if process.poll() is not None:
                continue
            count = fired_lines(tmp_path / f"worker-{index}.log")
            if count > seen[index]:  # firing right now
                process.send_signal(signal.SIGKILL)
                process.wait(10)
                killed.append(process.pid)
                workers.start(**settings)
                break
            seen[index] = count
        time.sleep(0.02)
    assert killed, "no worker was seen firing"
    wait_for(  # 1,500 fires one per batch: over 60 s on SQLite at load 12
        lambda: nothing_due_or_unfinished(started), 120, "every fire recorded and every run ended"
    )
    alive = [process for process in workers.processes if process.poll() is None]
    assert len(alive) == 3
    for process in alive:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, workers.logs()
    total = assert_every_fire_recorded_once(first_due, started)
    assert total >= 100 * 15
    # Every run ended. A run of a killed worker fails as "worker lost" (demo.echo has one
    # attempt), and so may one of a live worker whose tick outlasted the TTL (see
    # test_a_tick_longer_than_the_lock_ttl_does_not_let_its_workers_leases_expire). Runs of
    # the minutes after `started` may still be queued: SIGTERM hands back what was not started.
    outcomes = db.session.execute(
        select(Run.status, Run.error)
        .where(Run.status != "succeeded", Run.scheduled_for <= started)
        .distinct()
    ).all()
    assert set(outcomes) <= {("failed", LOST_ERROR)}, outcomes


@one_at_a_time
def test_a_tick_longer_than_the_lock_ttl_does_not_let_its_workers_leases_expire(
    app: Flask, world: World, workers: Workers
) -> None:
    """A worker leases a 7 s sleep (first in its round), then ticks 1,000 due schedules one per
    batch (over 10 s) with a 3 s lock TTL, while another reaper (the test, calling the workers'
    reap step) reaps all along: the worker renews its lease between batches, so the sleep is
    never taken back and succeeds at its first attempt. (A 1 s TTL failed once in CI: a stall
    of two thirds of a second on a loaded machine is enough to lose a lease so short.)"""
    (run,) = add_sleeps(world.alpha, 7, 1, max_attempts=1)
    add_minutely_backlog(world.alpha.id, count=1000, fires=2)
    process = workers.start(SCHEDULER_BATCH_SIZE="1", SCHEDULER_LOCK_TTL="3")
    wait_for(lambda: get_run(run).status == "running", 60, "the worker to start the sleep")
    reaped = 0
    while get_run(run).status == "running":
        reaped += reap_once(db.session(), database_now(db.session()))
        assert get_run(run).status in ("running", "succeeded"), workers.logs()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0, workers.logs()
    ended = get_run(run)
    assert (ended.status, ended.error, ended.attempt) == ("succeeded", None, 1), workers.logs()
    assert "action=tick_batch" in workers.logs()  # the tick ran while the sleep did


@one_at_a_time
def test_kill_9_during_runs_hands_them_to_another_worker_as_their_next_attempt(
    app: Flask, world: World, workers: Workers
) -> None:
    """Worker A runs 3 sleeps of 60 s on its 3 threads (the oldest runs); B starts and takes the
    3 short sleeps queued after them (A has no free thread); A is killed mid-run. B's reaper
    takes A's runs back once their lease expires (TTL 2 s) and runs them as attempt 2 (sleeps of
    1 s by then: A had read their arguments, so their length costs nothing); B's own runs end at
    attempt 1. The long sleeps outlast B's start-up on a loaded machine (15 s seen in CI, over
    20 s at load 12; with 8 s sleeps A ran the short ones itself before B was up)."""

    def running_on(worker_id: int | None) -> set[int]:
        return set(
            db.session.scalars(
                select(Run.id).where(Run.status == "running", Run.worker_id == worker_id)
            )
        )

    long_runs = add_sleeps(world.alpha, 60, 3)
    short_runs = add_sleeps(world.alpha, 1, 3)  # written now: SQLite has no live writer yet
    settings = {"SCHEDULER_LOCK_TTL": "2"}
    first = workers.start("--concurrency", "3", **settings)
    wait_for(lambda: db.session.scalar(select(Worker.id)), 30, "worker A to register")
    first_id = db.session.scalar(select(Worker.id))
    wait_for(lambda: running_on(first_id) == set(long_runs), 30, "worker A to run 3 sleeps")
    second = workers.start("--concurrency", "3", **settings)
    wait_for(
        lambda: all(
            (run.status, run.worker_id not in (None, first_id)) == ("running", True)
            for run in map(get_run, short_runs)
        ),
        50,
        "worker B to take the short sleeps",
    )
    second_id = db.session.scalar(select(Worker.id).where(Worker.id != first_id))
    assert running_on(first_id) == set(long_runs), "A's sleeps must still be running"
    with write_transaction(db.session) as session:
        session.execute(update(Run).where(Run.id.in_(long_runs)).values(args={"seconds": 1}))
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    runs = long_runs + short_runs
    wait_for(
        lambda: all(get_run(run).status in ("succeeded", "failed") for run in runs),
        60,
        "every run to end",
    )
    ended = [get_run(run) for run in runs]
    assert [(run.status, run.attempt) for run in ended] == [("succeeded", 2)] * 3 + [
        ("succeeded", 1)
    ] * 3, workers.logs()
    assert {run.worker_id for run in ended} == {second_id}
    assert all(run.locked_until is None and run.finished_at for run in ended)
    assert db.session.scalar(select(func.count()).select_from(Run)) == 6
    logs = workers.logs()
    assert all(f"action=run_lease_expired run_id={run} " in logs for run in long_runs), logs
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0


@one_at_a_time
def test_kill_9_behind_a_long_job_spends_no_attempt_of_the_runs_it_never_started(
    app: Flask, world: World, workers: Workers
) -> None:
    """Worker A has one thread and has seen only short jobs (20 echoes): a 12 s sleep and 11
    echoes become available at once; A leases the sleep with a batch of echoes and marks the
    batch started; the sleep runs, the echoes wait behind it. A is killed 2.5 s into the
    sleep, having run none of them (before its renewal gives back runs that waited too long,
    TTL / 3 = 5 s). The echoes lost their marks meanwhile, so B's reaper queues them again with
    no attempt spent and B runs them as attempt 1 (one attempt each: a spent one would fail
    them as "worker lost"). The sleep, started, fails as "worker lost", as before."""
    warm_up = [make_run(world.alpha, minutes_ago=1, max_attempts=1).id for _ in range(20)]
    later = datetime(2100, 1, 1, tzinfo=UTC)  # not available until the update below
    (long_run,) = add_sleeps(world.alpha, 12, 1, max_attempts=1)
    echoes = [make_run(world.alpha, scheduled_for=later, max_attempts=1).id for _ in range(11)]
    db.session.execute(update(Run).where(Run.id == long_run).values(available_at=later))
    db.session.commit()
    settings = {"SCHEDULER_LOCK_TTL": "15"}
    first = workers.start("--concurrency", "1", **settings)
    wait_for(lambda: all(get_run(run).status == "succeeded" for run in warm_up), 60, "the warm-up")
    first_id = db.session.scalar(select(Worker.id))
    now = datetime.now(UTC)
    # The sleep first: one commit, one lease. In a write transaction: on SQLite the session's
    # read above cannot be upgraded once the worker has committed since ("database is locked").
    with write_transaction(db.session) as session:
        session.execute(
            update(Run)
            .where(Run.id.in_([long_run, *echoes]))
            .values(available_at=case((Run.id == long_run, now - MINUTE), else_=now))
        )
    wait_for(lambda: get_run(long_run).started_at is not None, 30, "A to start the sleep")
    time.sleep(2.5)
    db.session.rollback()
    held = [(run.id, run.status, run.worker_id) for run in map(get_run, echoes)]
    # A ran none of them, and holds those it leased with the sleep (a batch: short jobs so far).
    assert all(status in ("queued", "running") for _id, status, _worker in held), held
    assert any(worker == first_id for _id, _status, worker in held), held
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    second = workers.start("--concurrency", "4", **settings)
    wait_for(
        lambda: all(get_run(run).status in ("succeeded", "failed") for run in [long_run, *echoes]),
        90,
        "every run to end",
    )
    second_id = db.session.scalar(select(Worker.id).where(Worker.id != first_id))
    assert (get_run(long_run).status, get_run(long_run).error) == ("failed", LOST_ERROR)
    ended = [get_run(run) for run in echoes]
    assert [(run.status, run.attempt, run.worker_id) for run in ended] == [
        ("succeeded", 1, second_id)
    ] * 11, workers.logs()
    assert "action=start_marks_taken_back" in workers.logs()
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0


class Terminator(threading.Thread):
    """Terminates every other connection to the test's database a few times a second."""

    def __init__(self, database_url: str, interval: float) -> None:
        super().__init__(daemon=True)
        url = make_url(database_url).set(drivername="postgresql")
        self.conninfo = url.render_as_string(hide_password=False)
        self.interval = interval
        self.stop = threading.Event()
        self.rounds = 0
        self.terminated = 0

    def run(self) -> None:
        with psycopg.connect(self.conninfo, autocommit=True) as connection:
            while not self.stop.wait(self.interval):
                row = connection.execute(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                    "FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
                self.rounds += 1
                self.terminated += int(row[0]) if row else 0


# A TTL of 10 s, far above its ticks: it loads the machine, its workers race no short bound.
@heavy_one_at_a_time
@postgresql_only
def test_terminating_every_connection_in_a_loop_loses_and_repeats_no_fire(
    app: Flask, world: World, workers: Workers, database_url: str
) -> None:
    """2 workers fire 200 schedules x 10 minutes (one schedule per batch) and run them, plus
    short sleeps, while every other backend is terminated 4 times a second for 8 s."""
    tenant_id = world.alpha.id
    first_due = add_minutely_backlog(tenant_id, count=200, fires=10)
    sleeps = add_sleeps(world.alpha, 0.5, 6)
    db.session.commit()
    db.session.close()  # the test's own connection is terminated too: nothing may be open on it
    started = datetime.now(UTC)
    terminator = Terminator(database_url, 0.25)
    # A TTL well above the tick's length (see the xfail above); a run whose outcome was lost
    # would still show, as "worker lost" once its lease expires.
    settings = {"SCHEDULER_BATCH_SIZE": "1", "SCHEDULER_LOCK_TTL": "10"}
    processes = [workers.start("--concurrency", "2", **settings) for _ in range(2)]
    logs = [workers.log_dir / f"worker-{n}.log" for n in range(2)]
    deadline = time.monotonic() + 60
    while sum(fired_lines(log) for log in logs) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    terminator.start()
    time.sleep(8)
    terminator.stop.set()
    terminator.join(10)
    db.engine.dispose()  # the pool's connections were terminated
    assert terminator.terminated > 0
    assert all(process.poll() is None for process in processes), workers.logs()
    assert "database_unavailable" in workers.logs()
    # Still working afterwards: they fire and run whatever is left, and a new run.
    after = make_run(
        db.session.get(Tenant, tenant_id), scheduled_for=datetime(2026, 1, 2, tzinfo=UTC)
    ).id
    wait_for(
        lambda: nothing_due_or_unfinished(started), 90, "every fire recorded and every run ended"
    )
    assert get_run(after).status == "succeeded"
    for process in processes:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, workers.logs()
    assert_every_fire_recorded_once(first_due, started)
    # Only fires of a minute after `started` may be left queued by the stop (a slow machine
    # reaches one before the SIGTERM); every run due by then had ended.
    not_succeeded = db.session.execute(
        select(Run.id, Run.status, Run.error).where(
            Run.status != "succeeded", or_(Run.status != "queued", Run.scheduled_for <= started)
        )
    ).all()
    assert not_succeeded == [], not_succeeded[:5]
    assert all(get_run(run).status == "succeeded" for run in sleeps)
