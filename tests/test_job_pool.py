"""The job pool's table of held runs: with its real job threads running real jobs, and step by
step with an explicit monotonic now for fencing (which runs a slot may start) and leasing."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from threading import Event

import pytest
from flask import Flask
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from tests.conftest import WorkerFactory, World, make_run
from tests.scheduler_helpers import get_run, leased_run
from webapp import config
from webapp.catalog import build_catalog
from webapp.extensions import db
from webapp.scheduler.execution import Outcome, run_attempt
from webapp.scheduler.leases import LeasedRun, lease_once, reap_once, renew_leases
from webapp.scheduler.pool import MAX_LEASE_BATCH, Held, Slot, ThreadJobPool
from webapp.scheduler.worker import WorkerProcess


@pytest.fixture
def pool(app: Flask) -> Iterator[ThreadJobPool]:
    catalog = build_catalog(demo_jobs=True)
    started = ThreadJobPool(app, catalog, config.settings(app).job_settings(), 8, threading.Event())
    started.start()
    yield started
    started.stop()


def submit_started(pool: ThreadJobPool, runs: list[LeasedRun]) -> None:
    """Runs leased, and their start marks written at once (the worker's start step, with a
    statement that marked every one)."""
    pool.submit(runs, math.inf, time.monotonic())
    with pool.lock:
        chosen = [held for held in pool.waiting if held.run in runs]
    pool.start_marked(chosen, {run.id for run in runs})


def test_renewal_sees_every_held_run_while_runs_move_from_queue_to_slot(
    pool: ThreadJobPool,
) -> None:
    """8 job threads take runs off the queue while the main thread reads what it holds, as
    lease renewal does: a run is held from its lease until its outcome is stored, so no read
    may miss one, whether it waits, runs or has just finished."""
    held: set[int] = set()
    reads = 0
    for batch in range(150):
        runs = [leased_run(batch * 20 + n, message=str(batch * 20 + n)) for n in range(1, 21)]
        submit_started(pool, runs)
        held.update(run.id for run in runs)
        for _ in range(20):
            missed = held - set(pool.held_ids())
            assert not missed, f"renewal would miss runs {sorted(missed)}"
            reads += 1
        stored = pool.due_outcomes(force=True)
        pool.stored(stored)
        held.difference_update(done.run.id for done in stored)
    assert reads == 3000
    while held:  # the last ones: wait for their threads (the wake event says one finished)
        pool.wake.wait(5)
        pool.wake.clear()
        stored = pool.due_outcomes(force=True)
        pool.stored(stored)
        held.difference_update(done.run.id for done in stored)
    assert pool.held_ids() == [] and pool.busy() == 0


def test_every_run_ends_with_its_own_outcome(pool: ThreadJobPool) -> None:
    runs = [leased_run(n, message=str(n)) for n in range(1, 201)]
    submit_started(pool, runs)
    outcomes: dict[int, Outcome] = {}
    while len(outcomes) < len(runs):
        pool.wake.wait(5)
        pool.wake.clear()
        stored = pool.due_outcomes(force=True)
        pool.stored(stored)
        outcomes.update({done.run.id: done.outcome for done in stored})
    assert {o.status for o in outcomes.values()} == {"succeeded"}
    assert all(o.output == f"{run_id}\n" for run_id, o in outcomes.items())


# --- fencing and leasing, step by step: no job threads, the test plays the slots ----------------

TTL = timedelta(seconds=6)
NOW = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)


@pytest.fixture
def idle_pool(app: Flask) -> ThreadJobPool:
    """A pool with two slots and no threads: the test takes runs for the slots itself, with an
    explicit time.monotonic() value."""
    idle = ThreadJobPool(
        app, build_catalog(demo_jobs=True), config.settings(app).job_settings(), 2, Event()
    )
    idle.slots = [Slot(), Slot()]
    return idle


def start_next(pool: ThreadJobPool, slot: Slot, now: float) -> Held | None:
    """What the worker's start step and then a free slot do at `now`: the runs the pool asks
    to mark are marked (the statement found them all ours), and the slot takes one."""
    chosen, _room = pool.to_start(now)
    pool.start_marked(chosen, {held.run.id for held in chosen})
    with pool.lock:
        return pool.start_next(slot, now)


def test_a_held_run_whose_lease_has_passed_is_not_started(idle_pool: ThreadJobPool) -> None:
    slot = idle_pool.slots[0]
    idle_pool.submit([leased_run(1, message="late")], lease_deadline=106.0, now=100.0)
    assert start_next(idle_pool, slot, now=106.5) is None  # frozen past its lease: not started
    assert idle_pool.busy() == 1  # still held until renewal says whose it is
    idle_pool.renewed([1], {1}, lease_deadline=112.5)  # nobody took it: ours again
    held = start_next(idle_pool, slot, now=106.6)
    assert held is not None and held.run.id == 1 and slot.held is held


def test_renewal_that_finds_a_lease_lost_drops_the_run(
    app: Flask,
    world: World,
    idle_pool: ThreadJobPool,
    caplog: pytest.LogCaptureFixture,
    make_worker: WorkerFactory,
) -> None:
    """Two runs leased 30 s apart; a reaper takes back the older one while this worker could not
    renew. The renewal's own answer tells the pool: the lost run is dropped, never started."""
    worker = make_worker().id
    lost = make_run(world.alpha, scheduled_for=NOW, args={"message": "lost"}, max_attempts=2)
    (leased_lost,) = lease_once(db.session(), worker, NOW, TTL, 1)
    kept = make_run(world.alpha, scheduled_for=NOW, args={"message": "kept"})
    (leased_kept,) = lease_once(db.session(), worker, NOW + timedelta(seconds=30), TTL, 1)
    idle_pool.submit([leased_lost, leased_kept], lease_deadline=106.0, now=100.0)
    assert reap_once(db.session(), NOW + TTL + timedelta(seconds=1)) == 1
    held = idle_pool.held_ids()
    with caplog.at_level(logging.INFO, logger="webapp.worker"):
        renewed = set(renew_leases(db.session(), worker, held, NOW + timedelta(seconds=32), TTL))
        idle_pool.renewed(held, renewed, lease_deadline=140.0)
    assert renewed == {kept.id}
    assert idle_pool.held_ids() == [kept.id]
    slot = idle_pool.slots[0]
    started = start_next(idle_pool, slot, now=110.0)
    assert started is not None and started.run.id == kept.id
    assert start_next(idle_pool, idle_pool.slots[1], now=110.0) is None  # the lost one: never
    (record,) = [r for r in caplog.records if getattr(r, "action", None) == "run_lease_lost"]
    assert (getattr(record, "run_id", None), getattr(record, "state", None)) == (lost.id, "waiting")
    assert get_run(lost.id).status == "queued"


