"""Business calendars on both databases: the service (create, change, delete, entries, the
limit, .ics and JSON files, the audit trail) and the Calendars page (admins write, viewers read,
other tenants get 404); bad input refused by field with nothing written."""

from __future__ import annotations

import io
import json
from datetime import date
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import func, select

from tests.conftest import World
from tests.panel_helpers import Panel
from webapp.api.openapi import EXAMPLE_CALENDAR
from webapp.calendar_models import Calendar, CalendarEntry
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import AuditEvent
from webapp.services import calendar_files, calendars
from webapp.services.audit import Actor
from webapp.services.calendar_schema import MAX_ENTRIES, CalendarProblems, DayOffIn

CLI = Actor.cli()
ICS = b"""BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//Acme//Holidays//EN
BEGIN:VEVENT
UID:1@acme
SUMMARY:Company offsite
DTSTART;VALUE=DATE:20270614
DTEND;VALUE=DATE:20270616
END:VEVENT
BEGIN:VEVENT
UID:2@acme
SUMMARY:Founders day
DTSTART;VALUE=DATE:20270302
END:VEVENT
BEGIN:VEVENT
UID:3@acme
SUMMARY:Storage migration
DTSTART:20270110T000000Z
DTEND:20270110T040000Z
END:VEVENT
BEGIN:VEVENT
UID:4@acme
SUMMARY:Called off
STATUS:CANCELLED
DTSTART;VALUE=DATE:20270901
END:VEVENT
END:VCALENDAR
"""


def counts() -> tuple[int, int]:
    """(calendars, entries) in the database."""
    calendars_count = db.session.scalar(select(func.count()).select_from(Calendar))
    entries = db.session.scalar(select(func.count()).select_from(CalendarEntry))
    return int(calendars_count or 0), int(entries or 0)


def calendar_audit() -> list[tuple[str, str, Any, Any]]:
    rows = db.session.execute(
        select(AuditEvent.action, AuditEvent.actor_label, AuditEvent.before, AuditEvent.after)
        .where(AuditEvent.object_type == "calendar")
        .order_by(AuditEvent.id)
    )
    return [(action, actor, before, after) for action, actor, before, after in rows]


def make(world: World, **fields: Any) -> Calendar:
    return calendars.create_calendar(world.alpha, {**EXAMPLE_CALENDAR, **fields}, CLI, utcnow())


def test_a_calendar_is_created_with_its_entries_and_audited(app: Flask, world: World) -> None:
    calendar = make(world)
    assert (calendar.country, calendar.subdivision, calendar.closed_weekdays) == (
        "US",
        "CA",
        "sat,sun",
    )
    assert [calendars.entry_text(e) for e in calendar.entries] == [
        "Winter break, 2027-12-24 to 2027-12-31",
        "DB upgrade, 2027-01-10 01:00 to 05:00",
    ]
    [(action, actor, before, after)] = calendar_audit()
    assert (action, actor, before, after["key"]) == ("calendar.created", "cli", None, "us-business")


