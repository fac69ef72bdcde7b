"""Which runs a due schedule gets: the misfire policy, as pure time math (no clock, no database)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from webapp.cron import CronSpec
from webapp.models import MISFIRE_POLICIES, MisfirePolicy, RunStatus, Trigger

# Fire times counted at most when a schedule has been down for long (a minutely schedule down
# for a week): past this the count says "at least".
MAX_COUNTED_FIRES = 10_000


@dataclass(frozen=True)
class MisfireSettings:
    """The operator's bounds on catching up after downtime (SCHEDULER_MISFIRE_GRACE,
    SCHEDULER_RECOVERY_WINDOW and SCHEDULER_MAX_CATCHUP)."""

    grace: timedelta  # a fire time older than this at the tick was missed
    recovery_window: timedelta  # fire_all: missed fire times older than this get no run
    max_catchup: int  # fire_all: at most this many runs for missed fire times


@dataclass(frozen=True)
class PlannedRun:
    scheduled_for: datetime
    trigger: Trigger
    status: RunStatus
    fires_covered: int = 1
    reason: str | None = None
    # When its run may start, before jitter, if not at its fire time: a business calendar moved
    # it (scheduler.calendar_fires).
    starts_at: datetime | None = None


@dataclass(frozen=True)
class FirePlan:
    runs: list[PlannedRun]
    next_run_at: datetime
    last_fire: datetime


def _due_fire_times(
    spec: CronSpec, first_due: datetime, now: datetime
) -> tuple[list[datetime], datetime | None]:
    """The fire times from `first_due` (inclusive) up to `now`, at most MAX_COUNTED_FIRES, and
    the first fire time after them when they are all counted (the search for the end of the
    list finds it anyway: computing it again was half the tick's cron work)."""
    if first_due > now:
        return [], None
    due = [first_due]
    for fire in spec.iter_fire_times(first_due):
        if fire > now:
            return due, fire
        if len(due) == MAX_COUNTED_FIRES:
            return due, None
        due.append(fire)
    raise AssertionError("iter_fire_times never ends")


def _newest_fires(spec: CronSpec, start: datetime, end: datetime) -> list[datetime]:
    """The fire times in (start, end], oldest first: the newest MAX_COUNTED_FIRES of them."""
    while True:
        fires = spec.fire_times_between(start, end, MAX_COUNTED_FIRES)
        if len(fires) < MAX_COUNTED_FIRES:
            return fires
        start += (end - start) / 2  # too many to list: the newer half is the one that matters


def _latest_fire(spec: CronSpec, first_due: datetime, end: datetime) -> datetime:
    """The last fire time at or before `end`, searching back no further than `first_due`."""
    span = timedelta(minutes=2)
    while True:
        start = max(end - span, first_due - EPSILON)
        fires = _newest_fires(spec, start, end)
        if fires:
            return fires[-1]
        span *= 16


EPSILON = timedelta(microseconds=1)


def plan_fires(
    spec: CronSpec,
    *,
    first_due: datetime,
    now: datetime,
    policy: MisfirePolicy,
    settings: MisfireSettings,
) -> FirePlan:
    """Decides the runs for the fire times a schedule has due at `now`, from `first_due` on.

    A fire time older than the grace was missed (the scheduler was down or behind); the policy
    decides what happens to missed ones:
    - fire_once: one run for the most recent fire time, standing for all of them;
    - fire_all: one run per fire time inside the recovery window, the newest `max_catchup`;
    - skip: no run for missed fire times, one skipped run that says how many there were.
    The next fire time is computed from the last fire time, so the cadence never drifts.
    An unknown policy is a ValueError.
    """
    due, following = _due_fire_times(spec, first_due, now)
    assert due, "plan_fires needs a schedule that is due"
    if following is not None:
        return _apply_policy(
            spec,
            recent=due,
            older=0,
            first_due=first_due,
            now=now,
            next_run_at=following,
            policy=policy,
            settings=settings,
        )
    # Down for longer than MAX_COUNTED_FIRES fire times: only the newest ones can get runs (the
    # recovery window and the grace bound them), so those are listed and the older ones counted.
    span = max(settings.recovery_window, settings.grace)
    recent = _newest_fires(spec, max(now - span, first_due - EPSILON), now)
    return _apply_policy(
        spec,
        recent=recent,
        # _due_fire_times stopped at MAX_COUNTED_FIRES with one more fire still due: a lower bound.
        older=max(1, MAX_COUNTED_FIRES + 1 - len(recent)),
        first_due=first_due,
        now=now,
        next_run_at=spec.next_fire_after(now),
        policy=policy,
        settings=settings,
    )


def _apply_policy(
    spec: CronSpec,
    *,
    recent: list[datetime],
    older: int,
    first_due: datetime,
    now: datetime,
    next_run_at: datetime,
    policy: MisfirePolicy,
    settings: MisfireSettings,
) -> FirePlan:
    """The policy applied to `recent` fire times (oldest first) and `older` ones before them
    that were only counted (a lower bound, so "at least" in the reasons, when not zero)."""
    if policy not in MISFIRE_POLICIES:
        # The database refuses such a value: a caller passing one has a bug, never "skip".
        choices = ", ".join(MISFIRE_POLICIES)
        raise ValueError(f"unknown misfire policy {policy!r}: expected one of {choices}")
    exact = older == 0
    missed = [fire for fire in recent if now - fire > settings.grace]
    on_time = recent[len(missed) :]
    missed_count = older + len(missed)
    latest = recent[-1] if recent else _latest_fire(spec, first_due, now)

    def latest_older() -> datetime:
        end = recent[0] - EPSILON if recent else now
        return _latest_fire(spec, first_due, end)

    runs: list[PlannedRun]
    if not missed_count:
        runs = [PlannedRun(fire, "schedule", "queued") for fire in on_time]
    elif policy == "fire_once":
        runs = [PlannedRun(latest, "catchup", "queued", fires_covered=older + len(recent))]
    elif policy == "fire_all":
        window, max_catchup = settings.recovery_window, settings.max_catchup
        recoverable = [fire for fire in missed if now - fire <= window][-max_catchup:]
        # The newest fire times are kept, so the dropped ones are the oldest.
        dropped = missed[: len(missed) - len(recoverable)]
        dropped_count = older + len(dropped)
        runs = []
        if dropped_count:
            runs.append(
                PlannedRun(
                    dropped[-1] if dropped else latest_older(),
                    "catchup",
                    "skipped",
                    fires_covered=dropped_count,
                    reason=f"skipped {_count_label(dropped_count, exact)} missed fire times "
                    f"outside the recovery window ({int(window.total_seconds())} s, "
                    f"at most {max_catchup} runs)",
                )
            )
        runs += [PlannedRun(fire, "catchup", "queued") for fire in recoverable]
        runs += [PlannedRun(fire, "schedule", "queued") for fire in on_time]
    else:  # skip
        runs = [
            PlannedRun(
                missed[-1] if missed else latest_older(),
                "catchup",
                "skipped",
                fires_covered=missed_count,
                reason=f"skipped {_count_label(missed_count, exact)} missed fire times "
                "(misfire policy: skip)",
            )
        ]
        runs += [PlannedRun(fire, "schedule", "queued") for fire in on_time]
    return FirePlan(runs=runs, next_run_at=next_run_at, last_fire=latest)


def _count_label(count: int, exact: bool) -> str:
    return str(count) if exact else f"at least {count}"
