"""Start marks: a run is leased without a start; a worker writes the start (fenced by its lease)
just before a slot starts the job, and the reaper returns a run that never started without
spending an attempt. Step by step with an explicit now, on both databases."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from threading import Event

import pytest
from flask import Flask

from tests.conftest import WorkerFactory, World, make_run
from tests.panel_helpers import Panel
from tests.scheduler_helpers import execute_leased, get_run, lease_and_start, leased_run
from webapp.catalog.current import current_catalog
from webapp.extensions import db
from webapp.scheduler.leases import (
    lease_once,
    lease_with_starts,
    reap_once,
    renew_leases,
    start_runs,
)
from webapp.scheduler.pool import LONG_JOB_SECONDS, Slot, ThreadJobPool
from webapp.scheduler.runs import LOST_ERROR, NOT_STARTED_ERROR, REQUEUE_ERROR
from webapp.scheduler.worker import WorkerProcess

NOW = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)
SECOND = timedelta(seconds=1)


def lease(worker: int, now: datetime = NOW, limit: int = 10) -> list[int]:
    return [run.id for run in lease_once(db.session(), worker, now, TTL, limit)]


def test_a_lease_leaves_the_start_unwritten_until_the_start_mark(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    run = make_run(world.alpha, scheduled_for=NOW)
    (leased,) = lease_once(db.session(), worker, NOW, TTL, 1)
    assert leased.started_at is None
    leased_row = get_run(run.id)
    assert (leased_row.status, leased_row.attempt, leased_row.started_at) == ("running", 1, None)
    assert start_runs(db.session(), worker, [run.id], NOW + SECOND) == {run.id}
    assert get_run(run.id).started_at == NOW + SECOND


def test_a_lease_marks_started_only_the_runs_its_free_slots_take_at_once(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    """The lease itself writes the start of the first runs (by id) the free slots take; if the
    worker is lost, those count their attempt and the others go back without spending one."""
    worker = make_worker().id
    runs = [
        make_run(world.alpha, scheduled_for=NOW - (3 - n) * SECOND, max_attempts=3)
        for n in range(3)
    ]
    lease = lease_with_starts(db.session(), worker, NOW, TTL, 3, [], 1)
    assert [run.id for run in lease.runs] == [run.id for run in runs]
    assert lease.started == {runs[0].id}
    assert [get_run(run.id).started_at for run in runs] == [NOW, None, None]
    reap_once(db.session(), NOW + TTL + SECOND)
    assert [(get_run(run.id).status, get_run(run.id).attempt) for run in runs] == [
        ("queued", 1),
        ("queued", 0),
        ("queued", 0),
    ]


def test_the_start_mark_writes_only_runs_whose_lease_this_worker_holds_and_has_not_passed(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    mine, expired, theirs, queued = (
        make_run(world.alpha, scheduled_for=NOW - SECOND + n * timedelta(microseconds=1))
        for n in range(4)
    )
    worker, other = make_worker().id, make_worker().id
    assert lease(worker, limit=2) == [mine.id, expired.id]
    assert lease(other, NOW + TTL / 2, limit=1) == [theirs.id]
    renew_leases(db.session(), worker, [mine.id], NOW + TTL / 2, TTL)
    at = NOW + TTL + SECOND  # `expired`'s lease has passed; `mine` was renewed
    ids = [mine.id, expired.id, theirs.id, queued.id]
    assert start_runs(db.session(), worker, ids, at) == {mine.id}
    assert [get_run(run_id).started_at for run_id in ids] == [at, None, None, None]


def test_the_start_mark_refuses_a_run_a_reaper_has_taken_back(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    run = make_run(world.alpha, scheduled_for=NOW, max_attempts=3)
    lease(worker)
    assert reap_once(db.session(), NOW + TTL + SECOND) == 1
    assert start_runs(db.session(), worker, [run.id], NOW + SECOND) == set()
    assert lease(make_worker().id, NOW + TTL + 2 * SECOND) == [run.id]  # leased again elsewhere
    assert start_runs(db.session(), worker, [run.id], NOW + TTL + 3 * SECOND) == set()


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_a_run_leased_and_never_started_is_queued_again_without_spending_an_attempt(
    app: Flask,
    world: World,
    max_attempts: int,
    caplog: pytest.LogCaptureFixture,
    make_worker: WorkerFactory,
) -> None:
    run = make_run(world.alpha, scheduled_for=NOW, max_attempts=max_attempts)
    lease(make_worker().id)
    with caplog.at_level(logging.WARNING, logger="webapp.scheduler"):
        assert reap_once(db.session(), NOW + TTL + SECOND) == 1
    reaped = get_run(run.id)
    assert (reaped.status, reaped.attempt, reaped.worker_id, reaped.locked_until) == (
        "queued",
        0,
        None,
        None,
    )
    # Back in its place in the queue: available since it first was.
    assert (reaped.error, reaped.finished_at, reaped.available_at) == (NOT_STARTED_ERROR, None, NOW)
    (record,) = [r for r in caplog.records if getattr(r, "action", "") == "run_lease_expired"]
    assert (getattr(record, "requeued", None), getattr(record, "started", None)) == (True, False)
    # Another worker runs it as its first attempt, and it succeeds.
    other = make_worker().id
    (leased,) = lease_and_start(other, NOW + TTL + 2 * SECOND, TTL)
    assert leased.attempt == 1
    execute_leased(leased, other)
    ended = get_run(run.id)
    assert (ended.status, ended.attempt, ended.error) == ("succeeded", 1, None)


def test_a_started_run_is_reaped_as_before_in_the_same_statement(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    """One run started and one only leased, both of a worker that is lost, with one attempt
    each: the started one fails as "worker lost", the other is queued again; a started run with
    attempts left is queued as its next attempt."""
    worker = make_worker().id
    started = make_run(world.alpha, scheduled_for=NOW - timedelta(microseconds=3))
    retried = make_run(world.alpha, scheduled_for=NOW - timedelta(microseconds=2), max_attempts=2)
    waiting = make_run(world.alpha, scheduled_for=NOW - timedelta(microseconds=1))
    assert lease(worker) == [started.id, retried.id, waiting.id]
    assert start_runs(db.session(), worker, [started.id, retried.id], NOW) == {
        started.id,
        retried.id,
    }
    assert reap_once(db.session(), NOW + TTL + SECOND) == 3
    ends = [get_run(run.id) for run in (started, retried, waiting)]
    assert [(run.status, run.attempt, run.error) for run in ends] == [
        ("failed", 1, LOST_ERROR),
        ("queued", 1, REQUEUE_ERROR),
        ("queued", 0, NOT_STARTED_ERROR),
    ]


def test_a_retry_leased_again_and_never_started_keeps_its_attempt_count(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    """Attempt 1 failed; attempt 2 is leased, and its worker is lost before starting it: the
    run waits for attempt 2 again (its first attempt's start is no start of this one)."""
    worker = make_worker().id
    run = make_run(
        world.alpha, scheduled_for=NOW, job="demo.fail", args={"message": "x"}, max_attempts=2
    )
    (first,) = lease_and_start(worker, NOW, TTL)
    execute_leased(first, worker)
    retry_at = get_run(run.id).available_at
    assert (get_run(run.id).status, get_run(run.id).attempt) == ("queued", 1)
    assert lease(worker, retry_at) == [run.id]
    assert get_run(run.id).started_at is None
    reap_once(db.session(), retry_at + TTL + SECOND)
    assert (get_run(run.id).status, get_run(run.id).attempt) == ("queued", 1)


def test_a_worker_round_starts_only_what_its_start_mark_wrote(app: Flask, world: World) -> None:
    """The worker's step, by the database's clock: both free slots get a run marked; the run
    whose lease a reaper took back meanwhile is not marked, is dropped from the pool and never
    starts."""
    now = datetime.now(UTC)
    kept = make_run(world.alpha, scheduled_for=now - timedelta(microseconds=2))
    lost = make_run(world.alpha, scheduled_for=now - timedelta(microseconds=1), max_attempts=2)
    worker = WorkerProcess(app, concurrency=2)
    worker.register()
    assert worker.worker_id is not None
    worker.pool = pool = ThreadJobPool(app, current_catalog(), {}, 2, Event())
    pool.slots.extend([Slot(), Slot()])  # free slots without threads: nothing starts here
    pool.submit(lease_once(db.session(), worker.worker_id, now, TTL, 2), 1e12, 0.0)
    renew_leases(db.session(), worker.worker_id, [kept.id], now + TTL / 2, TTL)
    assert reap_once(db.session(), now + TTL + SECOND) == 1  # `lost`, by another worker
    assert [held.run.id for held in pool.to_start(0.0)[0]] == [kept.id, lost.id]
    worker.lease()  # nothing more to lease: the start marks alone
    assert get_run(kept.id).started_at is not None and get_run(lost.id).started_at is None
    assert list(pool.held) == [kept.id]
    assert [(held.run.id, held.start_marked) for held in pool.waiting] == [(kept.id, True)]


def test_a_slot_starts_no_run_without_its_start_mark(app: Flask) -> None:
    pool = ThreadJobPool(app, current_catalog(), {}, 1, Event())
    pool.slots.append(slot := Slot())  # a free slot without a thread: the test starts its runs
    pool.submit([leased_run(1), leased_run(2)], lease_deadline=100.0, now=0.0)
    assert pool.start_next(slot, 1.0) is None
    chosen, room = pool.to_start(1.0)
    assert ([held.run.id for held in chosen], room) == ([1], 0)  # one free slot: one run
    pool.start_marked(chosen, {1})
    started = pool.start_next(slot, 1.0)
    assert started is not None and started.run.id == 1
    assert pool.to_start(1.0) == ([], 0)  # the slot is busy: nothing more is marked


def test_the_panel_shows_a_leased_run_as_not_started_yet(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker().id
    run = make_run(world.alpha, scheduled_for=NOW)
    lease(worker, datetime.now(UTC))
    panel = Panel(app, world.alice)
    detail = panel.get(f"/runs/{run.id}").get_data(as_text=True)
    assert '<dt>Started</dt><dd><span class="muted not-started">leased, not started yet' in (detail)
    assert "leased, not started yet" in panel.get("/runs").get_data(as_text=True)
    start_runs(db.session(), worker, [run.id])
    assert "not started yet" not in panel.get(f"/runs/{run.id}").get_data(as_text=True)


def test_a_worker_round_leases_and_marks_what_its_free_slots_take_in_one_transaction(
    app: Flask, world: World
) -> None:
    """Two free slots, no job seen yet: the lease takes one run per slot and marks both."""
    now = datetime.now(UTC)
    runs = [make_run(world.alpha, scheduled_for=now - timedelta(seconds=3 - n)) for n in range(3)]
    worker = WorkerProcess(app, concurrency=2)
    worker.register()
    worker.pool = pool = ThreadJobPool(app, current_catalog(), {}, 2, Event())
    pool.slots.extend([Slot(), Slot()])
    assert worker.lease()
    rows = [get_run(run.id) for run in runs]
    assert [(r.status, r.started_at is not None) for r in rows] == [
        ("running", True),
        ("running", True),
        ("queued", False),
    ]
    assert [held.start_marked for held in pool.waiting] == [True, True]


def test_runs_marked_behind_a_job_that_runs_long_lose_their_marks_and_spend_no_attempt(
    app: Flask, world: World
) -> None:
    """One slot, short jobs so far: the lease marks a batch of three (PREFETCH_SECONDS of work),
    and the slot's first job runs long. Once the two behind it have waited LONG_JOB_SECONDS, the
    next round takes their marks back; the worker is lost: the reaper queues them again without
    spending their one attempt, and fails the started one as "worker lost"."""
    now = datetime.now(UTC)
    runs = [
        make_run(world.alpha, scheduled_for=now - timedelta(seconds=3 - n), max_attempts=1)
        for n in range(3)
    ]
    worker = WorkerProcess(app, concurrency=1)
    worker.register()
    worker.pool = pool = ThreadJobPool(app, current_catalog(), {}, 1, Event())
    pool.slots.append(slot := Slot())  # a slot without a thread: the test starts its run
    pool.average_duration = 0.001  # a millisecond a job so far: the free slot takes a batch
    assert worker.lease()
    assert all(get_run(run.id).started_at is not None for run in runs)
    started = pool.start_next(slot, time.monotonic())
    assert started is not None and started.run.id == runs[0].id
    assert worker.lease() is False  # marked under a second ago: nothing is taken back yet
    assert [held.start_marked for held in pool.waiting] == [True, True]
    time.sleep(LONG_JOB_SECONDS)
    worker.lease()
    assert [get_run(run.id).started_at is None for run in runs] == [False, True, True]
    assert [held.start_marked for held in pool.waiting] == [False, False]
    assert pool.to_start(time.monotonic()) == ([], 0)  # the slot is busy: not marked again
    reap_once(db.session(), datetime.now(UTC) + worker.lock_ttl + SECOND)
    assert [(r.status, r.attempt, r.error) for r in map(get_run, [run.id for run in runs])] == [
        ("failed", 1, LOST_ERROR),
        ("queued", 0, NOT_STARTED_ERROR),
        ("queued", 0, NOT_STARTED_ERROR),
    ]