def test_a_running_run_whose_lease_is_lost_is_no_longer_renewed(idle_pool: ThreadJobPool) -> None:
    slot = idle_pool.slots[0]
    idle_pool.submit([leased_run(1, message="x")], lease_deadline=106.0, now=100.0)
    assert start_next(idle_pool, slot, now=101.0) is not None
    idle_pool.renewed([1], set(), lease_deadline=110.0)
    assert idle_pool.held_ids() == [] and slot.held is not None  # its job goes on
    assert idle_pool.busy() == 1


def test_leasing_stops_when_the_slots_are_busy_with_long_jobs(idle_pool: ThreadJobPool) -> None:
    assert idle_pool.wanted(now=100.0) == 2  # no job seen yet: one run per free slot
    idle_pool.average_duration = 0.0001  # very short jobs so far: a backlog, up to the cap
    assert idle_pool.wanted(now=100.0) == MAX_LEASE_BATCH
    idle_pool.submit([leased_run(1), leased_run(2)], lease_deadline=160.0, now=100.0)
    for slot in idle_pool.slots:
        assert start_next(idle_pool, slot, now=100.0) is not None
    # Both jobs have just started: short ones finish soon, so a backlog may wait for them.
    assert idle_pool.wanted(now=100.01) > 0
    # Both have run for 10 s: long jobs. A run leased now would wait behind them.
    assert idle_pool.wanted(now=110.0) == 0
    # Long jobs known: only a free slot takes a run, and only one.
    idle_pool.average_duration = 10.0
    assert idle_pool.wanted(now=110.0) == 0
    idle_pool.slots.append(Slot())
    assert idle_pool.wanted(now=110.0) == 1


@contextmanager
def runs_table_gone() -> Iterator[None]:
    """The database refuses every write to `runs` (the table is renamed away, as a real outage
    would refuse it), then takes them again."""
    db.session.commit()
    with db.engine.begin() as connection:
        connection.execute(text("ALTER TABLE runs RENAME TO runs_away"))
    try:
        yield
    finally:
        db.session.rollback()
        with db.engine.begin() as connection:
            connection.execute(text("ALTER TABLE runs_away RENAME TO runs"))


def test_outcomes_are_kept_across_a_failed_store_and_stored_after(
    app: Flask, world: World, idle_pool: ThreadJobPool, caplog: pytest.LogCaptureFixture
) -> None:
    worker = WorkerProcess(app, concurrency=2)
    worker.register()
    assert worker.worker_id is not None
    worker.pool = idle_pool
    run = make_run(world.alpha, scheduled_for=NOW, args={"message": "finished"})
    (leased,) = lease_once(db.session(), worker.worker_id, NOW, TTL, 1)
    idle_pool.submit([leased], lease_deadline=math.inf, now=0.0)
    slot = idle_pool.slots[0]
    held = start_next(idle_pool, slot, now=0.0)
    assert held is not None
    done = run_attempt(held.run, idle_pool.catalog, idle_pool.settings, db.session())
    idle_pool.complete(slot, held, done)
    with runs_table_gone(), caplog.at_level(logging.INFO, logger="webapp.worker"):
        with pytest.raises(DBAPIError):
            worker.flush(force=True)
        with pytest.raises(DBAPIError):
            worker.flush(force=True)  # every round tries again; nothing is lost meanwhile
    assert idle_pool.due_outcomes(force=True) == [done]
    assert idle_pool.held_ids() == [run.id]  # still held, so still renewed
    failures = [
        r for r in caplog.records if getattr(r, "action", None) == "run_outcomes_not_stored"
    ]
    assert len(failures) == 2
    worker.flush(force=True)  # the database is back
    stored = get_run(run.id)
    assert (stored.status, stored.output) == ("succeeded", "finished\n")
    assert idle_pool.held_ids() == [] and idle_pool.due_outcomes(force=True) == []


def test_a_run_that_waited_too_long_for_a_slot_is_taken_back_to_be_released(
    idle_pool: ThreadJobPool,
) -> None:
    idle_pool.submit([leased_run(1)], lease_deadline=106.0, now=100.0)
    idle_pool.submit([leased_run(2)], lease_deadline=108.0, now=102.0)
    taken = idle_pool.take_waiting(leased_before=101.0)  # renewal at 103, interval 2 s
    assert [held.run.id for held in taken] == [1]
    assert idle_pool.held_ids() == [2]  # no slot can start it now: its lease is released
    held = start_next(idle_pool, idle_pool.slots[0], now=103.0)
    assert held is not None and held.run.id == 2
