"""What a business calendar does to a schedule's next fires, for the previews (the form's, the
schedule page's) and Next runs: each fire kept, skipped with its reason, or moved to the
nearest open day with its reason. The decision is the tick's own (`scheduler.calendar_fires`);
this module only lays it out for display. No markup: `templates/_macros.html` (`calendar_mark`)
shows a mark.

A preview lists the next N fire times of the cron, skipped ones included, so a schedule whose
next N fires are all skipped still shows N entries; a shift looks at most
`business_days.MAX_SEARCH_DAYS` (3,660) days ahead, and a fire with no open day within that
bound is shown as skipped with that reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal
from zoneinfo import ZoneInfo

from webapp.calendar_models import Calendar
from webapp.cron import wall_time_to_utc
from webapp.cron.business_days import BusinessCalendar, CalendarError
from webapp.services.calendar_schema import rules_of

MarkKind = Literal["skipped", "moved"]


@dataclass(frozen=True)
class CalendarMark:
    """What the calendar does to one fire: `skipped`, or `moved` to `moved_to` (UTC; shown as
    `moved_label`, local: "Mon 4 Jan 09:00"); `reason`: why ("Christmas Day (US holidays)");
    `joined`: a moved fire that lands on a day another fire of the list runs on (one run)."""

    kind: MarkKind
    reason: str
    moved_to: datetime | None = None
    moved_label: str = ""
    joined: bool = False


def short_label(local: datetime) -> str:
    """ "Mon 4 Jan 09:00" (the year only when it is not the fire's)."""
    return f"{local:%a} {local.day} {local:%b %H:%M}"


def mark_fire(
    fire: datetime, time_zone: str, calendar: BusinessCalendar, policy: str
) -> CalendarMark | None:
    """The calendar's mark on the fire at `fire` (UTC), or None when the fire is open."""
    local = fire.astimezone(ZoneInfo(time_zone)).replace(tzinfo=None)
    closure = calendar.closure_at(local)
    if closure is None:
        return None
    if policy not in ("next_business_day", "previous_business_day"):
        return CalendarMark("skipped", closure.reason)
    try:
        shifted = calendar.shift(local, forward=policy == "next_business_day")
    except CalendarError as error:
        return CalendarMark("skipped", f"{closure.reason}; {error}")
    return CalendarMark(
        "moved", closure.reason, wall_time_to_utc(shifted, time_zone), short_label(shifted)
    )


def calendar_marks(
    fires: Sequence[datetime], time_zone: str, calendar: BusinessCalendar | None, policy: str
) -> list[CalendarMark | None]:
    """Each fire's mark (None: it runs as the cron says), in the fires' order. A moved fire
    that lands on a local day another fire of the list runs on is `joined` to it: two fires
    shifted onto one day are one run."""
    if calendar is None:
        return [None] * len(fires)
    zone = ZoneInfo(time_zone)
    marks: list[CalendarMark | None] = []
    days: set[date] = set()
    for fire in fires:
        mark = mark_fire(fire, time_zone, calendar, policy)
        if mark is None:
            days.add(fire.astimezone(zone).date())
        elif mark.moved_to is not None:
            day = mark.moved_to.astimezone(zone).date()
            if day in days:
                mark = CalendarMark(mark.kind, mark.reason, mark.moved_to, mark.moved_label, True)
            days.add(day)
        marks.append(mark)
    return marks


def rules_by_id(calendars: Iterable[Calendar]) -> dict[int, BusinessCalendar]:
    """The calendars as the rules their marks are computed by, by id."""
    return {calendar.id: rules_of(calendar) for calendar in calendars}
