"""Run once later (panel, API, command line: one rule for the start time) and Cancel: a queued run
never starts, a running one is asked to stop and ends cancelled if its job checks; refusals,
audit rows, Next runs, real workers, and the panel's Cancel button in Chromium."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select
from sqlalchemy.orm import Session

from tests.api_helpers import Api, problem_fields
from tests.browser_support import LiveServer, log_in
from tests.conftest import WorkerFactory, World, make_run, make_schedule, migrated_app
from tests.panel_helpers import Panel
from tests.scheduler_helpers import catalog
from tests.worker_support import Workers, postgresql_only, wait_for
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule
from webapp.scheduler import runs
from webapp.scheduler.execution import run_attempt, store_outcomes
from webapp.scheduler.leases import lease_once, reap_once
from webapp.services.accounts import create_tenant, find_tenant
from webapp.services.audit import Actor
from webapp.services.cancellation import cancel_run
from webapp.services.schedules import ScheduleInput, create_schedule, run_now

BERLIN = ZoneInfo("Europe/Berlin")
# "Morning hello": a schedule at 07:30 in Berlin, as its admin alice makes it.
MORNING: dict[str, Any] = {
    "cron": "30 7 * * *",
    "time_zone": "Europe/Berlin",
    "args": {"message": "hi"},
}


def berlin_wall_time(moment: datetime) -> str:
    """What an admin types into the datetime-local field: a Berlin wall time, to the minute."""
    return moment.astimezone(BERLIN).strftime("%Y-%m-%dT%H:%M")


def runs_of(schedule_id: int) -> list[Run]:
    db.session.expire_all()
    return list(db.session.scalars(select(Run).where(Run.schedule_id == schedule_id)))


def audit_actions(action: str) -> list[AuditEvent]:
    return list(db.session.scalars(select(AuditEvent).where(AuditEvent.action == action)))


# --- Run once later -------------------------------------------------------------------------


def test_run_once_later_from_the_panel_queues_at_the_wall_time_and_refuses_bad_times(
    app: Flask, world: World
) -> None:
    schedule = make_schedule(world.alpha, by=world.alice, **MORNING)
    url = f"/schedules/{schedule.id}/run-later"
    panel = Panel(app, world.alice)
    page = panel.get(f"/schedules/{schedule.id}").get_data(as_text=True)
    assert "Run once later" in page and "Start at (in Europe/Berlin)" in page
    assert "Queue run" in page
    later = (utcnow() + timedelta(days=3)).replace(second=0, microsecond=0)
    answer = panel.post(url, {"at": berlin_wall_time(later), "place": "detail"})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    (run,) = runs_of(schedule.id)
    assert (run.status, run.trigger, run.available_at) == ("queued", "manual", later)
    assert f"Run #{run.id} of “Morning hello” queued for" in answer.get_data(as_text=True)
    assert "Queued one-off runs" in answer.get_data(as_text=True)
    past = berlin_wall_time(utcnow() - timedelta(hours=1))
    refused = panel.post(url, {"at": past, "place": "detail"})
    assert refused.status_code == 400
    assert "is in the past" in refused.get_data(as_text=True)
    far = berlin_wall_time(utcnow() + timedelta(days=367))
    refused = panel.post(url, {"at": far, "place": "detail"})
    assert refused.status_code == 400
    assert "is more than a year (366 days) from now" in refused.get_data(as_text=True)
    garbled = panel.post(url, {"at": "next tuesday", "place": "detail"})
    assert garbled.status_code == 400
    assert "is not an ISO 8601 date and time" in garbled.get_data(as_text=True)
    assert len(runs_of(schedule.id)) == 1  # nothing written by the refusals
    assert Panel(app, world.bob).post(url, {"at": berlin_wall_time(later)}).status_code == 403
    assert Panel(app, world.charlie).post(url, {"at": berlin_wall_time(later)}).status_code == 404
    assert len(runs_of(schedule.id)) == 1


def test_run_once_later_through_the_api_and_the_command_line_follows_the_same_rule(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    schedule = make_schedule(world.alpha, by=world.alice, key="hello", **MORNING)
    api = Api(app, world.alpha, world.alice)
    past = (utcnow() - timedelta(minutes=5)).isoformat()
    refused = api.post(f"/api/v1/schedules/{schedule.id}/runs", json={"at": past})
    assert refused.status_code == 422
    assert problem_fields(refused)["at"].endswith("is in the past")
    far = (utcnow() + timedelta(days=400)).isoformat()
    refused = api.post(f"/api/v1/schedules/{schedule.id}/runs", json={"at": far})
    assert refused.status_code == 422
    assert problem_fields(refused)["at"].endswith("is more than a year (366 days) from now")
    later = (utcnow() + timedelta(hours=5)).replace(microsecond=0)
    queued = api.post(f"/api/v1/schedules/{schedule.id}/runs", json={"at": later.isoformat()})
    assert queued.status_code == 201
    assert queued.json is not None
    assert datetime.fromisoformat(queued.json["available_at"].replace("Z", "+00:00")) == later
    # The existing contract: no body is a run now.
    assert api.post(f"/api/v1/schedules/{schedule.id}/runs").status_code == 201
    yesterday = berlin_wall_time(utcnow() - timedelta(days=1))
    result = cli.invoke(args=["schedule", "run", "hello", "--tenant", "alpha", "--at", yesterday])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: at: ") and result.stderr.endswith(" is in the past\n")
    assert len(runs_of(schedule.id)) == 2


def test_a_queued_one_off_shows_in_next_runs_and_its_cancel_takes_it_off(
    app: Flask, world: World
) -> None:
    # No fire of its own in the next 24 hours.
    schedule = make_schedule(world.alpha, by=world.alice, **{**MORNING, "cron": "0 0 1 1 *"})
    later = (utcnow() + timedelta(hours=2)).replace(second=0, microsecond=0)
    run = run_now(schedule, Actor.for_user(world.alice), utcnow(), later)
    next_week = run_now(schedule, Actor.for_user(world.alice), utcnow(), later + timedelta(days=7))
    panel = Panel(app, world.alice)
    page = panel.get("/upcoming").get_data(as_text=True)
    assert f'id="run-{run.id}-upcoming"' in page and "one-off" in page
    assert f"/runs/{run.id}/cancel" in page
    assert f"run-{next_week.id}-upcoming" not in page  # beyond the next 24 hours
    viewer_page = Panel(app, world.bob).get("/upcoming").get_data(as_text=True)
    assert "one-off" in viewer_page and f"/runs/{run.id}/cancel" not in viewer_page
    answer = panel.post(f"/runs/{run.id}/cancel", {"place": "upcoming", "next": "/upcoming"})
    assert answer.status_code == 200
    assert f"Run #{run.id} cancelled: it will not start." in answer.get_data(as_text=True)
    assert "one-off" not in panel.get("/upcoming").get_data(as_text=True)
    detail = panel.get(f"/schedules/{schedule.id}").get_data(as_text=True)
    assert f'id="run-{next_week.id}-one-off"' in detail
    assert f'id="run-{run.id}-one-off"' not in detail


def test_one_offs_at_a_page_boundary_of_next_runs_show_on_the_next_page(
    app: Flask, world: World
) -> None:
    # Every minute: the first page's 100 fires end at the 100th minute, where two one-offs of
    # the same schedule wait too. They come after that fire, so on the page after it.
    schedule = make_schedule(world.alpha, by=world.alice, cron="* * * * *", args={"message": "hi"})
    boundary = utcnow().replace(second=0, microsecond=0) + timedelta(minutes=100)
    alice = Actor.for_user(world.alice)
    one_offs = [run_now(schedule, alice, utcnow(), boundary).id for _ in range(2)]
    panel = Panel(app, world.alice)
    pages = [panel.get("/upcoming").get_data(as_text=True)]
    later = re.search(r'<a href="(/upcoming\?[^"]+)" hx-get', pages[0])
    while later is not None and len(pages) < 10:
        pages.append(panel.get(later.group(1).replace("&amp;", "&"), htmx=True).get_data(True))
        later = re.search(r'<a href="(/upcoming\?[^"]+)" hx-get', pages[-1])
    shown = "".join(pages)
    # Each once (the first page ends at the boundary unless a minute passed since `boundary`).
    assert [shown.count(f'id="run-{run_id}-upcoming"') for run_id in one_offs] == [1, 1]


# --- Cancel ---------------------------------------------------------------------------------


def test_a_cancelled_queued_run_is_never_leased_and_the_cancel_is_audited(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = make_schedule(world.alpha, by=world.alice, **MORNING)
    run = run_now(schedule, Actor.for_user(world.alice), utcnow())
    run_id = run.id
    panel = Panel(app, world.alice)
    detail = panel.get(f"/runs/{run_id}").get_data(as_text=True)
    assert f'id="run-{run_id}-cancel"' in detail and ">Cancel</button>" in detail
    answer = panel.post(f"/runs/{run_id}/cancel")
    assert answer.status_code == 200
    text = answer.get_data(as_text=True)
    assert "Cancelled by alice@example.com at" in text and "badge-cancelled" in text
    assert (
        lease_once(db.session(), make_worker().id, utcnow() + timedelta(minutes=1), TTL, 10) == []
    )
    db.session.expire_all()
    stored = db.session.get(Run, run_id)
    assert stored is not None
    assert (stored.status, stored.started_at, stored.worker_id) == ("cancelled", None, None)
    assert stored.cancelled_by == world.alice.id and stored.cancelled_at is not None
    (event,) = audit_actions("run.cancelled")
    assert (event.actor_label, event.object_type, event.object_id) == (
        "alice@example.com",
        "run",
        run_id,
    )
    assert (event.before, event.after) == ({"status": "queued"}, {"status": "cancelled"})
    # Cancelled counts as finished: Run now with overlap `skip` is not skipped for it.
    schedule.overlap_policy = "skip"
    db.session.commit()
    assert run_now(schedule, Actor.cli(), utcnow()).status == "queued"


TTL = timedelta(seconds=30)


@pytest.mark.parametrize(
    ("status", "reason"),
    [("succeeded", "already succeeded"), ("failed", "already failed")],
)
def test_a_finished_run_is_refused_with_the_reason_and_others_get_403_and_404(
    app: Flask, world: World, status: str, reason: str
) -> None:
    schedule = make_schedule(world.alpha, by=world.alice, **MORNING)
    finished = make_run(schedule, status)  # type: ignore[arg-type]
    db.session.commit()
    run_id = finished.id
    api = Api(app, world.alpha, world.alice)
    refused = api.post(f"/api/v1/runs/{run_id}/cancel")
    assert refused.status_code == 409
    assert refused.json is not None and refused.json["detail"] == f"run {run_id} {reason}"
    panel = Panel(app, world.alice)
    answer = panel.post(f"/runs/{run_id}/cancel")
    assert answer.status_code == 409 and reason in answer.get_data(as_text=True)
    assert ">Cancel</button>" not in panel.get(f"/runs/{run_id}").get_data(as_text=True)
    queued = run_now(schedule, Actor.cli(), utcnow())
    queued_id = queued.id
    assert Panel(app, world.bob).post(f"/runs/{queued_id}/cancel").status_code == 403
    viewer_page = Panel(app, world.bob).get(f"/runs/{queued_id}").get_data(as_text=True)
    assert ">Cancel</button>" not in viewer_page
    assert Panel(app, world.charlie).post(f"/runs/{queued_id}/cancel").status_code == 404
    read_only = Api(app, world.alpha, world.alice, scope="read")
    assert read_only.post(f"/api/v1/runs/{queued_id}/cancel").status_code == 403
    other_tenant = Api(app, world.beta, world.charlie)
    assert other_tenant.post(f"/api/v1/runs/{queued_id}/cancel").status_code == 404
    db.session.expire_all()
    assert db.session.get(Run, queued_id).status == "queued"  # type: ignore[union-attr]
    assert audit_actions("run.cancelled") == []
    cancelled = api.post(f"/api/v1/runs/{queued_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json is not None
    assert cancelled.json["outcome"] == "cancelled"
    assert cancelled.json["run"]["status"] == "cancelled"
    again = api.post(f"/api/v1/runs/{queued_id}/cancel")
    assert again.status_code == 409
    assert again.json is not None and again.json["detail"] == f"run {queued_id} already cancelled"
    (event,) = audit_actions("run.cancelled")
    assert event.actor_label.startswith("token ")


def test_the_command_line_cancels_a_run_of_its_tenant(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    run_id = run_now(
        make_schedule(world.alpha, by=world.alice, **MORNING), Actor.cli(), utcnow()
    ).id
    other = cli.invoke(args=["schedule", "cancel-run", str(run_id), "--tenant", "beta"])
    assert (other.exit_code, other.stderr) == (1, f"Error: tenant 'beta' has no run {run_id}\n")
    done = cli.invoke(args=["schedule", "cancel-run", str(run_id), "--tenant", "alpha"])
    assert (done.exit_code, done.stdout) == (0, f"run {run_id} cancelled\n")
    again = cli.invoke(args=["schedule", "cancel-run", str(run_id), "--tenant", "alpha"])
    assert (again.exit_code, again.stderr) == (1, f"Error: run {run_id} already cancelled\n")


def test_a_run_asked_to_stop_before_its_job_began_ends_cancelled_and_is_no_failure(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = make_schedule(world.alpha, by=world.alice, **MORNING)
    schedule.consecutive_failures = 2
    db.session.commit()
    run_id = run_now(schedule, Actor.cli(), utcnow()).id
    worker = make_worker().id
    (leased,) = lease_once(db.session(), worker, None, TTL, 1)
    run = db.session.get(Run, run_id)
    assert run is not None
    assert cancel_run(run, Actor.for_user(world.alice), utcnow()).outcome == "stop_requested"
    renewed = runs.extend_leases(db.session(), worker, [run_id], utcnow() + TTL)
    db.session.commit()
    assert renewed == {run_id: True}  # the renewal tells the worker
    stop = threading.Event()
    stop.set()
    done = run_attempt(leased, catalog(), app.config, db.session(), stop=stop)
    assert done.outcome.status == "cancelled"
    store_outcomes(db.session(), worker, [done])
    db.session.expire_all()
    stored = db.session.get(Run, run_id)
    assert stored is not None
    assert (stored.status, stored.output, stored.error) == ("cancelled", "", None)
    assert stored.cancelled_at is not None and stored.cancelled_by == world.alice.id
    assert db.session.get(Schedule, schedule.id).consecutive_failures == 2  # type: ignore[union-attr]
    (event,) = audit_actions("run.stop_requested")
    assert event.before == {"status": "running"}


def test_a_run_asked_to_stop_whose_worker_is_lost_ends_cancelled_not_run_again(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = make_schedule(world.alpha, by=world.alice, **MORNING)
    schedule.consecutive_failures = 1
    db.session.commit()
    asked, untouched = (run_now(schedule, Actor.cli(), utcnow()).id for _ in range(2))
    worker = make_worker().id
    leased = lease_once(db.session(), worker, None, TTL, 2)
    assert sorted(run.id for run in leased) == [asked, untouched]
    run = db.session.get(Run, asked)
    assert run is not None
    assert cancel_run(run, Actor.for_user(world.alice), utcnow()).outcome == "stop_requested"
    # The worker dies: nobody renews, and another worker's reaper finds both leases expired.
    later = utcnow() + TTL + timedelta(seconds=1)
    assert reap_once(db.session(), later) == 2
    db.session.expire_all()
    stopped = db.session.get(Run, asked)
    assert stopped is not None
    assert stopped.status == "cancelled"
    assert stopped.cancelled_at is not None and stopped.finished_at is not None
    assert stopped.error is not None and "asked to stop" in stopped.error
    other = db.session.get(Run, untouched)
    assert other is not None and other.status == "queued"  # never started: back, unspent
    (again,) = lease_once(db.session(), make_worker().id, later, TTL, 5)
    assert again.id == untouched
    assert db.session.get(Schedule, schedule.id).consecutive_failures == 1  # type: ignore[union-attr]


@postgresql_only
def test_cancel_and_lease_at_the_same_instant_never_both_win(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = make_schedule(world.alpha, by=world.alice, **MORNING)
    ids = [run_now(schedule, Actor.cli(), utcnow()).id for _ in range(40)]
    worker = make_worker().id
    cancelled: list[int] = []
    leased: list[int] = []
    start = threading.Barrier(2)

    engine = db.engine  # the threads have no app context

    def cancel_all() -> None:
        with Session(engine) as session:
            start.wait()
            for run_id in ids:
                with session.begin():
                    if runs.cancel_queued_run(session, run_id, None, utcnow()):
                        cancelled.append(run_id)

    def lease_all() -> None:
        with Session(engine) as session:
            start.wait()
            for _ in ids:
                with session.begin():
                    rows = runs.lease_runs(session, worker, None, TTL, 1)
                leased.extend(row.id for row in rows)

    threads = [threading.Thread(target=cancel_all), threading.Thread(target=lease_all)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not set(cancelled) & set(leased)
    assert sorted(cancelled + leased) == ids
    db.session.expire_all()
    states = {run.id: (run.status, run.worker_id) for run in runs_of(schedule.id)}
    assert all(states[run_id] == ("cancelled", None) for run_id in cancelled)
    assert all(states[run_id] == ("running", worker) for run_id in leased)


# --- A real worker ---------------------------------------------------------------------------


@pytest.fixture
def job_app(database_url: str) -> Iterator[Flask]:
    """The app with the cancel tests' job module."""
    application = migrated_app(database_url, SCHEDULER_JOB_MODULES=["tests.cancel_jobs"])
    with application.app_context():
        yield application
        db.session.remove()
        db.engine.dispose()


