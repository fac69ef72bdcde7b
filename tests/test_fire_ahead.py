"""SCHEDULER_FIRE_AHEAD: a fire queued before its time waits for it, is recorded once, and is
taken back by any change of its schedule before that time; on both databases."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from tests.conftest import WorkerFactory, World, make_run, make_schedule
from tests.scheduler_helpers import all_runs, catalog, execute_leased, settings
from tests.worker_support import Workers, postgresql_only, wait_for
from webapp.config import ConfigError, load_settings
from webapp.database import utcnow, write_transaction
from webapp.extensions import db
from webapp.models import Run, Schedule
from webapp.scheduler.leases import lease_once
from webapp.scheduler.tick import TickResult, tick, tick_once
from webapp.services.audit import Actor
from webapp.services.schedules import (
    delete_schedule,
    pause_schedule,
    resume_schedule,
    update_schedule,
)
from webapp.services.transfer import export_schedules, import_schedules

AHEAD = timedelta(seconds=10)
TTL = timedelta(seconds=60)


def next_hour() -> datetime:
    """A fire time T still to come on the real clock (a change of the schedule before T, made
    at the real time, takes its run back), an hour or more away."""
    return (utcnow() + timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)


def run_tick(now: datetime) -> TickResult:
    return tick(db.session(), catalog(), settings(fire_ahead=AHEAD), now)


def hourly(world: World, fire: datetime, **fields: Any) -> Schedule:
    return make_schedule(world.alpha, "hourly", fire, **fields)


def next_run_at(schedule_id: int) -> datetime | None:
    db.session.expire_all()
    return db.session.scalar(select(Schedule.next_run_at).where(Schedule.id == schedule_id))


def fires(schedule_id: int) -> list[tuple[datetime, str, object]]:
    return [
        (run.scheduled_for, run.status, run.args)
        for run in all_runs()
        if run.schedule_id == schedule_id
    ]


def test_a_fire_is_queued_ahead_and_starts_at_its_time_once(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    fire = next_hour()
    schedule = hourly(world, fire)
    assert run_tick(fire - AHEAD - timedelta(seconds=1)).claimed == 0  # not yet in the window
    result = run_tick(fire - timedelta(seconds=5))
    assert (result.claimed, result.queued, result.first_start) == (1, 1, fire)
    (run,) = all_runs()
    assert (run.status, run.trigger, run.scheduled_for, run.available_at) == (
        "queued",
        "schedule",
        fire,
        fire,
    )
    assert run.queued_at == fire - timedelta(seconds=5)
    assert next_run_at(schedule.id) == fire + timedelta(hours=1)
    worker = make_worker().id
    assert lease_once(db.session(), worker, fire - timedelta(seconds=1), TTL, 10) == []
    assert run_tick(fire).claimed == 0  # its time comes: nothing to fire again
    (leased,) = lease_once(db.session(), worker, fire, TTL, 10)
    assert leased.id == run.id
    assert len(all_runs()) == 1


def test_a_schedule_that_skips_overlaps_fires_only_at_its_time(app: Flask, world: World) -> None:
    """Whether an earlier run is still going is only known at the fire time."""
    fire = next_hour()
    schedule = hourly(world, fire, overlap_policy="skip")
    assert run_tick(fire - timedelta(seconds=5)).claimed == 0
    assert all_runs() == []
    assert run_tick(fire).queued == 1
    assert [at for at, _, _ in fires(schedule.id)] == [fire]


def test_pausing_before_the_fire_time_takes_the_run_back(app: Flask, world: World) -> None:
    fire = next_hour()
    schedule = hourly(world, fire)
    run_tick(fire - timedelta(seconds=5))
    pause_schedule(schedule, Actor.for_user(world.alice))
    assert fires(schedule.id) == []
    assert next_run_at(schedule.id) == fire  # as if never claimed
    assert run_tick(fire + timedelta(seconds=1)).claimed == 0  # paused: nothing fires
    # Resumed with catch-up before the fire's grace has passed: it fires once, at its time.
    resume_schedule(schedule, Actor.for_user(world.alice), utcnow(), catch_up=True)
    assert run_tick(fire + timedelta(seconds=2)).queued == 1
    assert [(at, status) for at, status, _ in fires(schedule.id)] == [(fire, "queued")]


def test_an_edit_before_the_fire_time_fires_the_schedule_as_edited_once(
    app: Flask, world: World
) -> None:
    fire = next_hour()
    schedule = hourly(world, fire, cron="0 * * * *")
    run_tick(fire - timedelta(seconds=5))
    assert [args for _, _, args in fires(schedule.id)] == [{"message": "hourly"}]
    edit = {
        "name": "hourly",
        "job": "demo.echo",
        "args": {"message": "edited"},
        "cron": "0 * * * *",
        "time_zone": "UTC",
    }
    update_schedule(schedule, edit, Actor.for_user(world.alice), utcnow())
    assert fires(schedule.id) == []
    assert schedule.next_run_at == fire
    run_tick(fire - timedelta(seconds=4))
    assert fires(schedule.id) == [(fire, "queued", {"message": "edited"})]


def test_a_new_cron_before_the_fire_time_takes_the_old_fire_back(app: Flask, world: World) -> None:
    fire = next_hour()
    schedule = hourly(world, fire, cron="0 * * * *")
    run_tick(fire - timedelta(seconds=5))
    edit = {"name": "hourly", "job": "demo.echo", "args": {}, "cron": "30 * * * *"}
    edit |= {"args": {"message": "x"}, "time_zone": "UTC"}
    now = utcnow()
    update_schedule(schedule, edit, Actor.for_user(world.alice), now)
    assert fires(schedule.id) == []
    restarted = next_run_at(schedule.id)  # the new cadence, from now
    assert restarted is not None and restarted.minute == 30
    assert now < restarted <= now + timedelta(hours=1)


def test_deleting_before_the_fire_time_leaves_no_run(app: Flask, world: World) -> None:
    fire = next_hour()
    schedule = hourly(world, fire)
    run_tick(fire - timedelta(seconds=5))
    delete_schedule(schedule, Actor.for_user(world.alice))
    assert all_runs() == []


def test_an_import_that_changes_the_schedule_takes_its_run_back(app: Flask, world: World) -> None:
    fire = next_hour()
    schedule = hourly(world, fire)
    run_tick(fire - timedelta(seconds=5))
    document = json.loads(export_schedules(world.alpha))
    document[0]["args"] = {"message": "imported"}
    import_schedules(world.alpha, json.dumps(document), Actor.cli(), utcnow())
    assert fires(schedule.id) == []
    run_tick(fire - timedelta(seconds=4))
    assert fires(schedule.id) == [(fire, "queued", {"message": "imported"})]


def test_a_schedule_that_pauses_itself_takes_its_next_run_back(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    fire = next_hour()
    schedule = hourly(world, fire, pause_after_failures=1)
    run_tick(fire - timedelta(seconds=5))
    failing = make_run(
        world.alpha,
        scheduled_for=utcnow(),
        schedule_id=schedule.id,
        job="demo.fail",
        args={"message": "x"},
    )
    worker = make_worker().id
    (leased,) = lease_once(db.session(), worker, None, TTL, 1)
    assert leased.id == failing.id
    execute_leased(leased, worker)
    db.session.expire_all()
    paused = db.session.get(Schedule, schedule.id)
    assert paused is not None and not paused.active
    assert [at for at, _, _ in fires(schedule.id)] == [failing.scheduled_for]
    assert paused.next_run_at == fire


def test_a_started_run_is_never_taken_back(app: Flask, world: World) -> None:
    """Only queued runs whose fire time is still to come are withdrawn."""
    fire = next_hour()
    schedule = hourly(world, fire)
    run_tick(fire - timedelta(seconds=5))
    (run,) = all_runs()
    run.status = "running"  # as a lease leaves it
    db.session.commit()
    pause_schedule(schedule, Actor.for_user(world.alice))
    assert [(at, status) for at, status, _ in fires(schedule.id)] == [(fire, "running")]


@postgresql_only
def test_a_pause_while_a_tick_queues_the_fire_waits_for_it_and_takes_the_run_back(
    app: Flask, world: World
) -> None:
    """The tick has claimed the schedule and inserted its run ahead, not yet committed: the
    pause must wait for that commit and withdraw the run, not miss it and leave it queued."""
    fire = next_hour()
    schedule = hourly(world, fire)
    engine, jobs, tick_settings = db.engine, catalog(), settings(fire_ahead=AHEAD)  # no app here
    inserted, release = threading.Event(), threading.Event()
    ticked: list[TickResult] = []

    def tick_holding_its_commit() -> None:
        with Session(engine) as session:

            @event.listens_for(session, "before_commit")
            def hold(_: Session) -> None:
                inserted.set()
                release.wait(30)

            ticked.append(tick_once(session, jobs, tick_settings, fire - AHEAD))

    def pause() -> None:
        with app.app_context():
            pause_schedule(db.session.get_one(Schedule, schedule.id), Actor.for_user(world.alice))

    ticking = threading.Thread(target=tick_holding_its_commit)
    ticking.start()
    assert inserted.wait(30)
    pausing = threading.Thread(target=pause)
    pausing.start()
    pausing.join(1.5)  # long enough to have missed the run, were it not waiting
    release.set()
    ticking.join(30)
    pausing.join(30)
    assert [result.queued for result in ticked] == [1]
    assert fires(schedule.id) == []
    assert next_run_at(schedule.id) == fire


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("SCHEDULER_FIRE_AHEAD = -5", "SCHEDULER_FIRE_AHEAD=-5 must be from 0 to 3600"),
        ("SCHEDULER_FIRE_AHEAD = 4000", "SCHEDULER_FIRE_AHEAD=4000 must be from 0 to 3600"),
        ("SCHEDULER_FIRE_AHEAD = 'soon'", "SCHEDULER_FIRE_AHEAD='soon' is not a valid float"),
    ],
)
def test_a_fire_ahead_out_of_range_is_refused_at_start(
    tmp_path: Path, line: str, message: str
) -> None:
    (tmp_path / "config.py").write_text(line + "\n")
    with pytest.raises(ConfigError) as bad:
        load_settings(str(tmp_path))
    assert str(bad.value) == f"{message} (in {tmp_path}/config.py)"


@pytest.mark.slow
def test_a_real_worker_queues_the_fire_ahead_and_starts_it_at_its_time(
    app: Flask, world: World, workers: Workers, tmp_path: Path
) -> None:
    workers.start("--concurrency", "1", SCHEDULER_FIRE_AHEAD="30")
    log = tmp_path / "worker-0.log"
    wait_for(lambda: "action=worker_started" in log.read_text(), 60, "the worker to start")
    fire = (utcnow() + timedelta(seconds=10)).replace(microsecond=0)
    with write_transaction(db.session):  # SQLite: wait for the worker's write lock
        schedule = make_schedule(world.alpha, "soon", fire, cron="0 0 1 1 *")

    def status() -> str | None:
        return db.session.scalar(select(Run.status).where(Run.schedule_id == schedule.id))

    wait_for(status, 30, "the fire to be queued ahead")
    wait_for(lambda: status() == "succeeded", 60, "the run to finish")
    run = db.session.scalars(select(Run).where(Run.schedule_id == schedule.id)).one()
    assert run.scheduled_for == fire and run.started_at is not None
    assert run.queued_at < fire <= run.started_at, workers.logs()
