"""What a business calendar does to a schedule's next fires, as the previews show it, on both
databases: the form's live preview and the API's cron preview mark each fire a calendar skips
or moves, with the reason; a schedule whose next fires are all skipped still lists them."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Flask

from tests.api_helpers import Api, problem_fields
from tests.conftest import World, make_run, make_schedule
from tests.panel_helpers import Panel
from webapp.database import utcnow
from webapp.models import Schedule
from webapp.services import calendars
from webapp.services.audit import Actor

US = {"key": "us", "name": "US business days", "country": "US", "closed_weekdays": ["sat", "sun"]}


def make_calendar(world: World, **fields: Any) -> None:
    calendars.create_calendar(world.alpha, {**US, **fields}, Actor.cli(), utcnow())


def preview(app: Flask, world: World, **query: str) -> str:
    asked = {"time_zone": "America/New_York", **query}
    response = Panel(app, world.alice).get("/schedules/form/preview", htmx=True, query_string=asked)
    assert response.status_code == 200
    return response.get_data(as_text=True)


def fires(page: str) -> list[str]:
    """Each listed fire's line, tags removed."""
    items = re.findall(r"<li>(.*?)</li>", page.split('class="fires"', 1)[1], re.S)
    return [html.unescape(" ".join(re.sub(r"<[^>]+>", " ", item).split())) for item in items]


def marked(app: Flask, world: World, cron: str, policy: str = "skip") -> list[str]:
    """The form preview's fires from 2027-01-01 in New York, with the calendar "us"."""
    page = preview(
        app, world, cron=cron, preview_from="2027-01-01", calendar="us", calendar_policy=policy
    )
    return fires(page)


def test_the_form_preview_marks_skipped_fires_with_their_reason(app: Flask, world: World) -> None:
    make_calendar(world)
    listed = marked(app, world, "0 9 25 12 *")
    # Christmas falls on a holiday every year: all five are skipped, and still listed.
    assert len(listed) == 5
    assert all("skipped: Christmas Day (US holidays)" in line for line in listed)
    assert listed[0].startswith("2027-12-25 09:00 EST")
    plain = preview(app, world, cron="0 9 25 12 *", preview_from="2027-01-01")
    assert "skipped" not in plain  # no calendar chosen: nothing marked


def test_the_form_preview_marks_moved_fires_with_where_and_why(app: Flask, world: World) -> None:
    make_calendar(world)
    listed = marked(app, world, "0 9 1 1,2 *", "next_business_day")
    # Friday 1 January 2027 is New Year's Day: its run is on Monday the 4th at the same time.
    assert "moved to Mon 4 Jan 09:00: New Year's Day (US holidays)" in listed[0]
    assert "moved" not in listed[1] and "skipped" not in listed[1]  # Mon 1 Feb 2027 is open
    # 1 January 2028 is a Saturday (and a holiday): moved to Monday the 3rd.
    assert "moved to Mon 3 Jan 09:00" in listed[2]
    back = marked(app, world, "0 9 1 1 *", "previous_business_day")
    assert "moved to Thu 31 Dec 09:00: New Year's Day (US holidays)" in back[0]


def test_two_fires_moved_onto_one_time_are_one_run(app: Flask, world: World) -> None:
    make_calendar(world)
    weekend = marked(app, world, "0 9 * * 6,0", "next_business_day")
    assert "moved to Mon 4 Jan 09:00: Saturday" in weekend[0]
    assert "skipped: Sunday; moved to Mon 4 Jan 09:00, which already has a run" in weekend[1]


def test_a_maintenance_window_moves_a_fire_to_its_end(app: Flask, world: World) -> None:
    window = {"from": "2027-01-12T01:00", "to": "2027-01-12T05:00", "label": "DB upgrade"}
    make_calendar(world, windows=[window])
    listed = marked(app, world, "30 2 12 1 *", "next_business_day")
    assert "moved to Tue 12 Jan 05:00: DB upgrade, 2027-01-12 01:00 to 05:00" in listed[0]


def test_an_unknown_calendar_is_said_in_the_preview(app: Flask, world: World) -> None:
    page = preview(app, world, cron="0 9 * * *", calendar="nope")
    assert "the tenant has no calendar &#39;nope&#39;" in page


def test_the_api_cron_preview_marks_skipped_and_moved_fires(app: Flask, world: World) -> None:
    make_calendar(world)
    api = Api(app, world.alpha, world.alice, scope="read")
    asked = {"expression": "0 9 25 12 *", "time_zone": "America/New_York", "calendar": "us"}
    skipped = api.get("/api/v1/cron/preview", query_string={**asked, "count": 3}).get_json()
    assert [(f["calendar"], f["reason"]) for f in skipped["fires"]] == [
        ("skipped", "Christmas Day (US holidays)")
    ] * 3
    moved = api.get(
        "/api/v1/cron/preview",
        query_string={**asked, "expression": "0 9 1 1 *", "calendar_policy": "next_business_day"},
    ).get_json()["fires"]
    assert {fire["calendar"] for fire in moved} == {"moved"}
    for fire in moved:
        assert fire["reason"].startswith("New Year's Day")
        moved_to = datetime.fromisoformat(fire["moved_to"])
        assert moved_to.weekday() < 5 and moved_to.day > 1 and moved_to.hour == 9
    plain = api.get("/api/v1/cron/preview", query_string={**asked, "calendar": ""}).get_json()
    assert {fire["calendar"] for fire in plain["fires"]} == {None}
    unknown = api.get("/api/v1/cron/preview", query_string={**asked, "calendar": "nope"})
    assert unknown.status_code == 400 and "calendar" in problem_fields(unknown)


