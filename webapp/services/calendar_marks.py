"""What a business calendar does to a schedule's next fires, for the previews (the form's, the
schedule page's, the API's) and Next runs: each fire kept, skipped, or moved to the nearest
open day (or a maintenance window's end), with the calendar's reason. The decision is the
tick's own (`scheduler.calendar_fires.plan_fire`); this module only lays it out for display,
with the calendar's reason (`closure_at`). No markup: the `calendar_mark` macro of
`templates/_macros.html` shows a mark.

A preview lists the next N fire times of the cron, skipped ones included, so a schedule whose
next N fires are all skipped still shows N entries; a shift looks at most
`business_days.MAX_SEARCH_DAYS` (3,660) days ahead, and a fire with no open day within that
bound is shown as skipped with that reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from webapp import cron
from webapp.calendar_models import Calendar
from webapp.cron.business_days import BusinessCalendar, CalendarError
from webapp.extensions import db
from webapp.models import CalendarPolicy
from webapp.scheduler.calendar_fires import local_wall, plan_fire
from webapp.scheduler.calendar_rules import load_calendars
from webapp.services import scope

MarkKind = Literal["skipped", "moved"]


@dataclass(frozen=True)
class CalendarMark:
    """What the calendar does to one fire: `skipped`, or `moved` to `moved_to` (UTC), shown as
    `moved_label` (local: "Mon 4 Jan 09:00"); `reason`: the calendar's, "Christmas Day (US
    holidays)"; `joined`: skipped because the time it would move to already has a run (two
    fires moved onto one time are one run), `moved_label` naming that time."""

    kind: MarkKind
    reason: str
    moved_to: datetime | None = None
    moved_label: str = ""
    joined: bool = False


def short_label(local: datetime) -> str:
    """ "Mon 4 Jan 09:00"."""
    return f"{local:%a} {local.day} {local:%b %H:%M}"


def mark_fire(
    fire: datetime, spec: cron.CronSpec, calendar: BusinessCalendar, policy: CalendarPolicy
) -> CalendarMark | None:
    """The calendar's mark on the fire at `fire` (UTC) of the cron `spec`, as the tick decides
    it (`plan_fire`), or None when the fire runs at its time."""
    local = local_wall(fire, spec.tz)
    closure = calendar.closure_at(local)
    try:
        fate = plan_fire(calendar, policy, fire, spec)
    except CalendarError as error:  # no open day within the bound
        return CalendarMark("skipped", f"{closure.reason if closure else ''}; {error}")
    if fate.kind == "run" or closure is None:
        return None
    if fate.kind == "shifted":
        moved = local_wall(fate.available_at, spec.tz)
        return CalendarMark("moved", closure.reason, fate.available_at, short_label(moved))
    if policy == "skip":
        return CalendarMark("skipped", closure.reason)
    # Moved onto a time that already has a run: this fire is that run.
    target = calendar.shift(local, forward=policy == "next_business_day")
    return CalendarMark("skipped", closure.reason, None, short_label(target), joined=True)


def calendar_marks(
    fires: Sequence[datetime],
    spec: cron.CronSpec,
    calendar: BusinessCalendar | None,
    policy: CalendarPolicy,
) -> list[CalendarMark | None]:
    """Each fire's mark (None: it runs as the cron says), in the fires' order."""
    if calendar is None:
        return [None] * len(fires)
    return [mark_fire(fire, spec, calendar, policy) for fire in fires]


def calendar_rules(
    tenant_id: int, key: str | None = None, calendar_id: int | None = None
) -> BusinessCalendar | None:
    """The tenant's calendar (by `key` or `calendar_id`) as the rules the tick reads, from the
    tick's cache (by id and updated_at: one statement when cached); None when it has no such
    calendar, or when neither is given."""
    if key is None and calendar_id is None:
        return None
    query = scope.calendars(tenant_id).with_only_columns(Calendar.id, Calendar.updated_at)
    if key is not None:
        query = query.where(Calendar.key == key)
    if calendar_id is not None:
        query = query.where(Calendar.id == calendar_id)
    row = db.session.execute(query).first()
    if row is None:
        return None
    return load_calendars(db.session(), {row.id: row.updated_at}).get(row.id)
