"""Next runs: the tenant's upcoming fire times across schedules and its queued one-off runs.

The merge (upcoming_fires) is pure cron math, no clock or database; upcoming_page reads what it
needs of the tenant's schedules and runs.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from itertools import groupby, islice
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from sqlalchemy import Select, and_, tuple_
from sqlalchemy.orm import Session

from webapp import cron
from webapp.calendar_models import Calendar
from webapp.cron.business_days import BusinessCalendar
from webapp.models import CalendarPolicy, Run, Schedule, run_status_is
from webapp.scheduler.calendar_rules import load_calendars
from webapp.services import scope
from webapp.services.calendar_marks import CalendarMark, mark_fire


class Timetable(Protocol):
    """What computing and showing a schedule's fire times reads of it: a Schedule, or a row of
    these columns (Next runs loads rows, not models)."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def job(self) -> str: ...
    @property
    def cron(self) -> str: ...
    @property
    def time_zone(self) -> str: ...
    @property
    def next_run_at(self) -> datetime | None: ...
    @property
    def calendar_id(self) -> int | None: ...
    @property
    def calendar_policy(self) -> CalendarPolicy: ...


@dataclass(frozen=True)
class Fire:
    at: datetime  # UTC
    schedule: Timetable
    note: str | None  # the DST rule that moved it, if any
    run_id: int | None = None  # a queued one-off run ("Run once later"), not a fire of the cron
    mark: CalendarMark | None = None  # what the schedule's business calendar does to it


# A page of Next runs continues after the last fire shown: (fire time, schedule id, run id);
# the run id is 0 for a fire of the cron, which comes before the one-offs of its minute.
Cursor = tuple[datetime, int, int]


def fire_order(fire: Fire) -> Cursor:
    """Where a fire stands on Next runs: by time, then schedule, the cron's fire before the
    schedule's one-offs of the same time, and those by id (each has its own place, so a page
    boundary between any two of them loses neither)."""
    return fire.at, fire.schedule.id, fire.run_id or 0


def upcoming_fires(
    schedules: Iterable[Timetable],
    start: datetime,
    end: datetime,
    limit: int = 500,
    after: Cursor | None = None,
    one_offs: Iterable[Fire] = (),
    calendars: Mapping[int, BusinessCalendar] | None = None,
) -> tuple[list[Fire], bool]:
    """Fires with start < t <= end in fire_order, at most `limit`; and whether more exist.
    With `after`, only the fires that come after that one in this order.
    A schedule fires nothing before its next_run_at (the scheduler never fires it earlier), so
    a caller may load schedules by next_run_at and stop early (see the Next runs page).
    `one_offs`: queued one-off runs in the same order, merged in (they pass the same bounds).
    `calendars`: the schedules' business calendars by id: each fire a calendar skips or moves
    is marked (calendar_marks), at its fire time."""
    per_schedule: list[Iterator[Fire]] = []
    for schedule in schedules:
        try:
            spec = cron.validate(schedule.cron, schedule.time_zone)
        except cron.CronError:
            continue  # stored expressions were validated on save; a bad one fires nothing
        first = start
        if after is not None:
            # Fire times are whole minutes: a microsecond earlier includes the cursor's own
            # time, for the schedules after the cursor's one.
            at, schedule_id, _ = after  # a cron's fire comes before the one-offs of its time
            first = max(start, at - timedelta(microseconds=1) if schedule.id > schedule_id else at)
        if schedule.next_run_at is not None:
            first = max(first, schedule.next_run_at - timedelta(microseconds=1))
        rules = (calendars or {}).get(schedule.calendar_id or 0)
        per_schedule.append(fires_of(schedule, spec, first, end, rules))
    # Lazy: the merge asks each schedule for its next fire only when that one is shown, so a
    # page costs one fire per schedule plus the fires it shows, however many schedules fire.
    queued = (
        fire
        for fire in one_offs
        if start < fire.at <= end and (after is None or fire_order(fire) > after)
    )
    merged = heapq.merge(*per_schedule, queued, key=fire_order)
    shown = list(islice(merged, limit + 1))
    return shown[:limit], len(shown) > limit


