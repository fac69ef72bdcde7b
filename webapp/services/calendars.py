"""A tenant's business calendars: create, change, delete, add and remove entries, each change
one transaction with its audit event; the reads of the Calendars page and the year view.

Every path (the panel, the API, the command line, an import) checks a calendar through
`CalendarIn` and writes it here. Changes take the tenant's row lock first (`lock_tenant`, the
one lock order), so that two creations cannot take the same key and two additions cannot pass
the entry limit together."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from webapp.calendar_models import Calendar, CalendarEntry, EntrySource
from webapp.cron import load_zone
from webapp.cron.business_days import WEEKDAY_NAMES, Window
from webapp.database import retry_lost_race, write_transaction
from webapp.extensions import db
from webapp.models import Schedule, Tenant
from webapp.scheduler.calendar_rules import rules_of
from webapp.services import scope
from webapp.services.audit import Actor, changed_fields, record_event
from webapp.services.calendar_schema import (
    MAX_ENTRIES,
    CalendarIn,
    CalendarProblems,
    DayOffIn,
    WindowIn,
    calendar_document,
    too_many,
)
from webapp.services.schedules import lock_tenant

Precondition = Callable[[Calendar], None]
Entry = DayOffIn | WindowIn

# What a change to a calendar changes, told after each change (the panel's message, the API's
# answer): the tick asks the calendar when it queues a fire, so runs already queued (a moved
# one among them) keep their time.
CHANGE_APPLIES = "A change applies to fires not yet queued: runs already queued keep their time."


def tenant_calendars(tenant_id: int) -> list[Calendar]:
    """The tenant's calendars by key."""
    return list(db.session.scalars(scope.calendars(tenant_id).order_by(Calendar.key)))


def listed_calendars(tenant_id: int | None) -> list[tuple[str, Calendar]]:
    """Calendars with their tenant's slug, by tenant and key: one tenant's, or (None) every
    tenant's, for the operator's command line."""
    base = select(Calendar) if tenant_id is None else scope.calendars(tenant_id)
    query = (
        base.join(Tenant, Tenant.id == Calendar.tenant_id)
        .add_columns(Tenant.slug)
        .options(selectinload(Calendar.entries))
        .order_by(Tenant.slug, Calendar.key)
    )
    return [(slug, calendar) for calendar, slug in db.session.execute(query)]


def find_calendar(tenant: Tenant, key: str) -> Calendar:
    """The tenant's calendar by key, or CalendarProblems naming the key."""
    calendar = scope.calendar_by_key(tenant.id, key)
    if calendar is None:
        raise CalendarProblems({"key": f"tenant {tenant.slug} has no calendar {key!r}"})
    return calendar


class CalendarInUse(CalendarProblems):
    """A delete refused: schedules use the calendar (named in the message)."""


def schedules_using(calendar: Calendar) -> list[str]:
    """The keys of the schedules that name this calendar, by key: its delete refuses them."""
    mine = scope.schedules(calendar.tenant_id).with_only_columns(Schedule.key)
    query = mine.where(Schedule.calendar_id == calendar.id).order_by(Schedule.key)
    return list(db.session.scalars(query))


def audit(actor: Actor, action: str, calendar: Calendar, **changes: Any) -> None:
    record_event(
        db.session(),
        actor,
        action,
        ("calendar", calendar.id, calendar.name),
        tenant_id=calendar.tenant_id,
        **changes,
    )


def new_entries(asked: Iterable[Entry], source: EntrySource = "manual") -> list[CalendarEntry]:
    rows = []
    for entry in asked:
        if isinstance(entry, DayOffIn):
            rows.append(
                CalendarEntry(
                    kind="day_off",
                    source=source,
                    label=entry.label,
                    first_day=entry.first,
                    last_day=entry.until,
                )
            )
        else:
            rows.append(
                CalendarEntry(
                    kind="window",
                    source=source,
                    label=entry.label,
                    window_start=entry.start,
                    window_end=entry.end,
                )
            )
    return rows


