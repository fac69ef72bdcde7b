"""A dead Celery fleet raises the overdue alarm (SCHEDULER_EXECUTOR=celery): a run sent to
Celery and taken by no Celery worker within the grace is overdue wherever the alarm shows (the
run's row and page, the schedule's badge, the operator area, /metrics, `scheduler health`, the
notifications), and `scheduler health` fails when no Celery worker heartbeats. The fleet
itself, with real processes and Redis, is in test_celery.py; here the rows a sender and a
Celery worker write, on both databases."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select

from tests.conftest import WorkerFactory, World, make_run, make_schedule
from tests.panel_helpers import Panel
from webapp.config import EXTENSION_KEY, settings
from webapp.extensions import db
from webapp.models import Notification, Run, Schedule, User, Worker
from webapp.scheduler.watchdog import queue_stall_reason, watch_overdue
from webapp.services.metrics import read_figures
from webapp.web.formatting import dom_id

GRACE = timedelta(minutes=5)
LOCK_TTL = timedelta(seconds=60)


def sent_run(schedule: Schedule, sender: Worker, minutes_ago: int) -> Run:
    """A run the sender leased and sent `minutes_ago`, that no Celery worker has taken over."""
    run = make_run(
        schedule,
        "running",
        minutes_ago,
        started_at=None,
        worker_id=sender.id,
        locked_until=datetime.now(UTC) + LOCK_TTL,  # the sender renews it
    )
    db.session.commit()
    return run


@pytest.fixture
def operator(world: World, password_hash: str) -> User:
    user = User(email="olga@example.com", password_hash=password_hash, is_operator=True)
    db.session.add(user)
    db.session.commit()
    return user


def test_a_sent_run_no_celery_worker_takes_is_overdue_wherever_the_alarm_shows(
    app: Flask, world: World, make_worker: WorkerFactory, operator: User
) -> None:
    schedule = make_schedule(world.alpha, "Report", by=world.alice, cron="*/5 * * * *")
    schedule.notify_emails = ["ops@example.com"]
    sender = make_worker(kind="celery-sender", concurrency=1)
    stuck = sent_run(schedule, sender, 20)
    fresh = sent_run(schedule, sender, 1)  # within the grace: not yet
    alice = Panel(app, world.alice)

    waiting = "Waiting: not started 20 min after it was due — no Celery worker has taken it"
    page = alice.get("/runs").get_data(as_text=True)
    row = page.split(f'<tr id="{dom_id(stuck)}"', 1)[1].split("</tr>", 1)[0]
    assert f'id="{dom_id(stuck)}-waiting">{waiting}</div>' in row
    assert "Waiting" not in page.split(f'<tr id="{dom_id(fresh)}"', 1)[1].split("</tr>")[0]
    run_page = alice.get(f"/runs/{stuck.id}").get_data(as_text=True)
    assert f'id="{dom_id(stuck, "waiting")}">{waiting}</p>' in run_page

    figures = read_figures(db.session(), settings())
    assert (figures.queued_runs_overdue, figures.schedules_overdue) == (1, 1)

    # The sender's watchdog flags the schedule and writes its notification.
    now = datetime.now(UTC)
    assert watch_overdue(db.session(), now, GRACE).became_overdue == [schedule.id]
    notified = db.session.scalars(
        select(Notification.event).where(Notification.schedule_id == schedule.id)
    ).all()
    assert notified == ["overdue"]
    badge = f'id="{dom_id(schedule, "overdue")}">Overdue: a run has not started</span>'
    assert badge in alice.get("/").get_data(as_text=True)
    assert badge in alice.get(f"/schedules/{schedule.id}").get_data(as_text=True)

    tenants = Panel(app, operator).get("/operator").get_data(as_text=True)
    counts = re.search(rf'<tr id="tenant-{world.alpha.id}">(.*?)</tr>', tenants, re.S)
    assert counts is not None
    cells = dict(re.findall(r'data-count="([a-z-]+)">(?:<span[^>]*>)?(\d+)', counts.group(1)))
    assert (cells["overdue-schedules"], cells["overdue-runs"]) == ("1", "1")

    # A Celery worker takes it: the alarm clears.
    celery = make_worker(kind="celery-worker")
    stuck.worker_id, stuck.started_at = celery.id, datetime.now(UTC)
    db.session.commit()
    figures = read_figures(db.session(), settings())
    assert (figures.queued_runs_overdue, figures.schedules_overdue) == (0, 0)
    assert watch_overdue(db.session(), datetime.now(UTC), GRACE).recovered == [schedule.id]
    assert "Waiting" not in alice.get(f"/runs/{stuck.id}").get_data(as_text=True)


def test_a_run_a_thread_worker_leased_and_has_no_slot_for_says_so(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = make_schedule(world.alpha, "Report", by=world.alice, cron="*/5 * * * *")
    worker = make_worker(kind="thread", concurrency=1)
    held = sent_run(schedule, worker, 20)
    page = Panel(app, world.alice).get(f"/runs/{held.id}").get_data(as_text=True)
    assert "not started 20 min after it was due — its worker has no free slot for it yet" in page


def test_queued_runs_wait_for_a_celery_worker_when_only_senders_are_alive(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    now = datetime.now(UTC)
    make_worker(kind="celery-sender", concurrency=4, last_heartbeat_at=now)
    assert queue_stall_reason(db.session(), now, LOCK_TTL) == "no Celery worker is alive"
    make_worker(kind="celery-worker", concurrency=2, last_heartbeat_at=now)
    assert queue_stall_reason(db.session(), now, LOCK_TTL) == (
        "workers are alive but have not taken it yet"
    )


def health(cli: FlaskCliRunner) -> tuple[int, list[str]]:
    result = cli.invoke(args=["scheduler", "health"])
    return result.exit_code, result.output.splitlines()


def test_health_fails_when_no_celery_worker_heartbeats_while_the_executor_is_celery(
    app: Flask,
    world: World,
    make_worker: WorkerFactory,
    cli: FlaskCliRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = datetime.now(UTC)
    sender = make_worker(kind="celery-sender", last_heartbeat_at=now)
    assert health(cli)[0] == 0  # the thread pool: no Celery worker expected
    celery = settings().model_copy(
        update={"SCHEDULER_EXECUTOR": "celery", "SCHEDULER_CELERY_BROKER_URL": "redis://x"}
    )
    monkeypatch.setitem(app.extensions, EXTENSION_KEY, celery)
    code, lines = health(cli)
    assert code == 1
    assert (
        "fail no Celery worker heartbeat in the last 120 s (no Celery worker is running)" in lines
    )
    # The heartbeats were written at `now`, seconds before each health check on a slow machine.
    fresh = r"\d s ago\)"
    assert re.fullmatch(
        rf"ok worker heartbeat fresh \(worker {sender.id} on test, {fresh}", lines[2]
    )

    dead = make_worker(kind="celery-worker", last_heartbeat_at=now - timedelta(minutes=6))
    code, lines = health(cli)
    assert code == 1
    assert (
        f"fail no Celery worker heartbeat in the last 120 s "
        f"(newest: Celery worker {dead.id} on test, 6 min ago)" in lines
    )

    alive = make_worker(kind="celery-worker", last_heartbeat_at=now)
    code, lines = health(cli)
    assert code == 0
    heartbeat = rf"ok Celery worker heartbeat fresh \(Celery worker {alive.id} on test, {fresh}"
    assert re.fullmatch(heartbeat, lines[-3]), lines


def test_health_names_the_schedule_and_the_run_a_dead_fleet_leaves_waiting(
    app: Flask, world: World, make_worker: WorkerFactory, cli: FlaskCliRunner
) -> None:
    schedule = make_schedule(world.alpha, "Report", by=world.alice, cron="*/5 * * * *")
    sent_run(schedule, make_worker(kind="celery-sender"), 20)
    code, lines = health(cli)
    assert code == 1
    assert (
        f"fail 1 schedule overdue beyond the 300 s grace (oldest: alpha/{schedule.key}, "
        "a run not started, could start 20 min ago)"
    ) in lines
    assert (
        "fail 1 run waiting to start beyond the 300 s grace (oldest: could start 20 min ago)"
        in (lines)
    )


# --- the operator area: the fleet's banner, each worker's kind -------------------------------


def banners(page: str) -> list[str]:
    found = re.findall(r'<p class="flash flash-error fleet-alarm"[^>]*>(.*?)</p>', page, re.S)
    return [re.sub(r"<[^>]+>", "", banner).split(":")[0] for banner in found]


def test_every_operator_page_says_when_no_worker_is_alive_and_since_when(
    app: Flask,
    world: World,
    make_worker: WorkerFactory,
    operator: User,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    olga = Panel(app, operator)
    pages = ("/operator", "/operator/workers", "/operator/fires")
    for page in pages:
        assert banners(olga.get(page).get_data(as_text=True)) == [
            "0 workers alive (none has ever heartbeated)"
        ], page
    now = datetime.now(UTC)
    make_worker(kind="thread", last_heartbeat_at=now - timedelta(minutes=5, seconds=10))
    make_worker(kind="thread", last_heartbeat_at=now - timedelta(minutes=1), stopped_at=now)
    for page in pages:
        assert banners(olga.get(page).get_data(as_text=True)) == [
            "0 workers alive (last heartbeat 1 min ago)"
        ], page
    sender = make_worker(kind="celery-sender", last_heartbeat_at=now)
    assert banners(olga.get("/operator").get_data(as_text=True)) == []

    celery = settings().model_copy(
        update={"SCHEDULER_EXECUTOR": "celery", "SCHEDULER_CELERY_BROKER_URL": "redis://x"}
    )
    monkeypatch.setitem(app.extensions, EXTENSION_KEY, celery)
    assert banners(olga.get("/operator/workers").get_data(as_text=True)) == [
        "0 Celery workers alive (none has ever heartbeated)"
    ]
    make_worker(kind="celery-worker", last_heartbeat_at=now)
    assert banners(olga.get("/operator/workers").get_data(as_text=True)) == []
    assert sender.id


def test_the_workers_page_says_each_workers_kind_and_its_concurrency_where_it_applies(
    app: Flask, world: World, make_worker: WorkerFactory, operator: User
) -> None:
    rows = {
        kind: make_worker(kind=kind, concurrency=3)
        for kind in ("thread", "process", "celery-sender", "celery-worker")
    }
    legacy = make_worker(concurrency=2)  # a row from before workers.kind
    page = Panel(app, operator).get("/operator/workers").get_data(as_text=True)

    def facts(worker: Worker) -> dict[str, str]:
        card = page.split(f'id="{dom_id(worker)}"', 1)[1].split("</dl>", 1)[0]
        pairs = re.findall(r"<dt>(.*?)</dt><dd[^>]*>(.*?)</dd>", card, re.S)
        return {name: re.sub(r"<[^>]+>", "", value).strip() for name, value in pairs}

    shown = {kind: facts(worker) for kind, worker in rows.items()}
    assert {kind: each["Kind"] for kind, each in shown.items()} == {
        "thread": "thread",
        "process": "process",
        "celery-sender": "Celery sender",
        "celery-worker": "Celery worker",
    }
    assert [kind for kind, each in shown.items() if "Concurrency" in each] == [
        "thread",
        "process",
        "celery-worker",
    ]
    assert shown["celery-worker"]["Concurrency"] == "3"
    assert "Sent, not taken yet" in shown["celery-sender"]
    assert [kind for kind, each in shown.items() if "Abandoned jobs" in each] == ["thread"]
    assert (facts(legacy)["Kind"], facts(legacy)["Concurrency"]) == ("-", "2")


def test_the_overdue_counts_and_the_watchdog_read_no_table_whole(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    from tests.test_query_plans import add_schedules, full_scans, plan_of, statements_of
    from webapp.services import health

    add_schedules(world.alpha.id, 300)
    late, sending = db.session.scalars(
        select(Schedule).where(Schedule.key.in_(["s1", "s2"])).order_by(Schedule.key)
    ).all()
    late.next_run_at = datetime.now(UTC) - timedelta(hours=1)
    db.session.commit()
    sent_run(sending, make_worker(kind="celery-sender"), 20)
    now = datetime.now(UTC)
    session = db.session()

    def checks_and_watch() -> None:
        health.overdue_schedules_check(session, now, GRACE)
        health.overdue_runs_check(session, now, GRACE)
        watch_overdue(session, now, GRACE)

    sent = statements_of(checks_and_watch)
    assert len(sent) >= 7
    plans = {statement: plan_of(statement, parameters) for statement, parameters in sent}
    db.session.rollback()
    scans = {statement: full_scans(plan) for statement, plan in plans.items()}
    assert {statement: lines for statement, lines in scans.items() if lines} == {}
