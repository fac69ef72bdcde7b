"""What a business calendar does to a fire: the one decision, pure (no clock, no database).

`plan_fire` answers for one fire time of a schedule with a calendar: it runs as planned, it is
skipped (the policy `skip`, with the calendar's reason), or it is shifted: it starts at the same
local time on the nearest open day (`next_business_day`, `previous_business_day`), or at the end
of the maintenance window that holds it. A shifted fire keeps its fire time (`scheduled_for`,
the exactly-once key); only its start moves. Two fires shifted onto the same local time are one
run: the later one in fire order is recorded as skipped, saying so (a fire of the schedule at
that very time counts as the one run). The tick, misfire recovery (the tick), fire-ahead,
backfill and the previews all ask this function.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from webapp import cron
from webapp.cron.business_days import BusinessCalendar, Closure
from webapp.models import CalendarPolicy
from webapp.scheduler.misfire import PlannedRun

FireKind = Literal["run", "skipped", "shifted"]
SECOND = timedelta(seconds=1)
# How many closed days before a fire are looked at for another fire shifted to the same time.
MAX_STRETCH_DAYS = 366


@dataclass(frozen=True)
class FirePlan:
    """A fire under its calendar: `available_at` is when its run may start (before jitter): the
    fire time, or the shifted time (UTC); `reason` says why it is skipped or shifted."""

    kind: FireKind
    available_at: datetime
    reason: str | None = None


def local_wall(moment: datetime, zone: str) -> datetime:
    """The naive local wall-clock time of a UTC instant (how calendars are written)."""
    return moment.astimezone(ZoneInfo(zone)).replace(tzinfo=None)


def is_fire(spec: cron.CronSpec, moment: datetime) -> bool:
    return spec.next_fire_after(moment - SECOND) == moment


# Cached: the schedules of a tick that share a cron, zone, calendar and policy share each fire's
# plan (a FirePlan is a frozen value; a changed calendar is another key). bench.calendar_tick.
@functools.lru_cache(maxsize=8192)
def plan_fire(
    rules: BusinessCalendar | None,
    policy: CalendarPolicy,
    fire: datetime,
    spec: cron.CronSpec,
    now: datetime | None = None,
) -> FirePlan:
    """The fate of the fire at `fire` (UTC) of a schedule whose cron is `spec` (and zone
    `spec.tz`). With `now`, a shift to a time already past says that its run starts at once."""
    if rules is None:
        return FirePlan("run", fire)
    local = local_wall(fire, spec.tz)
    closure = rules.closure_at(local)
    if closure is None:
        return FirePlan("run", fire)
    why = f"{closure.reason}, closed in calendar {rules.key!r}"
    if policy == "skip":
        return FirePlan("skipped", fire, why)
    target_local = rules.shift(local, forward=policy == "next_business_day")
    target = cron.wall_time_to_utc(target_local, spec.tz).astimezone(UTC)
    label = f"{target_local:%Y-%m-%d %H:%M}"
    if taken(rules, spec, fire, local, closure, target_local, target):
        return FirePlan("skipped", fire, f"{why}: moved to {label}, which already has a run")
    reason = f"{why}: moved to {label}"
    if now is not None and target < now:
        reason += " (already past: it runs at once)"
    return FirePlan("shifted", target, reason)


def taken(
    rules: BusinessCalendar,
    spec: cron.CronSpec,
    fire: datetime,
    local: datetime,
    closure: Closure,
    target_local: datetime,
    target: datetime,
) -> bool:
    """Whether the shifted time already has a run: a fire of the schedule at that time (open:
    it runs there), or an earlier fire of the same closed stretch shifted there too."""
    if target != fire and is_fire(spec, target):
        return True
    forward = target > fire
    if closure.until is not None:  # a maintenance window: fires earlier in it go to its end too
        window = rules.window_at(local)
        assert window is not None
        start = cron.wall_time_to_utc(window.start, spec.tz)
        earlier = spec.next_fire_after(start - SECOND)
        return earlier < fire and rules.shift(local_wall(earlier, spec.tz), forward) == target_local
    day = local.date()
    for _ in range(MAX_STRETCH_DAYS):  # the same local time on the closed days before
        day -= timedelta(days=1)
        if rules.is_open(day):
            return False
        candidate_local = datetime.combine(day, local.time())
        candidate = cron.wall_time_to_utc(candidate_local, spec.tz)
        if is_fire(spec, candidate) and rules.shift(candidate_local, forward) == target_local:
            return True
    return False


def apply_calendar(
    planned: Iterable[PlannedRun],
    rules: BusinessCalendar | None,
    policy: CalendarPolicy,
    spec: cron.CronSpec,
    now: datetime,
) -> list[tuple[PlannedRun, FirePlan]]:
    """The queued runs of a fire plan under the calendar: skipped ones recorded as skipped with
    their reason, shifted ones starting later or earlier (`PlannedRun.starts_at`); each with
    its FirePlan (the tick logs a shift's reason)."""
    runs: list[tuple[PlannedRun, FirePlan]] = []
    for run in planned:
        if run.status != "queued" or rules is None:
            runs.append((run, FirePlan("run", run.scheduled_for)))
            continue
        fate = plan_fire(rules, policy, run.scheduled_for, spec, now)
        if fate.kind == "skipped":
            run = replace(run, status="skipped", reason=fate.reason)
        elif fate.kind == "shifted":
            run = replace(run, starts_at=fate.available_at)
        runs.append((run, fate))
    return runs


def take_at(
    rules: BusinessCalendar | None,
    policy: CalendarPolicy,
    fire: datetime,
    spec: cron.CronSpec,
    after: datetime | None,
) -> datetime:
    """When the tick takes the fire at `fire`: its fire time, or earlier when the calendar
    moves it to a previous business day (the run is queued then, to start at once), but never
    before the fire taken last (`after`: the tick's cursor moves forward only)."""
    if rules is None or policy != "previous_business_day":
        return fire
    start = min(fire, plan_fire(rules, policy, fire, spec).available_at)
    return start if after is None else max(start, after + SECOND)


def fire_of(
    next_run_at: datetime, spec: cron.CronSpec, has_calendar: bool, policy: CalendarPolicy
) -> datetime:
    """The fire time a schedule taken at `next_run_at` stands at: `next_run_at` itself, or for
    a schedule that take_at may take early (previous_business_day with a calendar) the first
    fire at or after it. Only those search (cached: CronSpec.next_fire_after)."""
    if not has_calendar or policy != "previous_business_day":
        return next_run_at
    return spec.next_fire_after(next_run_at - SECOND)