def long_run(job: str, seconds: float) -> int:
    """A tenant, and a run of `job` queued now."""
    tenant = create_tenant("alpha", "Alpha Corp", "Europe/Berlin")
    schedule = create_schedule(
        tenant,
        ScheduleInput(
            name="Long", job=job, args={"seconds": seconds}, cron="0 0 1 1 *", time_zone="UTC"
        ),
        Actor.cli(),
        utcnow(),
    )
    return run_now(schedule, Actor.cli(), utcnow()).id


@pytest.mark.parametrize(
    ("job", "seconds", "status", "last_line"),
    [
        ("cancel.polite", 60, "cancelled", "started\n"),
        ("cancel.stubborn", 3, "succeeded", "finished all the work\n"),
        # The bundled sleep stops when asked (it slept its full time and ended succeeded).
        ("demo.sleep", 60, "cancelled", "Asked to stop: stopped early\n"),
    ],
)
def test_a_running_job_asked_to_stop_ends_cancelled_if_it_checks_and_runs_on_if_not(
    job_app: Flask,
    database_url: str,
    tmp_path: Path,
    job: str,
    seconds: float,
    status: str,
    last_line: str,
) -> None:
    run_id = long_run(job, seconds)
    workers = Workers(database_url, tmp_path)
    try:
        workers.start(SCHEDULER_JOB_MODULES="tests.cancel_jobs", SCHEDULER_LOCK_TTL="3")

        def running() -> bool:
            return db.session.get(Run, run_id).status == "running"  # type: ignore[union-attr]

        try:
            wait_for(running, 90, "the job to start")
        except AssertionError:
            raise AssertionError(workers.logs()) from None
        run = db.session.get(Run, run_id)
        assert run is not None
        assert cancel_run(run, Actor.cli(), utcnow()).outcome == "stop_requested"

        def ended() -> bool:
            return db.session.get(Run, run_id).status == status  # type: ignore[union-attr]

        wait_for(ended, 60, f"the run to end {status}")
    finally:
        workers.stop_all()
    stored = db.session.get(Run, run_id)
    assert stored is not None and stored.output is not None
    assert stored.output.endswith(last_line), stored.output
    assert stored.cancel_requested_at is not None
    assert (stored.cancelled_at is not None) == (status == "cancelled")
    assert stored.error is None


