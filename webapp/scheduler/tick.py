"""The tick: claim due schedules, record exactly one run per fire time, advance, in one transaction.

A crash anywhere before the commit rolls everything back and frees the rows at once; the unique
index on runs (schedule_id, scheduled_for) refuses a fire that another worker already recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from webapp import cron
from webapp.catalog import ArgsError, Catalog, UnknownJobError, size_errors
from webapp.config import DEFAULTS, Settings
from webapp.cron.business_days import BusinessCalendar
from webapp.database import write_transaction
from webapp.scheduler import claims, runs
from webapp.scheduler.calendar_fires import FirePlan as CalendarPlan
from webapp.scheduler.calendar_fires import apply_calendar, fire_of, take_at
from webapp.scheduler.calendar_rules import load_calendars
from webapp.scheduler.jitter import effective_jitter
from webapp.scheduler.misfire import FirePlan, MisfireSettings, PlannedRun, plan_fires
from webapp.scheduler.run_rows import apply_overlap, run_row

log = logging.getLogger("webapp.scheduler")

# A log line held until the transaction commits: its level, action and fields.
LogLine = tuple[int, str, dict[str, Any]]
# The batch's INFO line, `tick_batch`: schedules claimed, fires queued, skipped, failed, recorded.
BATCH_COUNTS = ("claimed", "queued", "skipped", "failed", "already_recorded")


@dataclass
class TickResult:
    claimed: int = 0
    queued: int = 0
    skipped: int = 0
    failed: int = 0
    already_recorded: int = 0
    first_start: datetime | None = None  # the earliest available_at of the runs queued

    def add(self, other: TickResult) -> None:
        for name in BATCH_COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.first_start = earliest_of(self.first_start, other.first_start)


def earliest_of(*moments: datetime | None) -> datetime | None:
    return min((moment for moment in moments if moment is not None), default=None)


@dataclass(frozen=True)
class TickSettings:
    batch_size: int
    grace: timedelta
    recovery_window: timedelta
    max_catchup: int
    args_limits: tuple[int, int] = DEFAULTS.args_limits
    # SCHEDULER_FIRE_AHEAD: a fire is queued this long before its time (its run waits for it).
    fire_ahead: timedelta = timedelta(0)

    @classmethod
    def of(cls, settings: Settings) -> TickSettings:
        return cls(
            batch_size=settings.SCHEDULER_BATCH_SIZE,
            grace=timedelta(seconds=settings.SCHEDULER_MISFIRE_GRACE),
            recovery_window=timedelta(seconds=settings.SCHEDULER_RECOVERY_WINDOW),
            max_catchup=settings.SCHEDULER_MAX_CATCHUP,
            args_limits=settings.args_limits,
            fire_ahead=timedelta(seconds=settings.SCHEDULER_FIRE_AHEAD),
        )

    @property
    def misfire(self) -> MisfireSettings:
        return MisfireSettings(self.grace, self.recovery_window, self.max_catchup)


class BadSchedule(Exception):
    """A schedule whose stored data cannot be evaluated (tampered cron, job gone, arguments
    over the size limits)."""


def resolve(
    schedule: Row[Any], catalog: Catalog, limits: tuple[int, int] | None = None
) -> tuple[cron.CronSpec, int]:
    """The compiled expression and the job's max attempts, or BadSchedule with the reason.

    Arguments over the size `limits` (stored before the limits or lowered since) stop here:
    each fire would copy them into a run that can only fail.
    """
    try:
        spec = cron.validate(schedule.cron, schedule.time_zone)
        job = catalog.get(schedule.job)
    except (cron.CronError, UnknownJobError) as error:
        raise BadSchedule(str(error)) from None
    too_large = size_errors(schedule.args, limits or DEFAULTS.args_limits)
    if too_large:
        raise BadSchedule(str(ArgsError(too_large)))
    # The claim does not read the scope: the database ties it to tenant_id (scope_tenant).
    refused = job.scope_problem("tenant" if schedule.tenant_id is not None else "system")
    if refused:
        raise BadSchedule(refused)
    return spec, job.max_attempts


def tick_once(
    session: Session, catalog: Catalog, settings: TickSettings, now: datetime | None = None
) -> TickResult:
    """One batch: claims up to `batch_size` due schedules and commits their runs and advance,
    then logs it (one INFO line, each fire at DEBUG): no log line is written inside the
    transaction, so a log sink that blocks never holds the claimed schedules' locks."""
    result = TickResult()
    lines: list[LogLine] = []
    with write_transaction(session):
        claimed_at, due = claims.claim_due_schedules(
            session, now, settings.batch_size, settings.fire_ahead
        )
        if claimed_at is None or not due:
            return result
        now = claimed_at
        result.claimed = len(due)
        busy = claims.schedules_with_unfinished_runs(
            session, (s.id for s in due if s.overlap_policy == "skip")
        )
        calendars = batch_calendars(session, due)
        rows: list[dict[str, Any]] = []
        advances: list[dict[str, Any]] = []
        deactivations: list[dict[str, Any]] = []
        for schedule in due:
            try:
                spec, max_attempts = resolve(schedule, catalog, settings.args_limits)
            except BadSchedule as error:
                why = f"schedule deactivated: {error}"
                failed = PlannedRun(schedule.next_run_at, "schedule", "failed")
                rows.append(run_row(schedule, failed, now, 1, why))
                deactivations.append({"id": schedule.id, "active": False, "inactive_reason": why})
                line = {"schedule_id": schedule.id, "reason": why}
                lines.append((logging.WARNING, "schedule_deactivated", line))
                continue
            rules = calendars.get(schedule.calendar_id) if schedule.calendar_id else None
            fire = fire_of(schedule.next_run_at, spec, rules is not None, schedule.calendar_policy)
            if fire > now:
                plan = plan_ahead(spec, fire)
            else:
                plan = plan_fires(
                    spec,
                    first_due=fire,
                    now=now,
                    policy=schedule.misfire_policy,
                    settings=settings.misfire,
                )
            running = schedule.id in busy
            jitter = effective_jitter(
                schedule.jitter_seconds,
                schedule.tenant_jitter_seconds,
                schedule.cron,
                schedule.time_zone,
                now,
            )
            policy = schedule.calendar_policy
            planned = apply_calendar(plan.runs, rules, policy, spec, now)
            lines.extend(shift_lines(schedule.id, planned))
            queued = [run for run, _ in planned]
            for run, reason in apply_overlap(queued, schedule.overlap_policy, running):
                rows.append(run_row(schedule, run, now, max_attempts, reason, jitter))
            next_run_at = take_at(rules, policy, plan.next_run_at, spec, plan.last_fire)
            advances.append(
                {"id": schedule.id, "next_run_at": next_run_at, "last_run_at": plan.last_fire}
            )
        inserted = runs.insert_runs(session, rows)
        for row in rows:
            action = count_run(result, row, (row["schedule_id"], row["scheduled_for"]) in inserted)
            if action and log.isEnabledFor(logging.DEBUG):  # which schedules: DEBUG only
                at = row["scheduled_for"].isoformat()
                which = dict(schedule_id=row["schedule_id"], scheduled_for=at, reason=row["error"])
                lines.append((logging.DEBUG, action, which))
        claims.advance_schedules(session, advances)
        claims.advance_schedules(session, deactivations)
    for level, action, fields in lines:  # committed
        log.log(level, action, extra={"action": action, **fields})
    counts = {name: getattr(result, name) for name in BATCH_COUNTS}
    log.info("tick_batch", extra={"action": "tick_batch", **counts})
    return result