def key_taken(session: Session, tenant_id: int, key: str, but: int | None = None) -> bool:
    query = scope.calendars(tenant_id).where(Calendar.key == key)
    if but is not None:
        query = query.where(Calendar.id != but)
    return session.scalar(query.with_only_columns(Calendar.id)) is not None


def duplicate_key(key: str) -> CalendarProblems:
    return CalendarProblems({"key": f"the tenant has a calendar with key {key!r} already"})


@retry_lost_race
def create_calendar(tenant: Tenant, data: object, actor: Actor, now: datetime) -> Calendar:
    """A new calendar of the tenant, checked by CalendarIn; a taken key is refused."""
    asked = CalendarIn.check(data)
    with write_transaction(db.session) as session:
        lock_tenant(session, tenant)
        calendar = Calendar(tenant_id=tenant.id, created_at=now)
        save_calendar(session, calendar, asked, actor, now)
    return calendar


@retry_lost_race
def update_calendar(
    calendar: Calendar,
    data: object,
    actor: Actor,
    now: datetime,
    precondition: Precondition | None = None,
) -> bool:
    """Replaces the calendar with `data` (a whole CalendarIn document); False: nothing changed."""
    asked = CalendarIn.check(data)
    with write_transaction(db.session) as session:
        lock_tenant(session, tenant_of(calendar))
        session.refresh(calendar)
        if precondition is not None:
            precondition(calendar)
        return save_calendar(session, calendar, asked, actor, now)


def save_calendar(
    session: Session, calendar: Calendar, asked: CalendarIn, actor: Actor, now: datetime
) -> bool:
    """Writes `asked` into the calendar (new when it has no id yet) with its audit event, in
    the caller's transaction, under the tenant's lock; False: nothing changed. The entries are
    replaced only when they changed (their ids stay put otherwise)."""
    if key_taken(session, calendar.tenant_id, asked.key, calendar.id):
        raise duplicate_key(asked.key)
    if calendar.id is None:
        fill(calendar, asked)
        calendar.updated_at = now
        session.add(calendar)
        session.flush()
        audit(actor, "calendar.created", calendar, after=calendar_document(calendar), at=now)
        return True
    old, new = changed_fields(calendar_document(calendar), asked.document())
    if not new:
        return False
    fill(calendar, asked, entries="days_off" in new or "windows" in new)
    calendar.updated_at = now
    audit(actor, "calendar.updated", calendar, before=old, after=new, at=now)
    return True


def fill(calendar: Calendar, asked: CalendarIn, entries: bool = True) -> None:
    """The calendar's columns from `asked`, and its entries unless `entries` is False."""
    calendar.key, calendar.name = asked.key, asked.name
    calendar.country, calendar.subdivision = asked.country, asked.subdivision
    calendar.closed_weekdays = asked.weekdays
    if entries:
        calendar.entries = new_entries([*asked.days_off, *asked.windows])


def tenant_of(calendar: Calendar) -> Tenant:
    tenant = db.session.get(Tenant, calendar.tenant_id)
    assert tenant is not None
    return tenant


@retry_lost_race
def delete_calendar(
    calendar: Calendar, actor: Actor, precondition: Precondition | None = None
) -> None:
    """Deletes the calendar and its entries; refused while schedules use it (naming them)."""
    with write_transaction(db.session) as session:
        lock_tenant(session, tenant_of(calendar))
        session.refresh(calendar)
        if precondition is not None:
            precondition(calendar)
        users = schedules_using(calendar)
        if users:
            raise CalendarInUse(
                {
                    "key": f"calendar {calendar.key!r} is used by schedules "
                    f"{', '.join(users)}: change them first"
                }
            )
        audit(actor, "calendar.deleted", calendar, before=calendar_document(calendar))
        session.delete(calendar)


