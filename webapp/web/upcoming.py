"""The tenant's upcoming fire times across schedules: pure cron math, no clock or database."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from webapp.models import Schedule
from webapp.scheduler import cron


@dataclass(frozen=True)
class Fire:
    at: datetime  # UTC
    schedule: Schedule
    note: str | None  # the DST rule that moved it, if any


def upcoming_fires(
    schedules: Iterable[Schedule], start: datetime, end: datetime, limit: int = 500
) -> tuple[list[Fire], bool]:
    """Fires with start < t <= end, earliest first, at most `limit`; and whether more exist."""
    per_schedule: list[list[Fire]] = []
    for schedule in schedules:
        try:
            spec = cron.validate(schedule.cron, schedule.time_zone)
        except cron.CronError:
            continue  # stored expressions were validated on save; a bad one fires nothing
        times = spec.fire_times_between(start, end, limit + 1)
        per_schedule.append([Fire(t, schedule, spec.dst_note(t)) for t in times])
    merged = list(heapq.merge(*per_schedule, key=lambda fire: (fire.at, fire.schedule.id)))
    return merged[:limit], len(merged) > limit
