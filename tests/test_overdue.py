"""The overdue alarm: the watchdog step with an explicit now, why the queue stalls, and the panel's
badges, on both databases."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from tests.conftest import WorkerFactory, World, make_run, make_schedule
from tests.panel_helpers import Panel, counted_statements
from tests.worker_support import postgresql_only
from webapp.extensions import db
from webapp.models import Notification, Run, Schedule
from webapp.scheduler.watchdog import WatchResult, queue_stall_reason, watch_overdue
from webapp.scheduler.worker import WorkerProcess
from webapp.services.overdue import run_waiting_for, schedule_late_by
from webapp.web.formatting import dom_id

NOW = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
GRACE = timedelta(minutes=5)
LOCK_TTL = timedelta(seconds=60)


def watch(now: datetime = NOW, **options: Any) -> WatchResult:
    return watch_overdue(db.session(), now, GRACE, **options)


def actions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [vars(record)["action"] for record in caplog.records if "action" in vars(record)]


def overdue_since(schedule: Schedule) -> datetime | None:
    db.session.expire_all()
    fresh = db.session.get(Schedule, schedule.id)
    assert fresh is not None
    return fresh.overdue_since


def set_schedule(schedule: Schedule, **values: Any) -> None:
    db.session.execute(update(Schedule).where(Schedule.id == schedule.id).values(**values))
    db.session.commit()


# --- the watchdog step -----------------------------------------------------------------------


def test_it_flags_an_overdue_schedule_once_and_logs_it_once(
    app: Flask, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    late = make_schedule(world.alpha, "late", NOW - timedelta(minutes=12))
    fresh = make_schedule(world.alpha, "fresh", NOW - timedelta(minutes=1))
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        result = watch()
    assert result.became_overdue == [late.id]
    assert (result.recovered, result.more) == ([], False)
    assert overdue_since(late) == NOW
    assert overdue_since(fresh) is None
    (record,) = caplog.records
    assert vars(record)["action"] == "schedule_overdue"
    assert record.levelno == logging.WARNING
    fields = {k: vars(record)[k] for k in ("schedule_id", "tenant_id", "next_run_at")}
    assert fields == {
        "schedule_id": late.id,
        "tenant_id": world.alpha.id,
        "next_run_at": (NOW - timedelta(minutes=12)).isoformat(),
    }
    assert vars(record)["overdue_for"] == 12 * 60

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        again = watch(NOW + timedelta(minutes=1))
    assert (again.became_overdue, again.recovered) == ([], [])
    assert actions(caplog) == []
    assert overdue_since(late) == NOW  # when it was first found overdue, kept


def test_a_schedule_that_became_overdue_gets_its_notification_in_the_same_step(
    app: Flask, world: World
) -> None:
    late = make_schedule(world.alpha, "late", NOW - timedelta(minutes=12))
    set_schedule(late, notify_emails=["oncall@alpha.example"])
    watch()
    watch(NOW + timedelta(minutes=1))  # still overdue: the same spell, nothing new
    rows = db.session.scalars(select(Notification).order_by(Notification.id)).all()
    assert [(row.event, row.schedule_id, row.target) for row in rows] == [
        ("overdue", late.id, "oncall@alpha.example")
    ]


def test_a_schedule_that_fired_since_is_cleared_and_logged_once(
    app: Flask, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    late = make_schedule(world.alpha, "late", NOW - timedelta(minutes=12))
    watch()
    caplog.clear()
    later = NOW + timedelta(minutes=3)
    set_schedule(late, next_run_at=later + timedelta(minutes=57))  # as a tick advances it
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        result = watch(later)
        assert watch(later + timedelta(minutes=1)).recovered == []
    assert (result.became_overdue, result.recovered) == ([], [late.id])
    assert overdue_since(late) is None
    (record,) = caplog.records
    assert vars(record)["action"] == "schedule_recovered"
    assert (vars(record)["schedule_id"], vars(record)["flagged_for"]) == (late.id, 180)
    assert vars(record)["overdue_since"] == NOW.isoformat()


def test_pausing_an_overdue_schedule_clears_it_and_a_paused_one_is_never_overdue(
    app: Flask, world: World
) -> None:
    late = make_schedule(world.alpha, "late", NOW - timedelta(hours=2))
    paused = make_schedule(world.alpha, "paused", NOW - timedelta(hours=2), active=False)
    assert watch().became_overdue == [late.id]
    set_schedule(late, active=False)
    assert watch().recovered == [late.id]
    assert overdue_since(paused) is None
    assert schedule_late_by(paused, NOW, GRACE) is None


def test_an_active_schedule_without_a_next_fire_time_recovers(app: Flask, world: World) -> None:
    late = make_schedule(world.alpha, "late", NOW - timedelta(hours=2))
    watch()
    set_schedule(late, next_run_at=None)
    assert watch().recovered == [late.id]


def test_the_grace_is_respected_exactly_at_the_boundary(app: Flask, world: World) -> None:
    on_the_boundary = make_schedule(world.alpha, "boundary", NOW - GRACE)
    just_past = make_schedule(world.alpha, "past", NOW - GRACE - timedelta(seconds=1))
    assert watch().became_overdue == [just_past.id]
    # The panel's reading of the same rule agrees, on both sides of the boundary.
    assert schedule_late_by(on_the_boundary, NOW, GRACE) is None
    assert schedule_late_by(just_past, NOW, GRACE) == GRACE + timedelta(seconds=1)
    assert watch(NOW + timedelta(seconds=1)).became_overdue == [on_the_boundary.id]


def test_a_herd_is_flagged_in_bounded_batches_that_the_next_call_continues(
    app: Flask, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    db.session.execute(
        insert(Schedule),
        [
            {
                "tenant_id": world.alpha.id,
                "scope": "tenant",
                "key": f"herd-{n}",
                "name": f"herd {n}",
                "job": "demo.echo",
                "args": {"message": "m"},
                "cron": "0 * * * *",
                "time_zone": "UTC",
                "next_run_at": NOW - timedelta(minutes=30 - n),
            }
            for n in range(5)
        ],
    )
    db.session.commit()
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        batches = [watch(limit=2) for _ in range(4)]
    assert [(len(b.became_overdue), b.more) for b in batches] == [
        (2, True),
        (2, True),
        (1, False),
        (0, False),
    ]
    flagged = [schedule_id for b in batches for schedule_id in b.became_overdue]
    assert len(set(flagged)) == 5  # oldest first, each once
    assert actions(caplog) == ["schedule_overdue"] * 5


def test_the_queue_is_logged_once_when_it_becomes_overdue_and_once_when_it_recovers(
    app: Flask, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    fresh = make_run(world.alpha, scheduled_for=NOW - timedelta(minutes=1))
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        assert watch().queue_overdue is False
    assert actions(caplog) == []
    stuck = make_run(world.alpha, scheduled_for=NOW - timedelta(minutes=10))
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        first = watch(queue_was_overdue=False)
        second = watch(queue_was_overdue=first.queue_overdue)
    assert (first.queue_overdue, second.queue_overdue) == (True, True)
    (record,) = caplog.records
    assert vars(record)["action"] == "queue_overdue"
    assert (vars(record)["run_id"], vars(record)["overdue_for"]) == (stuck.id, 600)

    caplog.clear()
    started = {"status": "running", "started_at": NOW}  # a run leased and not started waits on
    db.session.execute(update(Run).where(Run.id == stuck.id).values(started))
    db.session.commit()
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        recovered = watch(queue_was_overdue=True)
        assert watch(queue_was_overdue=recovered.queue_overdue).queue_overdue is False
    assert actions(caplog) == ["queue_recovered"]
    assert run_waiting_for(fresh, NOW, GRACE) is None


def test_a_worker_that_starts_while_the_queue_is_overdue_logs_it_once(
    app: Flask, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    make_run(world.alpha, scheduled_for=NOW - timedelta(minutes=10))
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        watch(queue_was_overdue=None)
    assert actions(caplog) == ["queue_overdue"]
    caplog.clear()
    make_run(world.alpha, scheduled_for=NOW - timedelta(minutes=1)).status = "running"
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        watch(NOW, queue_was_overdue=None)  # unknown before: nothing to recover from
    assert actions(caplog) == ["queue_overdue"]


# --- why queued runs wait --------------------------------------------------------------------


def reason() -> str:
    return queue_stall_reason(db.session(), NOW, LOCK_TTL)


def test_no_worker_is_alive_when_none_heartbeated_within_two_lock_ttls_or_all_stopped(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    assert reason() == "no worker is alive"
    make_worker(concurrency=4, last_heartbeat_at=NOW - 2 * LOCK_TTL - timedelta(seconds=1))  # died
    make_worker(concurrency=4, last_heartbeat_at=NOW, stopped_at=NOW)  # stopped cleanly
    assert reason() == "no worker is alive"
    make_worker(concurrency=1, last_heartbeat_at=NOW - 2 * LOCK_TTL)
    assert reason() != "no worker is alive"


def test_all_workers_are_busy_when_their_slots_are_full(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    first = make_worker(concurrency=1, last_heartbeat_at=NOW - timedelta(seconds=10))
    second = make_worker(concurrency=2, last_heartbeat_at=NOW)
    dead = make_worker(concurrency=5, last_heartbeat_at=NOW - timedelta(hours=1))
    for n, worker in enumerate((first, second, second, dead, dead)):
        make_run(
            world.alpha,
            scheduled_for=NOW - timedelta(minutes=n),
            status="running",
            worker_id=worker.id,
        )
    assert reason() == "all workers are busy (3 of 3 slots running)"
    make_worker(concurrency=1, last_heartbeat_at=NOW)
    assert reason() == "workers are alive but have not taken it yet"


# --- the worker calls the step ---------------------------------------------------------------


def test_the_worker_watches_right_after_start_then_on_its_timer(app: Flask, world: World) -> None:
    now = datetime.now(UTC)
    first = make_schedule(world.alpha, "first", now - timedelta(hours=1))
    worker = WorkerProcess(app, concurrency=1)
    worker.watch_if_due(db.session())
    assert overdue_since(first) is not None
    second = make_schedule(world.alpha, "second", now - timedelta(hours=1))
    worker.watch_if_due(db.session())  # within the watch interval: not yet
    assert overdue_since(second) is None
    worker.last_watch = 0.0 if worker.last_watch is None else worker.last_watch - 3600
    worker.watch_if_due(db.session())
    assert overdue_since(second) is not None


# --- the panel -------------------------------------------------------------------------------


def test_the_list_and_the_detail_show_the_badge_for_an_overdue_schedule_only(
    app: Flask, world: World
) -> None:
    late = make_schedule(world.alpha, "Late report", by=world.alice, cron="0 * * * *")
    fresh = make_schedule(world.alpha, "Fresh report", by=world.alice, cron="0 * * * *")
    # No worker: nobody set overdue_since; the page decides from next_run_at.
    set_schedule(late, next_run_at=datetime.now(UTC) - timedelta(minutes=12))
    alice = Panel(app, world.alice)
    page = alice.get("/").get_data(as_text=True)
    late_row = page.split(f'<tr id="{dom_id(late)}"', 1)[1].split("</tr>", 1)[0]
    fresh_row = page.split(f'<tr id="{dom_id(fresh)}"', 1)[1].split("</tr>", 1)[0]
    assert "Overdue: due 12 min ago, not dispatched" in late_row
    assert "Overdue" not in fresh_row
    detail = alice.get(f"/schedules/{late.id}").get_data(as_text=True)
    assert f'id="{dom_id(late, "overdue")}">Overdue: due 12 min ago, not dispatched' in detail
    assert "Overdue" not in alice.get(f"/schedules/{fresh.id}").get_data(as_text=True)


def test_the_history_and_the_run_page_say_why_an_overdue_queued_run_waits(
    app: Flask, world: World
) -> None:
    schedule = make_schedule(world.alpha, "Report", by=world.alice, cron="0 * * * *")
    stuck = make_run(schedule, "queued", 20)
    fresh = make_run(schedule, "queued", 1)
    db.session.commit()
    alice = Panel(app, world.alice)
    waiting = "Waiting: not started 20 min after it was due — no worker is alive"
    for url in ("/runs", f"/schedules/{schedule.id}"):
        page = alice.get(url).get_data(as_text=True)
        row = page.split(f'<tr id="{dom_id(stuck)}"', 1)[1].split("</tr>", 1)[0]
        assert f'id="{dom_id(stuck)}-waiting">{waiting}</div>' in row
        assert "Waiting" not in page.split(f'<tr id="{dom_id(fresh)}"', 1)[1].split("</tr>")[0]
    run_page = alice.get(f"/runs/{stuck.id}").get_data(as_text=True)
    assert f'id="{dom_id(stuck, "waiting")}">{waiting}</p>' in run_page
    assert "Waiting" not in alice.get(f"/runs/{fresh.id}").get_data(as_text=True)


def test_the_reason_costs_one_statement_and_only_on_a_page_with_a_waiting_run(
    app: Flask, world: World
) -> None:
    schedule = make_schedule(world.alpha, "Report", by=world.alice, cron="0 * * * *")
    fresh = make_run(schedule, "queued", 1)
    db.session.commit()
    alice = Panel(app, world.alice)

    def statements(url: str) -> int:
        with counted_statements() as executed:
            assert alice.get(url).status_code == 200
        return len([sql for sql in executed if sql != "BEGIN"])

    before = {url: statements(url) for url in ("/runs", f"/runs/{fresh.id}")}
    stuck = make_run(schedule, "queued", 20)
    db.session.commit()
    assert statements("/runs") == before["/runs"] + 1
    assert statements(f"/runs/{stuck.id}") == before[f"/runs/{fresh.id}"] + 1


@postgresql_only  # concurrent write transactions: SQLite has one writer at a time
def test_of_two_workers_watching_at_once_only_one_flips_and_reports_a_schedule(
    app: Flask, world: World
) -> None:
    late = make_schedule(world.alpha, "late", NOW - timedelta(minutes=12))
    other = make_schedule(world.alpha, "other", NOW - timedelta(minutes=10))
    first, second = Session(db.engine), Session(db.engine)
    try:
        # The first worker's transaction flips `late` and is still open: the second skips it.
        first.execute(update(Schedule).where(Schedule.id == late.id).values(overdue_since=NOW))
        assert watch_overdue(second, NOW, GRACE).became_overdue == [other.id]
        first.commit()
        assert watch_overdue(second, NOW, GRACE).became_overdue == []
    finally:
        first.close()
        second.close()
