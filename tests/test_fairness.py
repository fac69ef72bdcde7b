"""Fair to every tenant: a tenant's cap on runs running at once, and leases that take tenants in
turns, on both databases; the cap held by real worker processes on PostgreSQL."""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from tests.conftest import WorkerFactory, World, make_run
from tests.panel_helpers import Panel
from tests.worker_support import Workers, postgresql_only, wait_for
from webapp import create_app
from webapp.config import ConfigError
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Tenant
from webapp.scheduler import runs
from webapp.scheduler.lease_query import LEASE_WINDOW
from webapp.scheduler.leases import lease_once

NOW = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)


def lease(worker: int, limit: int = 10, max_running: int | None = None) -> list[Run]:
    leased = lease_once(db.session(), worker, NOW, TTL, limit, max_running)
    db.session.expire_all()
    return [db.session.get(Run, run.id) for run in leased]  # type: ignore[misc]


def set_cap(tenant: Tenant, cap: int | None) -> None:
    db.session.execute(update(Tenant).where(Tenant.id == tenant.id).values(max_running=cap))
    db.session.commit()


def running_of(tenant_id: int | None) -> int:
    query = select(func.count()).where(Run.status == "running")
    condition = Run.tenant_id.is_(None) if tenant_id is None else Run.tenant_id == tenant_id
    return db.session.scalar(query.where(condition)) or 0


def finish(run: Run) -> None:
    db.session.execute(update(Run).where(Run.id == run.id).values(status="succeeded"))
    db.session.commit()


def queue(tenant: Tenant | None, count: int, minutes_ago: int = 10) -> list[Run]:
    return [
        make_run(tenant, scheduled_for=NOW - timedelta(minutes=minutes_ago, seconds=n))
        for n in range(count)
    ]


# --- the cap -------------------------------------------------------------------------------------


