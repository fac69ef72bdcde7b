"""Backfill: one run per fire time of a past window, for the panel, the CLI and the API alike.

The fire times are the cron module's (the schedule's zone, Debian's DST rules). A fire time
that already has a run is skipped by the database itself: the runs are inserted as the tick
inserts them (`runs.insert_runs`, ON CONFLICT DO NOTHING), so the unique index on
(schedule_id, scheduled_for) decides, even against a tick or another backfill running at once.
The runs are queued available now: the per-tenant concurrency cap spreads their execution.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from webapp import cron
from webapp.catalog import ArgsError, args_path
from webapp.config import settings
from webapp.database import retry_lost_race, write_transaction
from webapp.extensions import db
from webapp.models import Run, Schedule
from webapp.scheduler import runs
from webapp.scheduler.calendar_fires import apply_calendar
from webapp.scheduler.calendar_rules import calendar_of
from webapp.scheduler.misfire import PlannedRun
from webapp.scheduler.run_rows import run_row
from webapp.scheduler.wakeup import notify_workers
from webapp.services.audit import Actor, record_event
from webapp.services.schedules import runnable_job
from webapp.services.schema import ScheduleError

# Runs one request may queue: a larger window is refused (split it into several).
MAX_BACKFILL_RUNS = 1000
# Fire times counted at most for the refusal's message; past this it says "more than".
MAX_COUNTED = 10 * MAX_BACKFILL_RUNS
PAUSED_LABEL = "paused: the runs will still run"


@dataclass(frozen=True)
class Window:
    start: datetime  # UTC, inclusive
    end: datetime  # UTC, inclusive


@dataclass(frozen=True)
class BackfillPlan:
    """What a backfill would do: the preview every way in shows before queuing."""

    schedule_id: int
    time_zone: str
    spec: cron.CronSpec  # the schedule's expression in its zone
    window: Window
    fires: list[datetime]  # UTC, in order
    existing: int  # of those, fire times that already have a run: skipped
    paused: bool

    @property
    def count(self) -> int:
        return len(self.fires)

    @property
    def first(self) -> datetime | None:
        return self.fires[0] if self.fires else None

    @property
    def last(self) -> datetime | None:
        return self.fires[-1] if self.fires else None

    @property
    def new(self) -> int:
        """Runs a backfill would queue now (a tick may record some of them meanwhile)."""
        return self.count - self.existing


@dataclass(frozen=True)
class BackfillResult:
    plan: BackfillPlan
    queued: int
    skipped: int  # fire times that already had a run


def parse_moment(text: str, time_zone: str, field: str) -> datetime:
    """cron.parse_local_time (the one reading of a typed time); ScheduleError names `field`."""
    try:
        return cron.parse_local_time(text, time_zone)
    except cron.CronError as error:
        raise ScheduleError({field: str(error)}) from None


def parse_window(start: str, end: str, time_zone: str) -> Window:
    """From and To as typed (panel, CLI, API), both errors at once when both are wrong."""
    errors: dict[str, str] = {}
    moments: list[datetime] = []
    for field, text in (("from", start), ("to", end)):
        if not text.strip():
            errors[field] = "required: a date and time (ISO 8601)"
            continue
        try:
            moments.append(parse_moment(text, time_zone, field))
        except ScheduleError as error:
            errors.update(error.errors)
    if errors:
        raise ScheduleError(errors)
    return Window(*moments)


def utc_label(moment: datetime) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%SZ}"


def check_window(window: Window, now: datetime) -> None:
    if window.start >= window.end:
        raise ScheduleError(
            {
                "to": f"must be after From ({utc_label(window.end)} is not after "
                f"{utc_label(window.start)})"
            }
        )
    if window.end > now:
        raise ScheduleError(
            {
                "to": f"{utc_label(window.end)} is in the future: a backfill covers past fire "
                f"times only (now is {utc_label(now)})"
            }
        )


def schedule_spec(schedule: Schedule) -> cron.CronSpec:
    try:
        return cron.validate(schedule.cron, schedule.time_zone)
    except cron.CronError as error:
        raise ScheduleError({"cron": f"cannot backfill: {error}; edit it first"}) from None


def window_fires(spec: cron.CronSpec, window: Window) -> list[datetime]:
    """The fire times in the window, both ends included, or ScheduleError past the limit."""
    # Fire times are whole minutes: from just before `start`, a fire at `start` counts.
    before = window.start - timedelta(microseconds=1)
    fires = spec.fire_times_between(before, window.end, MAX_COUNTED + 1)
    if len(fires) > MAX_BACKFILL_RUNS:
        found = f"more than {MAX_COUNTED:,}" if len(fires) > MAX_COUNTED else f"{len(fires):,}"
        raise ScheduleError(
            {
                "window": f"the window holds {found} fire times; a backfill queues at most "
                f"{MAX_BACKFILL_RUNS:,} runs per request: choose a shorter window"
            }
        )
    return fires


def fires_with_runs(schedule: Schedule, fires: list[datetime]) -> set[datetime]:
    """Those of `fires` that already have a run (the unique index's rows: not manual runs)."""
    if not fires:
        return set()
    query = select(Run.scheduled_for).where(
        Run.schedule_id == schedule.id,
        Run.trigger != "manual",
        Run.scheduled_for >= fires[0],
        Run.scheduled_for <= fires[-1],
    )
    return set(db.session.scalars(query)) & set(fires)


def plan_backfill(schedule: Schedule, start: str, end: str, now: datetime) -> BackfillPlan:
    """The preview of a backfill of the window typed as `start` and `end` (ISO 8601; without
    an offset, wall-clock times in the schedule's zone), or ScheduleError naming the field."""
    window = parse_window(start, end, schedule.time_zone)
    check_window(window, now)
    spec = schedule_spec(schedule)
    fires = window_fires(spec, window)
    return BackfillPlan(
        schedule_id=schedule.id,
        time_zone=schedule.time_zone,
        spec=spec,
        window=window,
        fires=fires,
        existing=len(fires_with_runs(schedule, fires)),
        paused=not schedule.active,
    )


def check_job(schedule: Schedule) -> int:
    """Run now's checks (the job in the catalog, its scope, the arguments' size), and the
    arguments against the job's parameters: a run per fire time that can only fail is refused
    up front. Returns the job's max attempts."""
    spec = runnable_job(schedule)
    try:
        spec.parse_args(schedule.args, settings().job_settings())
    except ArgsError as error:
        raise ScheduleError({args_path(path): message for path, message in error.errors}) from None
    return spec.max_attempts


@retry_lost_race
def backfill(
    schedule: Schedule, start: str, end: str, actor: Actor, now: datetime
) -> BackfillResult:
    """Queues one run per fire time of the window that has none yet, in one transaction with
    its audit event (`schedule.backfilled`). Paused schedules too: the runs still run."""
    plan = plan_backfill(schedule, start, end, now)
    if not plan.fires:
        raise ScheduleError({"window": "no fire time in this window: nothing to queue"})
    with write_transaction(db.session) as session:
        max_attempts = check_job(schedule)
        # Its calendar as the tick's: a closed fire recorded skipped with the reason, or moved.
        planned = apply_calendar(
            [PlannedRun(fire, "backfill", "queued") for fire in plan.fires],
            calendar_of(session, schedule.calendar_id),
            schedule.calendar_policy,
            plan.spec,
            now,
        )
        rows: list[dict[str, Any]] = [
            {**run_row(schedule, run, now, max_attempts, run.reason), "requested_by": actor.user_id}
            for run, _ in planned
        ]
        inserted = runs.insert_runs(session, rows)
        queued = sum(
            1
            for row in rows
            if row["status"] == "queued" and (row["schedule_id"], row["scheduled_for"]) in inserted
        )
        result = BackfillResult(plan=plan, queued=queued, skipped=len(rows) - len(inserted))
        record_event(
            session,
            actor,
            "schedule.backfilled",
            ("schedule", schedule.id, schedule.name),
            tenant_id=schedule.tenant_id,
            after={
                "from": plan.window.start.isoformat(),
                "to": plan.window.end.isoformat(),
                "queued": result.queued,
                "skipped": result.skipped,
            },
            at=now,
        )
        notify_workers(session)
    return result