def test_a_duplicate_key_is_refused_and_nothing_written(app: Flask, world: World) -> None:
    make(world)
    with pytest.raises(CalendarProblems) as refused:
        make(world, name="Another")
    assert refused.value.errors == {
        "key": "the tenant has a calendar with key 'us-business' already"
    }
    assert counts() == (1, 2)
    # Another tenant may use the same key.
    calendars.create_calendar(world.beta, EXAMPLE_CALENDAR, CLI, utcnow())
    assert counts() == (2, 4)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"country": "XX"}, "country", "the valid codes: AD, AE"),
        ({"subdivision": "ZZ"}, "subdivision", "the valid ones: AK, AL"),
        ({"days_off": [{"from": "2027-12-31", "to": "2027-12-24"}]}, "days_off.0", "ends"),
        (
            {"windows": [{"from": "2027-01-10T05:00", "to": "2027-01-10T01:00"}]},
            "windows.0",
            "ends",
        ),
        ({"closed_weekdays": ["sat", "sux"]}, "closed_weekdays", "sux is not a day of the week"),
        ({"key": "Not A Key"}, "key", "invalid key"),
    ],
)
def test_bad_input_is_refused_by_field_and_nothing_written(
    app: Flask, world: World, fields: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(CalendarProblems) as refused:
        make(world, **fields)
    assert words in refused.value.errors[field]
    assert counts() == (0, 0)
    assert calendar_audit() == []


def test_a_calendar_holds_at_most_1000_dates_ranges_and_windows(app: Flask, world: World) -> None:
    many = [{"from": "2027-01-01", "label": f"day {n}"} for n in range(MAX_ENTRIES + 1)]
    with pytest.raises(CalendarProblems, match="1001 dates, ranges and windows: a calendar holds"):
        make(world, days_off=many, windows=[])
    assert counts() == (0, 0)
    calendar = make(world, days_off=many[:MAX_ENTRIES], windows=[])
    one_more = DayOffIn.model_validate({"from": "2028-01-01", "label": "one more"})
    with pytest.raises(CalendarProblems, match="1001 dates"):
        calendars.add_entries(calendar, [one_more], CLI, utcnow())
    assert counts() == (1, MAX_ENTRIES)


def test_an_edit_records_only_what_changed(app: Flask, world: World) -> None:
    calendar = make(world)
    entry_ids = [e.id for e in calendar.entries]
    changed = {**EXAMPLE_CALENDAR, "name": "US working days", "closed_weekdays": "sun"}
    assert calendars.update_calendar(calendar, changed, CLI, utcnow()) is True
    assert calendars.update_calendar(calendar, changed, CLI, utcnow()) is False
    assert [e.id for e in calendar.entries] == entry_ids  # entries untouched keep their ids
    *_, (action, _, before, after) = calendar_audit()
    assert action == "calendar.updated"
    assert before == {"name": "US business days", "closed_weekdays": ["sat", "sun"]}
    assert after == {"name": "US working days", "closed_weekdays": ["sun"]}
    assert len(calendar_audit()) == 2


def test_entries_are_added_once_and_removed_with_audit_events(app: Flask, world: World) -> None:
    calendar = make(world, days_off=[], windows=[])
    day = DayOffIn.model_validate({"from": "2027-05-03", "label": "Bridge day"})
    assert calendars.add_entries(calendar, [day, day], CLI, utcnow()) == 1
    assert calendars.add_entries(calendar, [day], CLI, utcnow()) == 0
    [entry] = calendar.entries
    assert calendars.remove_entry(calendar, entry.id, CLI, utcnow()) is True
    assert calendars.remove_entry(calendar, entry.id, CLI, utcnow()) is False
    actions = [(a, b, c) for a, _, b, c in calendar_audit()]
    assert actions[1:] == [
        ("calendar.entries_added", None, {"added": ["Bridge day, 2027-05-03"]}),
        ("calendar.entry_removed", {"removed": ["Bridge day, 2027-05-03"]}, None),
    ]


def test_an_entry_of_another_calendar_is_not_removed(app: Flask, world: World) -> None:
    mine = make(world)
    theirs = calendars.create_calendar(world.beta, EXAMPLE_CALENDAR, CLI, utcnow())
    assert calendars.remove_entry(mine, theirs.entries[0].id, CLI, utcnow()) is False
    assert counts() == (2, 4)


def test_delete_removes_the_calendar_and_its_entries(app: Flask, world: World) -> None:
    calendar = make(world)
    calendars.delete_calendar(calendar, CLI)
    assert counts() == (0, 0)
    assert calendar_audit()[-1][0] == "calendar.deleted"


def test_an_ics_file_adds_all_day_events_as_days_and_timed_ones_as_windows(
    app: Flask, world: World
) -> None:
    calendar = make(world, days_off=[], windows=[])
    assert calendar_files.import_ics(calendar, ICS, CLI, utcnow()) == 3
    # Berlin (the tenant's zone) is UTC+1 in January; DTEND of an all-day event is exclusive.
    assert sorted(calendars.entry_text(e) for e in calendar.entries) == [
        "Company offsite, 2027-06-14 to 2027-06-15",
        "Founders day, 2027-03-02",
        "Storage migration, 2027-01-10 01:00 to 05:00",
    ]
    assert {e.source for e in calendar.entries} == {"ics"}
    assert calendar_files.import_ics(calendar, ICS, CLI, utcnow()) == 0  # held already
    view = calendars.year_view(calendar, 2027)
    closed = {d.day: d.reasons for d in view.days}
    assert closed[date(2027, 6, 15)] == ("Company offsite",)
    assert calendar_audit()[-1][0] == "calendar.imported"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (
            ICS.replace(b"UID:2@acme\n", b"UID:2@acme\nRRULE:FREQ=YEARLY\n"),
            "event 2 ('Founders day'): it repeats (RRULE)",
        ),
        (b"this is not a calendar", "not an iCalendar (.ics) file"),
        (ICS.replace(b"20270302", b"2027-03-02"), "event 2 ('Founders day'): DTSTART"),
        (b"BEGIN:VCALENDAR\nVERSION:2.0\nEND:VCALENDAR\n", "holds no events"),
        (ICS + b" " * (1024 * 1024), "an .ics file may have at most 1 MiB"),
    ],
)
def test_a_bad_ics_file_is_refused_whole(app: Flask, world: World, data: bytes, words: str) -> None:
    calendar = make(world, days_off=[], windows=[])
    with pytest.raises(CalendarProblems) as refused:
        calendar_files.import_ics(calendar, data, CLI, utcnow())
    assert words in refused.value.errors["file"]
    assert counts() == (1, 0)