def entry_count(session: Session, calendar: Calendar) -> int:
    query = select(func.count()).where(CalendarEntry.calendar_id == calendar.id)
    return int(session.scalar(query) or 0)


@retry_lost_race
def add_entries(
    calendar: Calendar,
    asked: list[Entry],
    actor: Actor,
    now: datetime,
    source: EntrySource = "manual",
) -> int:
    """Adds closed dates, ranges and windows; those the calendar holds already (same span and
    label) are left out. Returns how many were added; the limit counts the calendar whole."""
    with write_transaction(db.session) as session:
        lock_tenant(session, tenant_of(calendar))
        session.refresh(calendar)
        held = {entry_key(e) for e in calendar.entries}
        fresh: list[CalendarEntry] = []
        seen: set[tuple[object, ...]] = set()
        for row in new_entries(asked, source):
            if entry_key(row) not in held | seen:
                seen.add(entry_key(row))
                fresh.append(row)
        total = entry_count(session, calendar) + len(fresh)
        if total > MAX_ENTRIES:
            raise CalendarProblems({"days_off": too_many(total)})
        if not fresh:
            return 0
        for row in fresh:
            row.calendar_id = calendar.id
            row.created_at = now
        session.add_all(fresh)
        calendar.updated_at = now
        action = "calendar.imported" if source == "ics" else "calendar.entries_added"
        added = [entry_text(row) for row in fresh]
        audit(actor, action, calendar, after={"added": added}, at=now)
    return len(fresh)


def entry_key(entry: CalendarEntry) -> tuple[object, ...]:
    return (
        entry.kind,
        entry.first_day,
        entry.last_day,
        entry.window_start,
        entry.window_end,
        entry.label,
    )


def entry_text(entry: CalendarEntry) -> str:
    """An entry in a line, as the audit log and the command line show it."""
    if entry.kind == "window":
        assert entry.window_start is not None and entry.window_end is not None
        return Window(entry.window_start, entry.window_end, entry.label).describe()
    assert entry.first_day is not None and entry.last_day is not None
    span = entry.first_day.isoformat()
    if entry.last_day != entry.first_day:
        span += f" to {entry.last_day.isoformat()}"
    return f"{entry.label}, {span}" if entry.label else span


@retry_lost_race
def remove_entry(calendar: Calendar, entry_id: int, actor: Actor, now: datetime) -> bool:
    """Removes one of the calendar's entries; False when it has no such entry (gone already,
    or another calendar's)."""
    with write_transaction(db.session) as session:
        lock_tenant(session, tenant_of(calendar))
        entry = session.scalar(
            select(CalendarEntry).where(
                CalendarEntry.id == entry_id, CalendarEntry.calendar_id == calendar.id
            )
        )
        if entry is None:
            return False
        text = entry_text(entry)
        session.delete(entry)
        calendar.updated_at = now
        audit(actor, "calendar.entry_removed", calendar, before={"removed": [text]}, at=now)
    session.expire(calendar, ["entries"])
    return True


@dataclass(frozen=True)
class ClosedDay:
    day: date
    reasons: tuple[str, ...]

    @property
    def weekday(self) -> str:
        return WEEKDAY_NAMES[self.day.weekday()]


@dataclass(frozen=True)
class YearView:
    """What `calendar show` and the year view list: the closed days of a year with their
    reasons, and the maintenance windows that touch it."""

    year: int
    days: list[ClosedDay]
    windows: list[Window]


def this_year(time_zone: str, now: datetime) -> int:
    """The year a year view shows by default: the tenant's, in its zone."""
    return now.astimezone(load_zone(time_zone)).year


def year_view(calendar: Calendar, year: int) -> YearView:
    rules = rules_of(calendar)
    days = [ClosedDay(day, reasons) for day, reasons in rules.closed_days(year).items()]
    windows = [w for w in rules.windows if w.start.year <= year <= w.end.year]
    return YearView(year, days, sorted(windows, key=lambda w: w.start))