def fires_of(
    schedule: Timetable,
    spec: cron.CronSpec,
    start: datetime,
    end: datetime,
    rules: BusinessCalendar | None = None,
) -> Iterator[Fire]:
    """The schedule's fires with start < t <= end, computed one at a time as they are asked for;
    with its calendar's `rules`, each marked as the calendar treats it."""
    for at in spec.iter_fire_times(start):
        if at > end:
            return
        mark = None if rules is None else mark_fire(at, spec, rules, schedule.calendar_policy)
        yield Fire(at, schedule, spec.dst_note(at), mark=mark)


def by_day(fires: list[Fire], time_zone: str) -> list[tuple[date, list[Fire]]]:
    """The fires grouped by their local day in `time_zone`, in order."""
    zone = ZoneInfo(time_zone)
    return [
        (day, list(group))
        for day, group in groupby(fires, key=lambda fire: fire.at.astimezone(zone).date())
    ]


# A queued one-off run ("Run once later"): the first attempt of a manual run that waits for a
# later time (a retry's wait is not one).
ONE_OFF = (run_status_is("queued"), Run.trigger == "manual", Run.attempt == 0)
# What Next runs needs of a schedule to compute and show its fire times (a Timetable).
UPCOMING_COLUMNS = (
    Schedule.id,
    Schedule.tenant_id,
    Schedule.name,
    Schedule.job,
    Schedule.cron,
    Schedule.time_zone,
    Schedule.next_run_at,
    Schedule.calendar_id,
    Schedule.calendar_policy,
    Calendar.updated_at.label("calendar_version"),  # the calendar's rules are cached by it
)
# The schedule's calendar, for its version.
WITH_CALENDAR = (Calendar, Calendar.id == Schedule.calendar_id)


def active_schedules(
    tenant_id: int, size: int, schedule_id: int | None = None
) -> Select[*tuple[Any, ...]]:
    """The tenant's first `size` active schedules (or only `schedule_id`) by (next_run_at, id),
    as rows of UPCOMING_COLUMNS (no schedule loaded as a model). A schedule without next_run_at
    never falls due: the scheduler will not fire it."""
    query = (
        scope.schedules(tenant_id).with_only_columns(*UPCOMING_COLUMNS).outerjoin(*WITH_CALENDAR)
    )
    if schedule_id is not None:
        query = query.where(Schedule.id == schedule_id)
    return (
        query.where(Schedule.active, Schedule.next_run_at.is_not(None))
        .order_by(Schedule.next_run_at, Schedule.id)
        .limit(size)
    )


def one_off_fires(
    session: Session,
    tenant_id: int,
    start: datetime,
    end: datetime,
    cursor: Cursor | None,
    limit: int,
    schedule_id: int | None = None,
) -> list[Fire]:
    """The tenant's first `limit` queued one-off runs (ONE_OFF; only `schedule_id`'s if given)
    due in (start, end] (after `cursor` in fire_order: a one-off's (time, schedule, run id)),
    each with its schedule (still the tenant's) as a row of UPCOMING_COLUMNS, as fires of Next
    runs."""
    query = scope.runs(tenant_id).where(Run.available_at > start, Run.available_at <= end, *ONE_OFF)
    if schedule_id is not None:
        query = query.where(Run.schedule_id == schedule_id)
    if cursor is not None:
        query = query.where(tuple_(Run.available_at, Run.schedule_id, Run.id) > tuple_(*cursor))
    same_schedule = and_(Schedule.id == Run.schedule_id, Schedule.tenant_id == Run.tenant_id)
    statement = (
        query.with_only_columns(Run.id.label("run_id"), Run.available_at, *UPCOMING_COLUMNS)
        .join(Schedule, same_schedule)
        .outerjoin(*WITH_CALENDAR)
        .order_by(Run.available_at, Run.schedule_id, Run.id)
        .limit(limit)
    )
    return [Fire(row.available_at, row, None, row.run_id) for row in session.execute(statement)]


