"""Run now without PostgreSQL: the panel wakes idle workers of this machine through their Unix
datagram sockets, instead of leaving the run to their next poll (here 30 s: far longer than any
bound below, so only a wake-up can meet it)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from flask import Flask
from sqlalchemy import func, select

from tests.conftest import World, make_schedule
from tests.panel_helpers import Panel
from tests.scheduler_helpers import get_run
from tests.worker_support import Workers, one_at_a_time, succeeded_ids, wait_for
from webapp.database import utcnow, write_transaction
from webapp.extensions import db
from webapp.models import Run, Worker
from webapp.scheduler.local_wakeup import WakeSocket, wake_directory
from webapp.scheduler.wakeup import notify_workers
from webapp.services.audit import Actor
from webapp.services.defaults import sync_defaults
from webapp.services.schedules import ScheduleInput, create_schedule
from webapp.services.transfer import import_schedules

pytestmark = [
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
    one_at_a_time,
]

SLOW_POLL = {"SCHEDULER_POLL_INTERVAL": "30"}
# Well inside the 30 s poll and the 20 s lease renewal that would otherwise end the sleep.
WOKEN_WITHIN = 5.0


def wake_dir() -> Path:
    directory = wake_directory(db.engine.url)
    assert directory is not None
    return directory


def sockets() -> list[str]:
    return sorted(path.name for path in wake_dir().glob("*.sock"))


def start_idle_workers(workers: Workers, count: int, **settings: str) -> list[int]:
    """Starts `count` workers and waits until each listens on its socket; returns their ids."""
    for _ in range(count):
        workers.start(**{**SLOW_POLL, **settings})
    wait_for(
        lambda: db.session.scalar(select(func.count(Worker.id))) == count,
        120,  # a busy machine starts Python slowly
        "the workers to register",
    )
    ids = list(db.session.scalars(select(Worker.id).order_by(Worker.id)))
    wait_for(lambda: sockets() == sorted(f"{i}.sock" for i in ids), 10, "their sockets")
    time.sleep(1.0)  # past their first round: asleep in the 30 s poll
    return ids


def alice_and_her_schedule(app: Flask, world: World) -> tuple[Panel, int]:
    """Alice logged in (before any worker writes: the test's own session then cannot meet a
    busy SQLite) and a yearly schedule that only Run now starts."""
    schedule = make_schedule(world.alpha, "Yearly", by=world.alice, cron="0 0 1 1 *")
    panel = Panel(app, world.alice)
    panel.token()
    return panel, schedule.id


def run_now_in_the_panel(panel: Panel, schedule_id: int) -> tuple[int, float]:
    """Presses Run now; returns the new run's id and when the request was sent."""
    pressed = time.monotonic()
    assert panel.post(f"/schedules/{schedule_id}/run").status_code == 200
    run_id = db.session.scalar(select(func.max(Run.id)).where(Run.schedule_id == schedule_id))
    assert run_id is not None
    return run_id, pressed


def wait_until_succeeded(run_id: int) -> None:
    wait_for(lambda: get_run(run_id).status == "succeeded", 30, f"run {run_id} to succeed")


@pytest.mark.slow
def test_run_now_in_the_panel_wakes_an_idle_worker_long_before_its_poll(
    app: Flask, world: World, workers: Workers
) -> None:
    panel, schedule_id = alice_and_her_schedule(app, world)
    start_idle_workers(workers, 1)
    run_id, pressed = run_now_in_the_panel(panel, schedule_id)
    wait_until_succeeded(run_id)
    assert time.monotonic() - pressed < WOKEN_WITHIN


@pytest.mark.slow
def test_two_idle_workers_are_woken_and_one_of_them_runs_it_exactly_once(
    app: Flask, world: World, workers: Workers
) -> None:
    panel, schedule_id = alice_and_her_schedule(app, world)
    ids = start_idle_workers(workers, 2)
    run_id, pressed = run_now_in_the_panel(panel, schedule_id)
    wait_until_succeeded(run_id)
    assert time.monotonic() - pressed < WOKEN_WITHIN
    time.sleep(0.5)  # time for a second start, were there one
    run = get_run(run_id)
    assert (run.attempt, run.worker_id in ids) == (1, True)
    assert succeeded_ids(workers.logs()).count(run_id) == 1
    assert db.session.scalar(select(func.count(Run.id)).where(Run.schedule_id == schedule_id)) == 1