def test_export_then_import_changes_nothing_and_import_is_all_or_nothing(
    app: Flask, world: World
) -> None:
    make(world)
    exported = calendar_files.export_calendars(world.alpha)
    result = calendar_files.import_calendars(world.alpha, exported, CLI, utcnow())
    assert (result.created, result.updated, result.unchanged) == (0, 0, 1)
    items = json.loads(exported)
    items[0]["name"] = "Renamed"
    items.append({**items[0], "key": "de-by", "country": "DE", "subdivision": "BY"})
    items.append({"key": "bad", "name": "Bad", "country": "XX"})
    with pytest.raises(CalendarProblems) as refused:
        calendar_files.import_calendars(world.alpha, json.dumps(items), CLI, utcnow())
    assert list(refused.value.errors) == ["item 2 (key 'bad'): country"]
    assert counts() == (1, 2)
    result = calendar_files.import_calendars(world.alpha, json.dumps(items[:2]), CLI, utcnow())
    assert (result.created, result.updated, result.unchanged) == (1, 1, 0)
    assert calendar_files.export_calendars(world.beta) == "[]\n"  # the tenant's own only


# --- The Calendars page ---------------------------------------------------------------------


def test_an_admin_creates_a_calendar_in_the_panel(app: Flask, world: World) -> None:
    panel = Panel(app, world.alice)
    assert 'href="/calendars"' in panel.get("/calendars").get_data(as_text=True)
    form = {"key": "us", "name": "US", "country": "us", "closed_sat": "1", "closed_sun": "1"}
    created = panel.post("/calendars", form, htmx=False)
    assert created.status_code == 303
    calendar = calendars.find_calendar(world.alpha, "us")
    assert created.location == f"/calendars/{calendar.id}"
    page = panel.get(f"{created.location}?year=2027").get_data(as_text=True)
    assert "Independence Day (observed) (US holidays)" in page
    assert calendar_audit()[0][1] == "alice@example.com"


def test_the_form_shows_a_bad_country_next_to_the_field(app: Flask, world: World) -> None:
    panel = Panel(app, world.alice)
    refused = panel.post("/calendars", {"key": "us", "name": "US", "country": "XX"}, htmx=False)
    assert refused.status_code == 422
    page = refused.get_data(as_text=True)
    assert 'id="country-error"' in page and "the valid codes: AD, AE" in page
    assert 'aria-describedby="calendar-country-help country-error"' in page
    assert counts() == (0, 0)


def test_a_reversed_range_is_refused_under_its_end(app: Flask, world: World) -> None:
    calendar = make(world, days_off=[], windows=[])
    panel = Panel(app, world.alice)
    refused = panel.post(
        f"/calendars/{calendar.id}/days", {"day_from": "2027-12-31", "day_to": "2027-12-24"}
    )
    assert refused.status_code == 422
    page = refused.get_data(as_text=True)
    assert 'id="day_to-error"' in page
    assert "the range ends (2027-12-24) before it starts (2027-12-31)" in page
    assert counts() == (1, 0)


