"""Which runs a due schedule gets: the misfire policy, as pure time math (no clock, no database)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from webapp.cron import CronSpec

# Fire times counted at most when a schedule has been down for long (a minutely schedule down
# for a week): past this the count says "at least".
MAX_COUNTED_FIRES = 10_000


@dataclass(frozen=True)
class PlannedRun:
    scheduled_for: datetime
    trigger: str  # 'schedule' | 'catchup'
    status: str  # 'queued' | 'skipped'
    fires_covered: int = 1
    reason: str | None = None


@dataclass(frozen=True)
class FirePlan:
    runs: list[PlannedRun]
    next_run_at: datetime
    last_fire: datetime


def due_fire_times(
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


def newest_fires(spec: CronSpec, start: datetime, end: datetime) -> list[datetime]:
    """The fire times in (start, end], oldest first: the newest MAX_COUNTED_FIRES of them."""
    while True:
        fires = spec.fire_times_between(start, end, MAX_COUNTED_FIRES)
        if len(fires) < MAX_COUNTED_FIRES:
            return fires
        start += (end - start) / 2  # too many to list: the newer half is the one that matters


def latest_fire(spec: CronSpec, first_due: datetime, end: datetime) -> datetime:
    """The last fire time at or before `end`, searching back no further than `first_due`."""
    span = timedelta(minutes=2)
    while True:
        start = max(end - span, first_due - EPSILON)
        fires = newest_fires(spec, start, end)
        if fires:
            return fires[-1]
        span *= 16


EPSILON = timedelta(microseconds=1)


def plan_fires(
    spec: CronSpec,
    first_due: datetime,
    now: datetime,
    policy: str,
    grace: timedelta,
    recovery_window: timedelta,
    max_catchup: int,
) -> FirePlan:
    """Decides the runs for the fire times a schedule has due at `now`.

    A fire time older than `grace` was missed (the scheduler was down or behind); the policy
    decides what happens to missed ones:
    - fire_once: one run for the most recent fire time, standing for all of them;
    - fire_all: one run per fire time inside the recovery window, the newest `max_catchup`;
    - skip: no run for missed fire times, one skipped run that says how many there were.
    The next fire time is computed from the last fire time, so the cadence never drifts.
    """
    due, following = due_fire_times(spec, first_due, now)
    assert due, "plan_fires needs a schedule that is due"
    if following is not None:
        return plan(
            spec,
            due,
            0,
            True,
            first_due,
            now,
            following,
            policy,
            grace,
            recovery_window,
            max_catchup,
        )
    # Down for longer than MAX_COUNTED_FIRES fire times: only the newest ones can get runs (the
    # recovery window and the grace bound them), so those are listed and the older ones counted.
    span = max(recovery_window, grace)
    recent = newest_fires(spec, max(now - span, first_due - EPSILON), now)
    # due_fire_times stopped at MAX_COUNTED_FIRES with one more fire still due: a lower bound.
    older = max(1, MAX_COUNTED_FIRES + 1 - len(recent))
    return plan(
        spec,
        recent,
        older,
        False,
        first_due,
        now,
        spec.next_fire_after(now),
        policy,
        grace,
        recovery_window,
        max_catchup,
    )


def plan(
    spec: CronSpec,
    recent: list[datetime],
    older: int,
    exact: bool,
    first_due: datetime,
    now: datetime,
    next_run_at: datetime,
    policy: str,
    grace: timedelta,
    recovery_window: timedelta,
    max_catchup: int,
) -> FirePlan:
    """The policy applied to `recent` fire times (oldest first) and `older` ones only counted."""
    missed = [fire for fire in recent if now - fire > grace]
    on_time = recent[len(missed) :]
    missed_count = older + len(missed)
    latest = recent[-1] if recent else latest_fire(spec, first_due, now)

    def latest_older() -> datetime:
        end = recent[0] - EPSILON if recent else now
        return latest_fire(spec, first_due, end)

    runs: list[PlannedRun]
    if not missed_count:
        runs = [PlannedRun(fire, "schedule", "queued") for fire in on_time]
    elif policy == "fire_once":
        runs = [PlannedRun(latest, "catchup", "queued", fires_covered=older + len(recent))]
    elif policy == "fire_all":
        recoverable = [fire for fire in missed if now - fire <= recovery_window][-max_catchup:]
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
                    reason=f"skipped {count_label(dropped_count, exact)} missed fire times "
                    f"outside the recovery window ({int(recovery_window.total_seconds())} s, "
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
                reason=f"skipped {count_label(missed_count, exact)} missed fire times "
                "(misfire policy: skip)",
            )
        ]
        runs += [PlannedRun(fire, "schedule", "queued") for fire in on_time]
    return FirePlan(runs=runs, next_run_at=next_run_at, last_fire=latest)


def count_label(count: int, exact: bool) -> str:
    return str(count) if exact else f"at least {count}"