def test_a_lease_never_starts_more_than_the_tenants_cap(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    set_cap(world.alpha, 2)
    queue(world.alpha, 5)
    worker = make_worker().id
    first = lease(worker)
    assert [run.tenant_id for run in first] == [world.alpha.id] * 2
    assert lease(worker) == []  # two running: the cap is reached, three stay queued
    finish(first[0])
    assert len(lease(worker)) == 1
    assert running_of(world.alpha.id) == 2


def test_the_default_cap_applies_to_tenants_without_their_own(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    set_cap(world.beta, 4)  # its own wins over the default
    queue(world.alpha, 5)
    queue(world.beta, 5)
    queue(None, 5)  # system runs are never capped
    leased = lease(make_worker().id, limit=50, max_running=1)
    tenants = [run.tenant_id for run in leased]
    assert (tenants.count(world.alpha.id), tenants.count(world.beta.id), tenants.count(None)) == (
        1,
        4,
        5,
    )


def test_a_cap_lowered_below_the_running_lets_them_finish(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    queue(world.alpha, 3)
    worker = make_worker().id
    running = lease(worker)
    assert len(running) == 3  # no cap yet
    queue(world.alpha, 2, minutes_ago=5)
    set_cap(world.alpha, 2)
    assert lease(worker) == []  # three running, cap two: they go on, nothing new starts
    finish(running[0])
    assert lease(worker) == []  # two running: still at the cap
    finish(running[1])
    assert len(lease(worker)) == 1


@postgresql_only
def test_two_leases_at_once_never_exceed_the_cap(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    """The first lease's transaction stays open while a second one runs: without the tenant's
    lock, the second would count no running run (it cannot see the first's) and take three
    more."""
    set_cap(world.alpha, 3)
    queue(world.alpha, 10)
    first_worker, second_worker = make_worker().id, make_worker().id
    with Session(db.engine) as first:
        held = runs.lease_runs(first, first_worker, NOW, TTL, 10)
        assert len(held) == 3
        second_leased: list[int] = []
        second = threading.Thread(
            target=lambda: second_leased.append(lease_in_new_session(app, second_worker))
        )
        second.start()
        time.sleep(1.0)  # the second lease reaches the tenant's lock and waits there
        first.commit()
    second.join(30)
    assert second_leased == [0]
    assert running_of(world.alpha.id) == 3


@postgresql_only
def test_no_lease_walks_the_tenants_while_no_run_is_available(app: Flask, world: World) -> None:
    """While every queued run is queued for later (a retry's backoff, Run once later, fire
    ahead), a lease's window walks no tenant: it walked every tenant with a queued run, a
    probe each, in every idle worker's round. With 100,000 such tenants two idle workers kept
    PostgreSQL 0.6-0.7 CPUs busy (bench/README.md, "An idle lease walked every tenant with a
    run queued for later"). A walk that has passed `limit` such tenants takes the tenants of
    the runs available now from the queue's head when it holds them all (up to 8 x limit): a
    lease of one run among 100,000 such tenants walked them all (707 ms)."""
    later = [Tenant(slug=f"later-{index}", name="Later", time_zone="UTC") for index in range(30)]
    db.session.add_all(later)
    db.session.commit()
    for tenant in [world.alpha, *later]:
        make_run(tenant, scheduled_for=NOW + timedelta(hours=1))
    parameters = {"now": NOW, "limit": 10, "after": None, "max_running": None}

    def window_open() -> list[bool]:
        rows = db.session.execute(LEASE_WINDOW, parameters).all()
        db.session.rollback()
        return [row.open for row in rows]

    assert window_open() == []
    queue(world.beta, 1)
    assert window_open() == [True]  # beta's run, and no tenant passed over
    queue(world.beta, 80)  # 81 available: more than the head's read (8 x limit), so it walks
    assert window_open().count(True) == 1 and len(window_open()) == 32
    parameters["now"] = NOW + timedelta(hours=2)  # every tenant's run available
    assert window_open() == [True] * 10


@postgresql_only
def test_a_window_read_from_the_queues_head_keeps_the_caps(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    """A walk that passes `limit` tenants with only later runs takes its window from the
    queue's head instead; a capped tenant in it is passed over while full, as in the walk, and
    served when it has room."""
    later = [Tenant(slug=f"later-{index}", name="Later", time_zone="UTC") for index in range(8)]
    db.session.add_all(later)
    db.session.commit()
    for tenant in later:
        make_run(tenant, scheduled_for=NOW + timedelta(hours=1))
    set_cap(world.alpha, 1)
    queue(world.alpha, 3)
    queue(world.beta, 1)
    worker = make_worker().id
    first = lease(worker, limit=4)  # 4 runs available: the walk; alpha at most 1
    assert len(first) == 2 and {run.tenant_id for run in first} == {world.alpha.id, world.beta.id}
    assert lease(worker, limit=4) == []  # 2 available (alpha's), alpha at its cap
    parameters = {"now": NOW, "limit": 4, "after": None, "max_running": None}
    window = db.session.execute(LEASE_WINDOW, parameters).all()
    db.session.rollback()
    assert [tuple(row) for row in window] == [(world.alpha.id, False, False)]  # full, not locked
    finish(first[0] if first[0].tenant_id == world.alpha.id else first[1])
    assert [run.tenant_id for run in lease(worker, limit=4)] == [world.alpha.id]
    assert running_of(world.alpha.id) == 1


@postgresql_only
def test_a_lease_whose_window_a_lease_in_flight_holds_takes_the_next_window(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    """Workers meet at the same tenants of a wide, shallow queue (a run or two each): the one
    whose window's runs a lease in flight holds (SKIP LOCKED) got nothing and slept a poll
    interval while runs waited; 100,000 schedules of 100,000 tenants took 12-14 s after their
    fire time instead of 8-11 (bench/README.md, "Workers meeting at the same tenants")."""
    queue(world.alpha, 1)
    queue(world.beta, 1)
    first_worker, second_worker = make_worker().id, make_worker().id
    with Session(db.engine) as first:
        held = runs.lease_runs(first, first_worker, NOW, TTL, 1)
        assert [row.tenant_id for row in held] == [world.alpha.id]
        second = runs.lease_runs(db.session(), second_worker, NOW, TTL, 1)
        db.session.commit()
        assert [row.tenant_id for row in second] == [world.beta.id]
        first.rollback()


def lease_in_new_session(app: Flask, worker: int) -> int:
    with app.app_context(), Session(db.engine) as session:
        return len(lease_once(session, worker, NOW, TTL, 10))


# --- turns -------------------------------------------------------------------------------------


def test_a_small_tenant_starts_before_a_flooding_tenant_drains(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    queue(world.alpha, 40, minutes_ago=30)  # a backlog, older than everything of beta
    small = queue(world.beta, 3, minutes_ago=1)
    worker = make_worker().id
    started = [run.tenant_id for _ in range(6) for run in lease(worker, limit=1)]
    # One at a time, each held running: the tenants take turns (PostgreSQL: each lease's window
    # of one tenant rotates; SQLite: the tenant with fewer running goes next, ties: the older
    # run first), so beta's three are among the first six, not after alpha's forty.
    assert started == [world.alpha.id, world.beta.id] * 3
    assert all(db.session.get(Run, run.id).status == "running" for run in small)  # type: ignore[union-attr]


def test_a_lease_takes_each_tenant_oldest_first_in_turns(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    alpha = queue(world.alpha, 5, minutes_ago=30)
    beta = queue(world.beta, 2, minutes_ago=1)
    leased = lease(make_worker().id, limit=4)
    # Two each (their share of four), each tenant's oldest first.
    oldest_alpha = sorted(alpha, key=lambda run: run.available_at)[:2]
    assert {run.id for run in leased} == {run.id for run in [*oldest_alpha, *beta]}


def test_a_tenant_alone_gets_the_whole_lease(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    queue(world.alpha, 8)
    make_run(world.beta, scheduled_for=NOW + timedelta(minutes=5))  # not available yet: not a turn
    assert len(lease(make_worker().id, limit=6)) == 6


def test_leases_take_turns_when_more_tenants_have_work_than_a_lease_takes(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    gamma = Tenant(slug="gamma", name="Gamma", time_zone="UTC")
    db.session.add(gamma)
    db.session.commit()
    for tenant in (world.alpha, world.beta, gamma):
        queue(tenant, 10)
    worker = make_worker().id
    # Three tenants, two runs a lease, all held running: the tenant left out of one lease comes
    # first in the next, so after three leases each has two, and none waits for the others.
    leased = [run.tenant_id or 0 for _ in range(3) for run in lease(worker, limit=2)]
    assert sorted(leased) == sorted([world.alpha.id, world.beta.id, gamma.id] * 2)
    assert gamma.id in leased[:4]


def test_a_tenant_full_at_its_cap_does_not_hold_back_the_next(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    set_cap(world.alpha, 1)
    queue(world.alpha, 5, minutes_ago=30)
    queue(world.beta, 5, minutes_ago=1)
    worker = make_worker().id
    assert [run.tenant_id for run in lease(worker, limit=1)] == [world.alpha.id]
    # alpha is at its cap: a lease of one goes on to beta, now and in the leases after.
    for _ in range(3):
        assert [run.tenant_id for run in lease(worker, limit=1)] == [world.beta.id]


# --- real workers ------------------------------------------------------------------------------


@postgresql_only
def test_four_workers_never_run_more_than_the_cap(
    app: Flask, world: World, workers: Workers, tmp_path: Path
) -> None:
    set_cap(world.alpha, 2)
    alpha = world.alpha.id  # read here: the sampler thread must not touch this session
    now = datetime.now(UTC)
    for n in range(8):
        make_run(
            world.alpha,
            scheduled_for=now,
            job="demo.sleep",
            args={"seconds": 1.5},
            idempotency_key=f"s{n}",
        )
    seen: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        with app.app_context(), Session(db.engine) as session:
            while not stop.is_set():
                seen.append(
                    session.scalar(
                        select(func.count()).where(Run.tenant_id == alpha, Run.status == "running")
                    )
                    or 0
                )
                session.rollback()  # a fresh snapshot each time
                time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for _ in range(4):
            workers.start("--concurrency", "4")
        wait_for(
            lambda: (
                db.session.scalar(
                    select(func.count()).where(
                        Run.status == "succeeded", Run.tenant_id == world.alpha.id
                    )
                )
                == 8
            ),
            120,
            "the eight runs to succeed",
        )
    finally:
        stop.set()
        sampler.join(10)
    assert max(seen) == 2, workers.logs()  # reached, never passed


# --- where the cap shows ----------------------------------------------------------------------


def test_the_operator_and_the_tenant_see_the_cap(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    set_cap(world.alpha, 3)
    queue(world.alpha, 2)
    lease(make_worker().id)
    world.alice.is_operator = True  # alice is also alpha's admin
    db.session.commit()
    operator_page = Panel(app, world.alice).get("/operator").get_data(as_text=True)
    row = re.search(rf'<tr id="tenant-{world.alpha.id}">(.*?)</tr>', operator_page, re.S)
    assert row and re.search(r'data-cap="running">2 / 3<', row.group(1))
    beta_row = re.search(rf'<tr id="tenant-{world.beta.id}">(.*?)</tr>', operator_page, re.S)
    assert beta_row and '0 / <span class="muted">no cap</span>' in beta_row.group(1)
    settings = Panel(app, world.bob).get("/settings/notifications").get_data(as_text=True)
    assert "At most <strong data-cap>3</strong> of your runs run at once" in settings


# --- the command line and the setting --------------------------------------------------------


def test_tenant_set_max_running_is_audited_and_listed(cli: FlaskCliRunner, world: World) -> None:
    result = cli.invoke(args=["tenant", "set", "alpha", "--max-running", "3"])
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith(", max running 3\n")
    event = db.session.scalars(
        select(AuditEvent).where(AuditEvent.action == "tenant.limits_changed")
    ).one()
    assert (event.tenant_id, event.before, event.after) == (
        world.alpha.id,
        {"max_running": None},
        {"max_running": 3},
    )
    assert (
        "alpha\tEurope/Berlin\tAlpha Corp\tmax running 3\n"
        in cli.invoke(args=["tenant", "list"]).stdout
    )
    cli.invoke(args=["tenant", "set", "alpha", "--max-running", "default"])
    db.session.expire_all()
    assert db.session.get(Tenant, world.alpha.id).max_running is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("0", "--max-running must be a whole number of runs from 1 to 2147483647, or 'default'"),
        ("-1", "--max-running must be a whole number of runs from 1 to 2147483647, or 'default'"),
        ("two", "'two' is not a whole number up to 2147483647 or 'default'"),
    ],
)
def test_tenant_set_refuses_a_cap_below_one(
    cli: FlaskCliRunner, world: World, given: str, message: str
) -> None:
    result = cli.invoke(args=["tenant", "set", "alpha", "--max-running", given])
    assert result.exit_code != 0
    assert message in result.output
    db.session.expire_all()
    assert db.session.get(Tenant, world.alpha.id).max_running is None  # type: ignore[union-attr]
    assert db.session.scalar(select(func.count()).select_from(AuditEvent)) == 0


@pytest.mark.parametrize("value", [0, -3])
def test_a_default_cap_below_one_stops_the_app(value: int) -> None:
    with pytest.raises(ConfigError, match=f"SCHEDULER_MAX_RUNNING={value} must be"):
        create_app({"TESTING": True, "SCHEDULER_MAX_RUNNING": value})
