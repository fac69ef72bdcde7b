"""Business calendars as the scheduler reads them: the stored rows made into the pure rules of
`cron.business_days`, loaded once per tick batch and cached by (calendar id, updated_at), so
that a change of a calendar applies to the fires not yet queued."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from webapp.calendar_models import Calendar
from webapp.cron.business_days import BusinessCalendar, DayOff, Window, weekday_numbers

# Calendars kept between batches; a changed calendar is another key, the old one ages out.
MAX_CACHED = 1024
CACHE: dict[tuple[int, datetime], BusinessCalendar] = {}


def rules_of(calendar: Calendar) -> BusinessCalendar:
    """The calendar as the pure rules the scheduler asks (cron.business_days)."""
    days_off, windows = [], []
    for entry in calendar.entries:
        if entry.kind == "day_off":
            assert entry.first_day is not None and entry.last_day is not None
            days_off.append(DayOff(entry.first_day, entry.last_day, entry.label))
        else:
            assert entry.window_start is not None and entry.window_end is not None
            windows.append(Window(entry.window_start, entry.window_end, entry.label))
    return BusinessCalendar(
        key=calendar.key,
        country=calendar.country,
        subdivision=calendar.subdivision,
        closed_weekdays=weekday_numbers(calendar.closed_weekdays),
        days_off=tuple(days_off),
        windows=tuple(windows),
    )


def load_calendars(
    session: Session, versions: Mapping[int, datetime]
) -> dict[int, BusinessCalendar]:
    """The rules of these calendars (id -> its updated_at, as the claim read it): from the
    cache, and the missing ones in one statement (with their entries: two)."""
    found: dict[int, BusinessCalendar] = {}
    missing: list[int] = []
    for calendar_id, version in versions.items():
        cached = CACHE.get((calendar_id, version))
        if cached is None:
            missing.append(calendar_id)
        else:
            found[calendar_id] = cached
    if missing:
        if len(CACHE) + len(missing) > MAX_CACHED:
            CACHE.clear()
        statement = (
            select(Calendar).where(Calendar.id.in_(missing)).options(selectinload(Calendar.entries))
        )
        for calendar in session.scalars(statement):
            found[calendar.id] = CACHE[(calendar.id, calendar.updated_at)] = rules_of(calendar)
    return found


def calendar_of(session: Session, calendar_id: int | None) -> BusinessCalendar | None:
    """One calendar's rules (a backfill, a save's first fire), or None without one."""
    if calendar_id is None:
        return None
    calendar = session.get(Calendar, calendar_id)
    return rules_of(calendar) if calendar is not None else None