@pytest.mark.slow
def test_the_socket_of_a_killed_worker_does_not_break_run_now_and_is_removed(
    app: Flask, world: World, workers: Workers
) -> None:
    panel, schedule_id = alice_and_her_schedule(app, world)
    start_idle_workers(workers, 2)
    victim = workers.processes[0]
    killed = db.session.scalar(select(Worker.id).where(Worker.pid == victim.pid))
    alive = db.session.scalar(select(Worker.id).where(Worker.pid != victim.pid))
    victim.kill()  # no clean exit: its socket file stays behind
    victim.wait(10)
    assert f"{killed}.sock" in sockets()
    run_id, pressed = run_now_in_the_panel(panel, schedule_id)
    wait_until_succeeded(run_id)
    assert time.monotonic() - pressed < WOKEN_WITHIN
    assert get_run(run_id).worker_id == alive
    assert sockets() == [f"{alive}.sock"]


@pytest.mark.slow
def test_a_worker_removes_its_socket_when_it_stops(app: Flask, workers: Workers) -> None:
    [worker_id] = start_idle_workers(workers, 1)
    assert sockets() == [f"{worker_id}.sock"]
    workers.processes[0].send_signal(signal.SIGTERM)
    assert workers.processes[0].wait(30) == 0
    assert sockets() == []


@pytest.mark.slow
def test_a_worker_that_cannot_make_its_wake_directory_polls_and_still_runs_run_now(
    app: Flask, world: World, workers: Workers
) -> None:
    wake_dir().write_text("not a directory")
    panel, schedule_id = alice_and_her_schedule(app, world)
    workers.start(SCHEDULER_POLL_INTERVAL="0.2")
    wait_for(lambda: db.session.scalar(select(Worker.id)), 120, "the worker to register")
    run_id, _ = run_now_in_the_panel(panel, schedule_id)
    wait_until_succeeded(run_id)
    assert "action=local_wakeup_unavailable" in workers.logs()


def test_a_commit_that_queues_work_wakes_the_sockets_and_a_rollback_does_not(
    app: Flask,
) -> None:
    listener = WakeSocket.bind(wake_dir(), "listener")
    assert listener is not None
    listener.receiver.settimeout(0.5)
    try:
        with pytest.raises(RuntimeError), write_transaction(db.session) as session:
            notify_workers(session)
            raise RuntimeError("the change fails")
        assert listener.wait() is False  # nothing came: the wait timed out
        with write_transaction(db.session) as session:
            notify_workers(session)
        assert listener.wait() is True
        with write_transaction(db.session):
            pass  # a later commit that queues nothing
        assert listener.wait() is False
    finally:
        listener.close()
    assert sockets() == []


def test_every_way_schedules_are_created_or_changed_wakes_the_workers(
    app: Flask, world: World
) -> None:
    """Create, import and the catalog's defaults share one path: each wakes idle workers at
    once, as an edit does (the import and the default sync once left them to their poll)."""
    listener = WakeSocket.bind(wake_dir(), "listener")
    assert listener is not None
    listener.receiver.settimeout(0.5)
    item: dict[str, object] = {"key": "nightly", "name": "Nightly", "job": "demo.echo"}
    item |= {"args": {"message": "hello"}, "cron": "0 3 * * *"}
    try:
        assert sync_defaults(utcnow()) == 1  # the system's maintenance.prune_runs
        assert listener.wait() is True
        created = import_schedules(world.alpha, json.dumps([item]), Actor.cli(), utcnow())
        assert (created.created, listener.wait()) == (1, True)
        edited = {**item, "cron": "0 4 * * *"}
        changed = import_schedules(world.alpha, json.dumps([edited]), Actor.cli(), utcnow())
        assert (changed.updated, listener.wait()) == (1, True)
        same = import_schedules(world.alpha, json.dumps([edited]), Actor.cli(), utcnow())
        assert (same.unchanged, listener.wait()) == (1, False)  # nothing changed: no wake
        data = ScheduleInput(
            name="Hourly", job="demo.echo", args={"message": "hi"}, cron="@hourly", time_zone="UTC"
        )
        create_schedule(world.alpha, data, Actor.cli(), utcnow())
        assert listener.wait() is True
    finally:
        listener.close()
