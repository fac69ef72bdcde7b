"""Fires per minute over the next 24 hours across all tenants: where the herds are (00:00).

Bounded at any number of schedules: schedules are counted per distinct (cron, time zone) in
SQL, each distinct expression's fire times are computed once and weighted by its count, the
most used expressions first; past MAX_EXPRESSIONS expressions, or MAX_FIRES computed fire
times (a `* * * * *` costs 1,440 of them), the rest is counted as not shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select

from webapp import cron
from webapp.extensions import db
from webapp.models import Schedule

MINUTES = 24 * 60
MAX_EXPRESSIONS = 5_000
MAX_FIRES = 300_000  # about two seconds of fire-time computation


@dataclass
class Forecast:
    start: datetime  # UTC, the first minute's start (now, to the minute)
    fires: list[int]  # per minute from `start`, MINUTES of them
    schedules: int = 0  # active schedules counted
    expressions: int = 0  # distinct (cron, time zone) computed
    expressions_not_shown: int = 0  # past the caps
    schedules_not_shown: int = 0
    invalid: int = 0  # stored expressions that no longer validate (they fire nothing)

    @property
    def approximate(self) -> bool:
        return self.expressions_not_shown > 0

    @property
    def total(self) -> int:
        return sum(self.fires)

    def top(self, count: int) -> list[tuple[datetime, int]]:
        """The `count` busiest minutes, busiest first (then earliest); only minutes with fires."""
        ranked = sorted(
            (i for i, fires in enumerate(self.fires) if fires),
            key=lambda i: (-self.fires[i], i),
        )
        return [(self.minute(i), self.fires[i]) for i in ranked[:count]]

    def minute(self, index: int) -> datetime:
        return self.start + timedelta(minutes=index)


def fires_per_minute(
    now: datetime,
    max_expressions: int = MAX_EXPRESSIONS,
    max_fires: int = MAX_FIRES,
) -> Forecast:
    """Counts each active schedule's fire times in the MINUTES minutes from `now`'s minute."""
    start = now.replace(second=0, microsecond=0)
    forecast = Forecast(start=start, fires=[0] * MINUTES)
    schedules = func.count().label("schedules")
    # The window functions count all groups and schedules while only the first groups are read.
    rows = db.session.execute(
        select(
            Schedule.cron,
            Schedule.time_zone,
            schedules,
            func.count().over().label("expressions"),
            func.sum(func.count()).over().label("all_schedules"),
        )
        .where(Schedule.active)
        .group_by(Schedule.cron, Schedule.time_zone)
        .order_by(schedules.desc(), Schedule.cron, Schedule.time_zone)
        .limit(max_expressions)
    ).all()
    if not rows:
        return forecast
    forecast.schedules = int(rows[0].all_schedules)
    all_expressions = int(rows[0].expressions)
    computed_fires = 0
    counted_schedules = 0
    # Fires are whole minutes: from a second before the first minute to the last minute.
    after, end = start - timedelta(seconds=1), start + timedelta(minutes=MINUTES - 1)
    for row in rows:
        if computed_fires >= max_fires:
            break
        forecast.expressions += 1
        counted_schedules += row.schedules
        try:
            spec = cron.validate(row.cron, row.time_zone)
        except cron.CronError:
            forecast.invalid += row.schedules  # validated on save; a bad one fires nothing
            continue
        fires = spec.fire_times_between(after, end, limit=MINUTES + 1)
        computed_fires += len(fires)
        for fire in fires:
            forecast.fires[int((fire - start).total_seconds()) // 60] += row.schedules
    forecast.expressions_not_shown = all_expressions - forecast.expressions
    forecast.schedules_not_shown = forecast.schedules - counted_schedules
    return forecast