def test_a_stop_asked_of_one_run_does_not_reach_the_next_job_of_its_slot(
    job_app: Flask, database_url: str, tmp_path: Path
) -> None:
    """One slot: the run asked to stop ends cancelled, and the next run that slot takes runs
    all its work (the slot's stop flag, its job's ctx.stop, starts clear for each job)."""
    first = long_run("cancel.polite", 60)
    short = ScheduleInput(
        name="Short", job="cancel.polite", args={"seconds": 0.5}, cron="0 0 1 1 *", time_zone="UTC"
    )
    second = create_schedule(find_tenant("alpha"), short, Actor.cli(), utcnow())
    workers = Workers(database_url, tmp_path)

    def status(run_id: int) -> str:
        db.session.expire_all()
        return db.session.get(Run, run_id).status  # type: ignore[union-attr]

    try:
        workers.start(
            "--concurrency", "1", SCHEDULER_JOB_MODULES="tests.cancel_jobs", SCHEDULER_LOCK_TTL="3"
        )
        wait_for(lambda: status(first) == "running", 90, "the first job to start")
        run = db.session.get(Run, first)
        assert run is not None
        assert cancel_run(run, Actor.cli(), utcnow()).outcome == "stop_requested"
        wait_for(lambda: status(first) == "cancelled", 60, "the first run to end cancelled")
        next_id = run_now(second, Actor.cli(), utcnow()).id
        wait_for(lambda: status(next_id) in ("succeeded", "cancelled"), 60, "the next run to end")
    finally:
        workers.stop_all()
    stored = db.session.get(Run, next_id)
    assert stored is not None and stored.output is not None
    assert (stored.status, stored.output) == ("succeeded", "started\nfinished all the work\n")


