"""A schedule's page in Chromium after its actions: Run now's row updates whole and is no
one-off, Cancel takes a one-off off the list, the badge's first seconds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors, log_in
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Schedule
from webapp.services.accounts import find_tenant
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleInput, create_schedule, run_now

pytestmark = pytest.mark.browser


def yearly_schedule(live_panel: LiveServer, name: str, job: str = "demo.echo") -> int:
    """A schedule that fires once a year: no fire of its own during a test."""
    with live_panel.app.app_context():
        schedule = create_schedule(
            find_tenant("alpha"),
            ScheduleInput(
                name=name, job=job, args={"message": "x"}, cron="0 0 1 1 *", time_zone="UTC"
            ),
            Actor.cli(),
            datetime.now(UTC),
        )
        schedule_id = schedule.id
        db.session.remove()
        return schedule_id


def one_off(live_panel: LiveServer, schedule_id: int, hours: float) -> int:
    """A run of the schedule queued for `hours` from now ("Run once later"): its id."""
    with live_panel.app.app_context():
        schedule = db.session.get(Schedule, schedule_id)
        assert schedule is not None
        later = (utcnow() + timedelta(hours=hours)).replace(second=0, microsecond=0)
        run_id = run_now(schedule, Actor.cli(), utcnow(), later).id
        db.session.remove()
        return run_id


@pytest.mark.parametrize("where", ["schedule", "upcoming"])
def test_cancel_takes_a_queued_one_off_off_the_list_it_is_on(
    new_page: Any, live_panel: LiveServer, errors: PageErrors, where: str
) -> None:
    schedule_id = yearly_schedule(live_panel, "Later")
    run_id, kept = one_off(live_panel, schedule_id, 3), one_off(live_panel, schedule_id, 4)
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    path = f"/schedules/{schedule_id}" if where == "schedule" else "/upcoming"
    page.goto(live_panel.url + path)
    listed = page.locator(f"#run-{run_id}-one-off, #run-{run_id}-upcoming")
    listed.get_by_role("button", name="Cancel").click()
    page.locator("#flashes").get_by_text(f"Run #{run_id} cancelled").wait_for()
    listed.wait_for(state="detached")  # before: listed with its Cancel button until a reload
    assert page.locator(f"#run-{kept}-one-off, #run-{kept}-upcoming").count() == 1
    assert errors.messages == []