def test_an_admin_adds_days_windows_and_an_ics_file_and_removes_one(
    app: Flask, world: World
) -> None:
    calendar = make(world, days_off=[], windows=[])
    panel = Panel(app, world.alice)
    base = f"/calendars/{calendar.id}"
    days = {"day_from": "2027-05-03", "day_to": "", "day_label": "Bridge day"}
    assert panel.post(f"{base}/days", days, htmx=False).status_code == 303
    window = {"window_from": "2027-02-07T02:00", "window_to": "2027-02-07T03:30"}
    assert panel.post(f"{base}/windows", window, htmx=False).status_code == 303
    upload = {"file": (io.BytesIO(ICS), "holidays.ics")}
    assert panel.post(f"{base}/ics", upload, htmx=False).status_code == 303
    page = panel.get(f"{base}?year=2027").get_data(as_text=True)
    assert "Bridge day" in page and "Maintenance window, 2027-02-07 02:00 to 03:30" in page
    assert "Company offsite" in page
    entry = next(e for e in calendar.entries if e.label == "Bridge day")
    assert panel.post(f"{base}/entries/{entry.id}/remove", htmx=False).status_code == 303
    assert counts() == (1, 4)


def test_an_ics_upload_over_the_limit_is_refused_next_to_the_field(
    app: Flask, world: World
) -> None:
    calendar = make(world, days_off=[], windows=[])
    panel = Panel(app, world.alice)
    # The body written here: the test client would spool it to a file it never closes.
    boundary = "calendar-upload"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.ics"\r\n'
        "Content-Type: text/calendar\r\n\r\n".encode()
        + ICS
        + b" " * (1024 * 1024)
        + f"\r\n--{boundary}--\r\n".encode()
    )
    refused = panel.client.post(
        f"/calendars/{calendar.id}/ics",
        data=body,
        content_type=f"multipart/form-data; boundary={boundary}",
        headers={"X-CSRFToken": panel.token()},
    )
    assert refused.status_code == 422
    page = refused.get_data(as_text=True)
    assert 'id="file-error"' in page and "at most 1 MiB" in page
    assert counts() == (1, 0)


def test_a_viewer_reads_calendars_and_cannot_change_them(app: Flask, world: World) -> None:
    calendar = make(world)
    panel = Panel(app, world.bob)
    page = panel.get(f"/calendars/{calendar.id}?year=2027").get_data(as_text=True)
    assert "Winter break" in page and "Christmas Day (US-CA holidays)" in page
    assert (
        "Save calendar" not in page
        and "Remove" not in page
        and "Create calendar" not in (panel.get("/calendars").get_data(as_text=True))
    )
    base = f"/calendars/{calendar.id}"
    for url in ("/calendars", base, f"{base}/delete", f"{base}/days", f"{base}/windows"):
        assert panel.post(url, {"key": "x", "name": "x"}).status_code == 403, url
    assert counts() == (1, 2)


def test_another_tenants_calendar_is_not_found(app: Flask, world: World) -> None:
    calendar = make(world)
    panel = Panel(app, world.charlie)
    base = f"/calendars/{calendar.id}"
    assert panel.get(base).status_code == 404
    entry = calendar.entries[0].id
    for url in (base, f"{base}/delete", f"{base}/entries/{entry}/remove", f"{base}/days"):
        assert panel.post(url, {"key": "x", "name": "x"}).status_code == 404, url
    assert f'id="calendar-{calendar.id}"' not in panel.get("/calendars").get_data(as_text=True)
    assert counts() == (1, 2)


def test_an_admin_deletes_a_calendar(app: Flask, world: World) -> None:
    calendar = make(world)
    panel = Panel(app, world.alice)
    deleted = panel.post(f"/calendars/{calendar.id}/delete")
    assert deleted.headers["HX-Redirect"] == "/calendars"
    assert counts() == (0, 0)