def retreat(world: World, policy: str, cron: str = "0 * * * *") -> Schedule:
    """A schedule (UTC) whose calendar closes today and the next two days (UTC)."""
    today = datetime.now(UTC).date()
    days = {"from": today.isoformat(), "to": (today + timedelta(days=2)).isoformat()}
    make_calendar(
        world,
        key="retreat",
        country=None,
        closed_weekdays=[],
        days_off=[{**days, "label": "Company retreat"}],
    )
    return make_schedule(
        world.alpha, by=world.alice, cron=cron, calendar="retreat", calendar_policy=policy
    )


def test_next_runs_marks_the_fires_a_calendar_skips(app: Flask, world: World) -> None:
    retreat(world, "skip")
    page = html.unescape(Panel(app, world.alice).get("/upcoming").get_data(as_text=True))
    rows = [row for row in re.findall(r"<tr>(.*?)</tr>", page, re.S) if "<td" in row]
    assert len(rows) >= 23  # every hour of the next 24, none folded: each says why
    assert all("skipped: Company retreat" in row for row in rows)


def test_the_schedule_page_marks_its_next_fires(app: Flask, world: World) -> None:
    now = datetime.now(UTC)
    first = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    # Once a year, at the next hour: moved to the day after the retreat at the same time.
    yearly = f"0 {first.hour} {first.day} {first.month} *"
    schedule = retreat(world, "next_business_day", yearly)
    listed = fires(Panel(app, world.alice).get(f"/schedules/{schedule.id}").get_data(as_text=True))
    assert len(listed) == 10
    moved_to = datetime.combine(now.date() + timedelta(days=3), first.timetz())
    label = f"{moved_to:%a} {moved_to.day} {moved_to:%b %H:%M}"
    assert f"moved to {label}: Company retreat" in listed[0]
    assert "retreat" not in listed[1]  # next year's is open
    api = Api(app, world.alpha, world.alice, scope="read")
    answer = api.get(f"/api/v1/schedules/{schedule.id}/fires?count=2").get_json()["fires"]
    assert answer[0]["calendar"] == "moved" and answer[0]["reason"] == "Company retreat"
    assert datetime.fromisoformat(answer[0]["moved_to"]) == moved_to
    assert answer[1]["calendar"] is None


def test_the_history_shows_why_a_run_was_skipped(app: Flask, world: World) -> None:
    schedule = make_schedule(world.alpha)
    skipped = make_run(schedule, "skipped", 60, error="Christmas Day (US holidays)")
    failed = make_run(schedule, "failed", 30, error="Traceback: boom")
    panel = Panel(app, world.alice)
    for url in ("/runs", f"/schedules/{schedule.id}"):
        page = panel.get(url).get_data(as_text=True)
        row = page.split(f'id="run-{skipped.id}"', 1)[1].split("</tr>", 1)[0]
        assert '<div class="skip-reason small">Christmas Day (US holidays)</div>' in row
        # A failure's error is not a reason to skip: the row does not show it.
        assert "Traceback: boom" not in page.split(f'id="run-{failed.id}"', 1)[1].split("</tr>")[0]


# --- A calendar's changes: the audit log, and when they take effect ------------------------


def test_a_change_to_a_calendar_says_it_applies_to_fires_not_yet_queued(
    app: Flask, world: World
) -> None:
    make_calendar(world)
    calendar = calendars.find_calendar(world.alpha, "us")
    panel = Panel(app, world.alice)
    base = f"/calendars/{calendar.id}"
    days = {"day_from": "2027-05-03", "day_to": "", "day_label": "Bridge day"}
    added = panel.post(f"{base}/days", days, htmx=False)
    page = panel.get(added.location).get_data(as_text=True)
    assert "Closed days added. A change applies to fires not yet queued" in html.unescape(page)
    # The page says it also before any change, to viewers too.
    viewer = Panel(app, world.bob).get(base).get_data(as_text=True)
    assert 'id="calendar-applies"' in viewer and "fires not yet queued" in viewer
    api = Api(app, world.alpha, world.alice, scope="read")
    answer = api.get(f"/api/v1/calendars/{calendar.id}").get_json()
    assert answer["applies"].startswith("A change applies to fires not yet queued")


def test_the_audit_log_shows_a_calendars_changes_linked_to_it(app: Flask, world: World) -> None:
    make_calendar(world)
    calendar = calendars.find_calendar(world.alpha, "us")
    panel = Panel(app, world.alice)
    base = f"/calendars/{calendar.id}"
    days = {"day_from": "2027-05-03", "day_to": "", "day_label": "Bridge day"}
    panel.post(f"{base}/days", days, htmx=False)
    entry = next(e for e in calendars.find_calendar(world.alpha, "us").entries)
    panel.post(f"{base}/entries/{entry.id}/remove", htmx=False)
    panel.post(base, {"key": "us", "name": "US days", "country": "US"}, htmx=False)
    log = html.unescape(panel.get("/audit").get_data(as_text=True))
    link = f'<a href="/calendars/{calendar.id}">'
    for action in ("created", "entries added", "entry removed", "updated"):
        assert f'<span class="action">{action}</span>\n    calendar\n    {link}' in log
    assert "Bridge day, 2027-05-03" in log and "US days" in log
