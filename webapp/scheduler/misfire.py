"""Which runs a due schedule gets: the misfire policy, as pure time math (no clock, no database)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from webapp.scheduler.cron import CronSpec

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
    counted_all = following is not None
    next_run_at = following if following is not None else spec.next_fire_after(now)
    missed = [fire for fire in due if now - fire > grace]
    on_time = due[len(missed) :]
    runs: list[PlannedRun]
    if not missed:
        runs = [PlannedRun(fire, "schedule", "queued") for fire in on_time]
    elif policy == "fire_once":
        runs = [PlannedRun(due[-1], "catchup", "queued", fires_covered=len(due))]
    elif policy == "fire_all":
        recoverable = [fire for fire in missed if now - fire <= recovery_window][-max_catchup:]
        # The newest fire times are kept, so the dropped ones are the oldest: a prefix.
        dropped = missed[: len(missed) - len(recoverable)]
        runs = []
        if dropped:
            runs.append(
                PlannedRun(
                    dropped[-1],
                    "catchup",
                    "skipped",
                    fires_covered=len(dropped),
                    reason=f"skipped {count_label(len(dropped), counted_all)} missed fire times "
                    f"outside the recovery window ({int(recovery_window.total_seconds())} s, "
                    f"at most {max_catchup} runs)",
                )
            )
        runs += [PlannedRun(fire, "catchup", "queued") for fire in recoverable]
        runs += [PlannedRun(fire, "schedule", "queued") for fire in on_time]
    else:  # skip
        runs = [
            PlannedRun(
                missed[-1],
                "catchup",
                "skipped",
                fires_covered=len(missed),
                reason=f"skipped {count_label(len(missed), counted_all)} missed fire times "
                "(misfire policy: skip)",
            )
        ]
        runs += [PlannedRun(fire, "schedule", "queued") for fire in on_time]
    return FirePlan(runs=runs, next_run_at=next_run_at, last_fire=due[-1])


def count_label(count: int, exact: bool) -> str:
    return str(count) if exact else f"at least {count}"
