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


def due_fire_times(spec: CronSpec, first_due: datetime, now: datetime) -> list[datetime]:
    """The fire times from `first_due` (inclusive) up to `now`, at most MAX_COUNTED_FIRES."""
    if first_due > now:
        return []
    return [first_due, *spec.fire_times_between(first_due, now, MAX_COUNTED_FIRES - 1)]


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
    due = due_fire_times(spec, first_due, now)
    assert due, "plan_fires needs a schedule that is due"
    counted_all = len(due) < MAX_COUNTED_FIRES
    next_run_at = spec.next_fire_after(due[-1] if counted_all else now)
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