def batch_calendars(session: Session, due: Sequence[Row[Any]]) -> dict[int, BusinessCalendar]:
    """The rules of the batch's calendars: none read when no schedule has one, and only those
    changed since they were cached otherwise."""
    versions = {s.calendar_id: s.calendar_updated_at for s in due if s.calendar_id is not None}
    return load_calendars(session, versions) if versions else {}


def shift_lines(schedule_id: int, planned: list[tuple[PlannedRun, CalendarPlan]]) -> list[LogLine]:
    """A log line for each fire its calendar moved (the run's own row keeps no reason: its
    outcome's error replaces it)."""
    return [
        (
            logging.INFO,
            "fire_shifted",
            {
                "schedule_id": schedule_id,
                "scheduled_for": run.scheduled_for.isoformat(),
                "available_at": fate.available_at.isoformat(),
                "reason": fate.reason,
            },
        )
        for run, fate in planned
        if fate.kind == "shifted"
    ]


def plan_ahead(spec: cron.CronSpec, fire: datetime) -> FirePlan:
    """A fire claimed before its time (SCHEDULER_FIRE_AHEAD): its run, queued now, waits for
    its fire time like any other (available_at). One fire per claim: a later one inside the
    window is claimed by the next tick."""
    return FirePlan(
        runs=[PlannedRun(fire, "schedule", "queued")],
        next_run_at=spec.next_fire_after(fire),
        last_fire=fire,
    )


def count_run(result: TickResult, row: dict[str, Any], recorded: bool) -> str | None:
    """Counts a run of the batch in `result`; returns its DEBUG line's action (None: failed)."""
    if not recorded:
        result.already_recorded += 1
        return "fire_already_recorded"
    if row["status"] == "queued":
        result.queued += 1
        result.first_start = earliest_of(result.first_start, row["available_at"])
        return "schedule_fired"
    if row["status"] == "skipped":
        result.skipped += 1
        return "fire_skipped"
    result.failed += 1
    return None


def tick(
    session: Session,
    catalog: Catalog,
    settings: TickSettings,
    now: datetime | None = None,
    between_batches: Callable[[], None] | None = None,
) -> TickResult:
    """Repeats batches until nothing is due, calling `between_batches` after each full one (the
    worker renews its leases there: a backlog can take longer than a lease)."""
    total = TickResult()
    while True:
        batch = tick_once(session, catalog, settings, now)
        total.add(batch)
        if batch.claimed < settings.batch_size:
            return total
        if between_batches is not None:
            between_batches()
