"""The tenant's upcoming fire times across schedules: pure cron math, no clock or database."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from itertools import groupby
from zoneinfo import ZoneInfo

from webapp.models import Schedule
from webapp.scheduler import cron


@dataclass(frozen=True)
class Fire:
    at: datetime  # UTC
    schedule: Schedule
    note: str | None  # the DST rule that moved it, if any


# A page of Next runs continues after the last fire shown: (fire time, schedule id).
Cursor = tuple[datetime, int]


def upcoming_fires(
    schedules: Iterable[Schedule],
    start: datetime,
    end: datetime,
    limit: int = 500,
    after: Cursor | None = None,
) -> tuple[list[Fire], bool]:
    """Fires with start < t <= end, earliest first (then by schedule id), at most `limit`; and
    whether more exist. With `after`, only the fires that come after that one in this order."""
    per_schedule: list[list[Fire]] = []
    for schedule in schedules:
        try:
            spec = cron.validate(schedule.cron, schedule.time_zone)
        except cron.CronError:
            continue  # stored expressions were validated on save; a bad one fires nothing
        first = start
        if after is not None:
            # Fire times are whole minutes: a microsecond earlier includes the cursor's own
            # time, for the schedules after the cursor's one.
            at, schedule_id = after
            first = max(start, at - timedelta(microseconds=1) if schedule.id > schedule_id else at)
        times = spec.fire_times_between(first, end, limit + 1)
        per_schedule.append([Fire(t, schedule, spec.dst_note(t)) for t in times])
    merged = list(heapq.merge(*per_schedule, key=lambda fire: (fire.at, fire.schedule.id)))
    return merged[:limit], len(merged) > limit


def by_day(fires: list[Fire], time_zone: str) -> list[tuple[date, list[Fire]]]:
    """The fires grouped by their local day in `time_zone`, in order."""
    zone = ZoneInfo(time_zone)
    return [
        (day, list(group))
        for day, group in groupby(fires, key=lambda fire: fire.at.astimezone(zone).date())
    ]
