"""Calendars as files: an iCalendar (.ics) file's events added to a calendar, and the tenant's
calendars exported and imported as JSON (all or nothing, by key).

An .ics file: each all-day event becomes closed days (DTEND is exclusive, as RFC 5545 says), each
timed event a maintenance window in the tenant's zone (a time with a zone or in UTC converted;
a floating time taken as it is). A recurring event (RRULE or RDATE) is refused, naming it: its
occurrences are unbounded, and expanding them would store a guess of how far ahead to look;
export the occurrences instead (calendar apps can) or add them as dates. Cancelled events
(STATUS:CANCELLED) are left out. Nothing is written unless the whole file is good."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from webapp.calendar_models import MAX_LABEL, Calendar
from webapp.cron import load_zone
from webapp.database import load_user_json, retry_lost_race, write_transaction
from webapp.extensions import db
from webapp.models import Tenant
from webapp.services import scope
from webapp.services.audit import Actor
from webapp.services.calendar_schema import (
    CalendarIn,
    CalendarProblems,
    DayOffIn,
    WindowIn,
    calendar_document,
)
from webapp.services.calendars import Entry, add_entries, save_calendar, tenant_of
from webapp.services.schedules import lock_tenant
from webapp.services.schema import field_errors

MAX_ICS_BYTES = 1024 * 1024  # 1 MiB


def read_ics(data: bytes, time_zone: str) -> list[Entry]:
    """The file's events as closed days and windows, or CalendarProblems under `file` saying
    what is wrong (too large, not iCalendar, an event that is recurring or broken)."""
    if len(data) > MAX_ICS_BYTES:
        raise CalendarProblems(
            {"file": f"the file has {len(data):,} bytes: an .ics file may have at most 1 MiB"}
        )
    import icalendar  # here: 80 modules that no worker or other command needs at start-up

    try:
        parsed = icalendar.Calendar.from_ical(data)
    except Exception as error:  # the parser's many ways of refusing bytes that are not iCalendar
        raise CalendarProblems({"file": f"not an iCalendar (.ics) file: {error}"}) from None
    events = [e for e in parsed.walk("VEVENT") if str(e.get("STATUS", "")).upper() != "CANCELLED"]
    if not events:
        raise CalendarProblems({"file": "the file holds no events (VEVENT)"})
    zone = load_zone(time_zone)
    entries: list[Entry] = []
    problems: list[str] = []
    for number, event in enumerate(events, 1):
        label = " ".join(str(event.get("SUMMARY", "")).split())[:MAX_LABEL]
        name = f"event {number} ({label!r})" if label else f"event {number}"
        try:
            entries.append(event_entry(event, label, zone))
        except CalendarProblems as error:
            problems.append(f"{name}: {next(iter(error.errors.values()))}")
    if problems:
        shown = "; ".join(problems[:5]) + (
            f"; and {len(problems) - 5} more" if problems[5:] else ""
        )
        raise CalendarProblems({"file": f"nothing was imported: {shown}"})
    return entries


def event_entry(event: Any, label: str, zone: Any) -> Entry:
    if "RRULE" in event or "RDATE" in event:
        raise CalendarProblems(
            {
                "file": "it repeats (RRULE): recurring events are not imported; export its "
                "occurrences, or add them as dates"
            }
        )
    if event.errors:
        prop, message = event.errors[0]
        raise CalendarProblems({"file": f"{prop}: {message}"})
    try:
        start, end = event.start, event.end
    except Exception as error:  # no DTSTART, an end before the start...
        raise CalendarProblems({"file": str(error)}) from None
    try:
        if isinstance(start, datetime):
            return WindowIn.model_validate(
                {"from": local(start, zone), "to": local(end, zone), "label": label}
            )
        last = end - timedelta(days=1) if isinstance(end, date) and end > start else start
        return DayOffIn.model_validate({"from": start, "to": last, "label": label})
    except ValidationError as error:
        raise CalendarProblems(
            {"file": next(iter(field_errors(error, WindowIn).values()))}
        ) from None


def local(moment: datetime, zone: Any) -> datetime:
    """A wall-clock time in the tenant's zone: a time with a zone converted, a floating one as
    it is."""
    if moment.tzinfo is None:
        return moment
    return moment.astimezone(zone).replace(tzinfo=None)


def import_ics(calendar: Calendar, data: bytes, actor: Actor, now: datetime) -> int:
    """Adds the file's events to the calendar (those it holds already left out); how many."""
    entries = read_ics(data, tenant_of(calendar).time_zone)
    return add_entries(calendar, entries, actor, now, source="ics")


# --- JSON, all the tenant's calendars ---------------------------------------------------------


@dataclass(frozen=True)
class CalendarImport:
    created: int
    updated: int
    unchanged: int


def calendar_documents(tenant: Tenant) -> list[dict[str, Any]]:
    """The tenant's calendars as the import reads them, by key."""
    calendars = db.session.scalars(scope.calendars(tenant.id).order_by(Calendar.key))
    return [calendar_document(calendar) for calendar in calendars]


def export_calendars(tenant: Tenant) -> str:
    """The tenant's calendars as JSON: export then import changes nothing."""
    return json.dumps(calendar_documents(tenant), indent=2, ensure_ascii=False) + "\n"


def check_items(document: object) -> list[CalendarIn]:
    """A JSON list of calendars checked whole: CalendarProblems by item and field."""
    if not isinstance(document, list):
        raise CalendarProblems({"file": "the calendars must be a JSON list of calendar objects"})
    problems: dict[str, str] = {}
    checked: list[CalendarIn] = []
    first: dict[str, int] = {}
    for index, item in enumerate(document):
        key = item.get("key") if isinstance(item, dict) else None
        label = f"item {index} (key {key!r})" if isinstance(key, str) else f"item {index}"
        try:
            checked.append(CalendarIn.check(item))
        except CalendarProblems as error:
            problems |= {f"{label}: {field}": message for field, message in error.errors.items()}
        if isinstance(key, str) and key in first:
            problems[f"{label}: key"] = f"duplicate key: item {first[key]} has it too"
        elif isinstance(key, str):
            first[key] = index
    if problems:
        raise CalendarProblems(problems)
    return checked


@retry_lost_race
def import_calendars(tenant: Tenant, text: str, actor: Actor, now: datetime) -> CalendarImport:
    """Creates or replaces (by key) every calendar of a JSON list, or nothing at all."""
    try:
        document = load_user_json(text)
    except ValueError as error:
        raise CalendarProblems({"file": f"malformed JSON: {error}"}) from None
    checked = check_items(document)
    with write_transaction(db.session) as session:
        lock_tenant(session, tenant)
        return write_calendars(session, tenant, checked, actor, now)


def write_calendars(
    session: Session, tenant: Tenant, checked: list[CalendarIn], actor: Actor, now: datetime
) -> CalendarImport:
    """Creates or replaces the checked calendars by key, in the caller's transaction, under
    the tenant's lock (a calendar file's import, or a schedule file's calendars)."""
    created = updated = 0
    existing = {c.key: c for c in session.scalars(scope.calendars(tenant.id))}
    for asked in checked:
        calendar = existing.get(asked.key)
        if calendar is None:
            calendar = Calendar(tenant_id=tenant.id, created_at=now)
            created += save_calendar(session, calendar, asked, actor, now)
        else:
            updated += save_calendar(session, calendar, asked, actor, now)
    return CalendarImport(created, updated, len(checked) - created - updated)
