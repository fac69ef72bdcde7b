"""What the schedule list and a schedule's page show of its runs, on both databases: "Last run"
is the latest run whose time has come, runs for later wait in their own list (never in the
history's top), and a Run now is no one-off."""

from __future__ import annotations

import re
from datetime import timedelta

from flask import Flask

from tests.conftest import World, make_run, make_schedule
from tests.panel_helpers import Panel
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Run, RunStatus, Schedule
from webapp.services.audit import Actor
from webapp.services.cancellation import cancel_run
from webapp.services.schedules import run_now


def last_run_cell(page: str, schedule_id: int) -> str:
    """The "Last run" cell of the schedule's row of the list, or of its page's settings."""
    found = re.search(rf'id="schedule-{schedule_id}-last-run"[^>]*>(.*?)</(td|dd)>', page, re.S)
    assert found, page
    return found.group(1)


def history(page: str) -> str:
    """The schedule page's run history table."""
    return page[page.index('id="run-rows"') :]


def one_offs(page: str) -> list[int]:
    """The run ids under "Queued one-off runs" on a schedule's page."""
    return [int(run_id) for run_id in re.findall(r'id="run-(\d+)-one-off"', page)]


def yearly_with_a_run(world: World, status: RunStatus) -> tuple[Schedule, Run]:
    """Alpha's schedule that fires once a year, with a run that ended `status` minutes ago."""
    schedule = make_schedule(world.alpha, "Yearly", by=world.alice, cron="0 0 1 1 *")
    done = make_run(schedule, status, minutes_ago=10)
    db.session.commit()
    return schedule, done


def test_last_run_and_the_history_leave_runs_for_later_to_their_own_list(
    app: Flask, world: World
) -> None:
    schedule, done = yearly_with_a_run(world, "succeeded")
    alice = Actor.for_user(world.alice)
    tomorrow = (utcnow() + timedelta(days=1)).replace(second=0, microsecond=0)
    cancelled = run_now(schedule, alice, utcnow(), tomorrow)
    cancel_run(cancelled, alice, utcnow())
    later = run_now(schedule, alice, utcnow(), tomorrow + timedelta(days=17))
    panel = Panel(app, world.alice)

    listed = panel.get("/").get_data(as_text=True)
    # Before: the newest run by id, the one-off 18 days ahead, "queued" with a spinner.
    assert f'id="run-{done.id}-status"' in last_run_cell(listed, schedule.id)
    page = panel.get(f"/schedules/{schedule.id}").get_data(as_text=True)
    assert f'id="run-{done.id}-status"' in last_run_cell(page, schedule.id)
    assert f'id="run-{done.id}"' in history(page)
    for future in (cancelled, later):  # neither tops the history
        assert f'id="run-{future.id}"' not in history(page)
    assert one_offs(page) == [later.id]

    # Run now: its time is its click; it heads the history and is the last run, no one-off.
    now_run = panel.post(f"/schedules/{schedule.id}/run", {"place": "detail"})
    assert now_run.status_code == 200
    page = now_run.get_data(as_text=True)
    first_row = re.search(r'<tr id="run-(\d+)"', history(page))
    assert first_row is not None
    pressed = int(first_row.group(1))
    assert pressed not in (done.id, cancelled.id, later.id)
    assert f'id="run-{pressed}-status"' in last_run_cell(page, schedule.id)
    assert one_offs(page) == [later.id]  # before: the Run now too, with a Cancel button
    assert one_offs(panel.get(f"/schedules/{schedule.id}").get_data(as_text=True)) == [later.id]
    listed = panel.get("/").get_data(as_text=True)
    assert f'id="run-{pressed}-status"' in last_run_cell(listed, schedule.id)


def test_a_row_of_the_list_after_an_action_shows_the_same_last_run(
    app: Flask, world: World
) -> None:
    schedule, done = yearly_with_a_run(world, "failed")
    later = utcnow().replace(second=0, microsecond=0) + timedelta(hours=5)
    run_now(schedule, Actor.for_user(world.alice), utcnow(), later)
    row = Panel(app, world.alice).post(f"/schedules/{schedule.id}/pause", {"next": "/"})
    assert row.status_code == 200
    assert f'id="run-{done.id}-status"' in last_run_cell(row.get_data(as_text=True), schedule.id)


def test_the_tenants_run_history_leaves_runs_for_later_to_next_runs(
    app: Flask, world: World
) -> None:
    schedule, done = yearly_with_a_run(world, "failed")
    alice = Actor.for_user(world.alice)
    later = run_now(schedule, alice, utcnow(), utcnow() + timedelta(hours=3))
    panel = Panel(app, world.alice)
    for url in ("/runs", f"/runs?schedule={schedule.id}", "/runs?status=queued"):
        page = panel.get(url).get_data(as_text=True)
        assert f'id="run-{later.id}"' not in page, url  # before: at the top, "queued"
        assert "One-off runs planned for later are listed on their schedule" in page
    assert f'id="run-{done.id}"' in panel.get("/runs").get_data(as_text=True)
    assert f"#{later.id}" in panel.get("/upcoming").get_data(as_text=True)
    assert one_offs(panel.get(f"/schedules/{schedule.id}").get_data(as_text=True)) == [later.id]
