"""One format for every time in the panel, in headless Chromium: the run history's times on one
line with the duration once, and every date or time a user types as ISO 8601 on a 24-hour clock
(the history's filters, Run once later, Backfill), whatever the browser's locale."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors, log_in
from tests.conftest import make_run, make_schedule
from webapp.extensions import db
from webapp.models import Schedule
from webapp.services.accounts import find_tenant
from webapp.services.audit import Actor

pytestmark = pytest.mark.browser

# How many lines each history time's date and clock take (its text before "x min ago").
TIME_LINES = """() => [...document.querySelectorAll('table.runs time')].map((time) => {
  const range = document.createRange();
  range.selectNodeContents(time.firstChild);
  return range.getClientRects().length;
})"""


def add_schedule_with_runs(live_panel: LiveServer) -> int:
    schedule_id = make_schedule(
        find_tenant("alpha"),
        "A schedule whose name is long enough to want room",
        by=Actor.cli(),
        cron="*/10 * * * *",
    ).id
    with live_panel.app.app_context():
        schedule = db.session.get(Schedule, schedule_id)
        assert schedule is not None
        for minutes in (90, 30):  # started 2 s after, finished 5 s after: 3.0 s
            make_run(schedule, "succeeded", minutes)
        db.session.commit()
        db.session.remove()
    return schedule_id


def test_history_times_stay_on_one_line_and_the_duration_shows_once(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    schedule_id = add_schedule_with_runs(live_panel)
    page = new_page
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page, live_panel, "alice@example.com")
    for path in ("/runs", f"/schedules/{schedule_id}"):
        page.goto(live_panel.url + path)
        rows = page.locator("table.runs tbody tr")
        assert rows.count() == 2
        for row in rows.all():
            assert row.inner_text().count("3.0 s") == 1, row.inner_text()
        assert page.evaluate(TIME_LINES) == [1] * 4  # scheduled for and started, two runs
    assert errors.messages == []


def test_dates_and_times_are_typed_as_iso_on_a_24_hour_clock(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    schedule_id = add_schedule_with_runs(live_panel)
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.goto(live_panel.url + "/runs")
    for label in ("Scheduled from", "Scheduled until"):
        field = page.get_by_label(label)
        assert field.get_attribute("type") == "text"  # not the locale's mm/dd/yyyy picker
        assert field.get_attribute("placeholder") == "YYYY-MM-DD"
    today = datetime.now(UTC).date().isoformat()
    page.get_by_label("Scheduled from").fill(today)
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(f"**from={today}**")
    assert page.get_by_label("Scheduled from").input_value() == today
    page.goto(live_panel.url + f"/schedules/{schedule_id}")
    start = page.get_by_label("Start at (in UTC)")
    assert start.get_attribute("type") == "text"  # not the locale's AM/PM picker
    assert start.get_attribute("placeholder") == "YYYY-MM-DD HH:MM"
    when = (datetime.now(UTC) + timedelta(days=3)).strftime("%Y-%m-%d")
    start.fill(f"{when} 21:30")
    page.get_by_role("button", name="Queue run").click()
    page.get_by_text(f"queued for {when} 21:30 UTC").wait_for()
    page.goto(live_panel.url + f"/schedules/{schedule_id}/backfill")
    yesterday = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%d")
    for label, hour in (("From (UTC)", "06:00"), ("To (UTC)", "08:00")):
        field = page.get_by_label(label)
        assert field.get_attribute("placeholder") == "YYYY-MM-DD HH:MM"
        field.fill(f"{yesterday} {hour}")
    page.get_by_role("button", name="Preview").click()
    page.get_by_text("13 fire times in the window").wait_for()  # every 10 minutes
    assert page.get_by_label("From (UTC)").input_value() == f"{yesterday} 06:00"
    assert errors.messages == []