def upcoming_page(
    session: Session,
    tenant_id: int,
    start: datetime,
    end: datetime,
    cursor: Cursor | None,
    size: int,
    schedule_id: int | None = None,
) -> tuple[list[Fire], bool]:
    """`size` fires of the tenant's active schedules and queued one-off runs in (start, end]
    (after `cursor`; only `schedule_id`'s if given), and whether more exist, loading schedules
    by next_run_at rather than all of them: a schedule fires nothing before its next_run_at, so
    once the page's fires (and the one after) all come before the last loaded schedule's
    (next_run_at, id), no schedule not loaded can take a place on the page. The first `size` + 1
    schedules usually suffice; else four times as many, and so on."""
    loaded = size + 1
    queued = one_off_fires(session, tenant_id, start, end, cursor, size + 1, schedule_id)
    while True:
        schedules = session.execute(active_schedules(tenant_id, loaded, schedule_id)).all()
        versions = {row.calendar_id: row.calendar_version for row in schedules if row.calendar_id}
        calendars = load_calendars(session, versions)  # no statement when all are cached
        fires, _ = upcoming_fires(schedules, start, end, size + 1, cursor, queued, calendars)
        if len(schedules) < loaded:
            break  # every active schedule is loaded
        last = schedules[-1]
        if last.next_run_at > end or (
            len(fires) > size
            and (fires[-1].at, fires[-1].schedule.id) <= (last.next_run_at, last.id)
        ):
            break
        loaded *= 4
    return fires[:size], len(fires) > size


@dataclass(frozen=True)
class Folded:
    """The fires of a schedule that follow one shown, with no other fire between them: counted
    under it rather than listed (a `*/7` schedule would otherwise fill the page)."""

    count: int
    shortest: timedelta  # the gaps between them, from the fire shown on
    longest: timedelta
    last: datetime  # UTC


FOLD_FROM = 3  # fires of a schedule in a row from which those after the first are folded


def folded(fires: list[Fire]) -> list[tuple[Fire, Folded | None]]:
    """The fires as rows: of each run of FOLD_FROM or more fires of the same schedule in a row,
    the first, with the rest as a Folded. A one-off run and a fire with a DST note or a
    calendar's mark are always a row of their own."""
    rows: list[tuple[Fire, Folded | None]] = []

    def alone(fire: Fire) -> bool:
        return fire.run_id is not None or fire.note is not None or fire.mark is not None

    for _, group in groupby(fires, key=lambda f: (f.schedule.id, id(f) if alone(f) else 0)):
        same = list(group)
        if len(same) < FOLD_FROM:
            rows += [(fire, None) for fire in same]
            continue
        gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(same)]
        rows.append((same[0], Folded(len(same) - 1, min(gaps), max(gaps), same[-1].at)))
    return rows


def schedule_choices(tenant_id: int, size: int) -> Select[int, str]:
    """The first `size` of the tenant's active schedules by name, as (id, name): the options of
    Next runs' schedule filter."""
    return (
        scope.schedules(tenant_id)
        .with_only_columns(Schedule.id, Schedule.name)
        .where(Schedule.active)
        .order_by(Schedule.name, Schedule.id)
        .limit(size)
    )


def chosen_schedule(session: Session, tenant_id: int, schedule_id: int) -> Any:
    """The tenant's schedule `schedule_id` as a row (id, name), or None if it is not one of the
    tenant's: the schedule that Next runs is filtered to."""
    statement = (
        scope.schedules(tenant_id)
        .with_only_columns(Schedule.id, Schedule.name)
        .where(Schedule.id == schedule_id)
    )
    return session.execute(statement).first()