# --- The panel in Chromium -------------------------------------------------------------------


@pytest.mark.browser
def test_pressing_cancel_on_the_run_page_cancels_it_in_place(
    live_panel: LiveServer, new_page: Any
) -> None:
    with live_panel.app.app_context():
        schedule = create_schedule(
            find_tenant("alpha"),
            ScheduleInput(
                name="Later",
                job="demo.echo",
                args={"message": "x"},
                cron="0 0 1 1 *",
                time_zone="UTC",
            ),
            Actor.cli(),
            datetime.now(UTC),
        )
        run_id = run_now(schedule, Actor.cli(), utcnow(), utcnow() + timedelta(hours=3)).id
        db.session.remove()
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.goto(f"{live_panel.url}/runs/{run_id}")
    page.click(f"#run-{run_id}-cancel")
    page.wait_for_selector(f"#run-{run_id}-cancelled")
    assert page.inner_text(f"#run-{run_id}-cancelled").startswith(
        "Cancelled by alice@example.com at"
    )
    assert page.get_attribute(f"#run-{run_id}-status", "data-status") == "cancelled"
    assert page.query_selector(f"#run-{run_id}-cancel") is None
    with live_panel.app.app_context():
        assert db.session.get(Run, run_id).status == "cancelled"  # type: ignore[union-attr]
        db.session.remove()
