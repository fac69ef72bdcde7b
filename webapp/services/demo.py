"""Demo schedules and their history, so that `make run` shows what the product does.

The history is what the tick and the workers would have left: every run is a fire time of its
schedule's cron, planned by the misfire policy exactly as the tick plans it (same rows, same
idempotency keys), with the output and error text that the job itself produces. Lags and
durations vary, pseudo-randomly but seeded by the schedule's key, so screenshots are stable.
Three stories are told on the way: the worker was down for 40 minutes (a catch-up run stands
for the missed fires), a worker was lost in the middle of a run (retried; attempt 2
succeeded), and a fire came while a Run now was still running (skipped by the overlap policy).

Idempotent: a tenant that has the demo schedules already is left alone. Schedules go through
the service layer (validated and audited like any other).
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from webapp import cron
from webapp.catalog import Catalog, JobSpec
from webapp.catalog.current import current_catalog
from webapp.config import settings
from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import Schedule, Tenant, User
from webapp.scheduler import runs
from webapp.scheduler.execution import run_job
from webapp.scheduler.leases import LeasedRun
from webapp.scheduler.misfire import plan_fires
from webapp.scheduler.run_rows import apply_overlap, manual_run_row, run_row
from webapp.scheduler.runs import retry_delay
from webapp.scheduler.tick import TickSettings
from webapp.services import scope
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleInput, create_schedule, pause_schedule

DEMO_SCHEDULES = (
    ScheduleInput(
        name="Morning hello",
        key="morning-hello",
        job="demo.echo",
        args={"message": "Good morning!"},
        cron="30 7 * * 1-5",
        time_zone="Europe/Berlin",
    ),
    ScheduleInput(
        name="Every seven minutes",
        key="every-seven-minutes",
        job="demo.echo",
        args={"message": "still alive"},
        cron="*/7 * * * *",
        time_zone="Europe/Berlin",
    ),
    ScheduleInput(
        name="Slow report",
        key="slow-report",
        job="demo.sleep",
        args={"seconds": 3},
        cron="0 */2 * * *",
        time_zone="Europe/Berlin",
        overlap_policy="skip",
    ),
    ScheduleInput(
        name="Flaky import",
        key="flaky-import",
        job="demo.fail",
        args={"message": "upstream returned 503"},
        cron="15 3 * * *",
        time_zone="America/New_York",
        misfire_policy="skip",
    ),
)
PAUSED = "flaky-import"

HISTORY = timedelta(days=1)
MAX_HISTORY = timedelta(days=14)
MIN_FIRES = 3  # rare crons (weekdays, daily) go back further, until they have this many
# The worker was down from 9 hours ago, 10 minutes past the hour, for 40 minutes: between two
# full hours, so that hourly and two-hourly schedules are not in it, only the frequent ones.
DOWNTIME_AGO = timedelta(hours=9)
DOWNTIME = timedelta(minutes=40)
# Fires more recent than this would still be queued or running: the worker of `make run`
# fires them (next_run_at is left there).
SETTLED = timedelta(seconds=30)


def seed_demo_schedules(tenant: Tenant, admin: User, now: datetime) -> int:
    """Creates the demo schedules and their history; returns how many schedules it made."""
    keys = [data["key"] for data in DEMO_SCHEDULES]
    exists = scope.schedules_of(tenant.id).where(Schedule.key.in_(keys))
    if db.session.scalar(exists.limit(1)) is not None:
        return 0
    if "demo.echo" not in current_catalog():
        return 0  # SCHEDULER_DEMO_JOBS is off
    actor = Actor.for_user(admin)
    schedules = [create_schedule(tenant, data, actor, now) for data in DEMO_SCHEDULES]
    history = DemoHistory(
        catalog=current_catalog(),
        settings=TickSettings.of(settings()),
        lock_ttl=settings().lock_ttl,
        now=now,
        tenant=tenant,
        admin=admin,
    )
    with write_transaction(db.session):
        rows = [row for schedule in schedules for row in history.runs_of(schedule)]
        rows.sort(key=lambda row: (row["queued_at"], row["scheduled_for"]))  # ids follow time
        runs.insert_runs(db.session(), rows)
    for schedule in schedules:
        if schedule.key == PAUSED:
            pause_schedule(schedule, actor)
    return len(schedules)


@dataclass
class DemoHistory:
    """The runs a schedule would have had, as the tick and a worker record them."""

    catalog: Catalog
    settings: TickSettings
    lock_ttl: timedelta
    now: datetime
    tenant: Tenant
    admin: User
    outcomes: dict[str, tuple[str | None, str]] = field(default_factory=dict)

    @property
    def downtime(self) -> tuple[datetime, datetime]:
        hour = (self.now - DOWNTIME_AGO).replace(minute=0, second=0, microsecond=0)
        start = hour + timedelta(minutes=10)
        return start, start + DOWNTIME

    def runs_of(self, schedule: Schedule) -> list[dict[str, Any]]:
        """The schedule's history; advances its next_run_at and last_run_at as the tick does."""
        spec = cron.validate(schedule.cron, schedule.time_zone)
        job = self.catalog.get(schedule.job)
        rng = random.Random(schedule.key)
        end = self.now - SETTLED
        fires = spec.fire_times_between(first_day(spec, end), end, 10_000)
        down_start, down_end = self.downtime
        usual = [fire for fire in fires if not down_start <= fire <= down_end]
        # The stories, each on a fire of its own, away from the ends of the history.
        overlapped, lost = None, set()
        if usual and schedule.overlap_policy == "skip":
            overlapped = usual[len(usual) // 2]
        if usual and job.max_attempts > 1:
            lost = {usual[len(usual) // 4], usual[3 * len(usual) // 4]} - {overlapped}
        rows: list[dict[str, Any]] = []
        fire = fires[0] if fires else None
        while fire is not None and fire <= end:
            missed = down_start <= fire <= down_end
            tick_at = (down_end if missed else fire) + seconds(rng, 0.02, 0.95)
            if fire == overlapped:
                rows.append(self.run_now(schedule, job, rng, running_at=tick_at))
            plan = plan_fires(
                spec,
                first_due=fire,
                now=tick_at,
                policy=schedule.misfire_policy,
                settings=self.settings.misfire,
            )
            # A Run now of the overlapped fire is still running: the overlap policy skips it.
            running = fire == overlapped
            for planned, reason in apply_overlap(plan.runs, schedule.overlap_policy, running):
                row = run_row(schedule, planned, tick_at, job.max_attempts, reason)
                if row["status"] == "queued":
                    self.execute(row, job, rng, worker_lost=fire in lost)
                rows.append(row)
            schedule.last_run_at, schedule.next_run_at = plan.last_fire, plan.next_run_at
            fire = plan.next_run_at
        return rows

    def run_now(
        self, schedule: Schedule, job: JobSpec, rng: random.Random, running_at: datetime
    ) -> dict[str, Any]:
        """A Run now pressed shortly before `running_at` and still running then."""
        queued_at = running_at - seconds(rng, 0.6, 1.4)
        key = f"manual:{uuid.UUID(int=rng.getrandbits(128), version=4)}"
        row = manual_run_row(
            schedule, queued_at, queued_at, job.max_attempts, self.admin.id, idempotency_key=key
        )
        self.execute(row, job, rng, worker_lost=False)
        return row

    def execute(
        self, row: dict[str, Any], job: JobSpec, rng: random.Random, worker_lost: bool
    ) -> None:
        """Runs the attempts a worker would, and records the outcome on the row."""
        error, output = self.outcome(job, row)
        started = row["available_at"] + seconds(rng, 0.004, 0.15)
        attempt = 1
        if worker_lost:
            # The worker died during attempt 1; its lease expired and the reaper queued the run
            # again (available at once), and another worker took it.
            row["available_at"] = started + self.lock_ttl + seconds(rng, 0.1, 1.0)
            started = row["available_at"] + seconds(rng, 0.01, 0.3)
            attempt = 2
        while True:
            finished = started + self.duration(job, row, rng)
            if error is None or attempt >= job.max_attempts:
                break
            # A failed attempt waits for its backoff (the worker's `decide`), then runs again.
            row["available_at"] = finished + retry_delay(job.retry_backoff, attempt)
            started = row["available_at"] + seconds(rng, 0.01, 0.3)
            attempt += 1
        row.update(
            status="failed" if error else "succeeded",
            attempt=attempt,
            started_at=started,
            finished_at=finished,
            output=output,
            error=error,
        )

    def outcome(self, job: JobSpec, row: dict[str, Any]) -> tuple[str | None, str]:
        """What the job reports (error, output): it is run once, here, as a worker runs it."""
        args = dict(row["args"])
        if "seconds" in args:
            args["seconds"] = 0  # demo.sleep prints nothing, however long it sleeps
        key = f"{job.name} {json.dumps(args, sort_keys=True)}"
        if key not in self.outcomes:
            leased = LeasedRun(
                id=0,
                tenant_id=self.tenant.id,
                tenant_slug=self.tenant.slug,
                schedule_id=row["schedule_id"],
                schedule_key=None,
                job=job.name,
                args=args,
                trigger=row["trigger"],
                scheduled_for=row["scheduled_for"],
                idempotency_key=row["idempotency_key"],
                attempt=1,
                max_attempts=job.max_attempts,
                started_at=self.now,
            )
            result = run_job(leased, self.catalog, settings().job_settings(), db.session())
            self.outcomes[key] = (result.error.shown if result.error else None, result.output)
        return self.outcomes[key]

    @staticmethod
    def duration(job: JobSpec, row: dict[str, Any], rng: random.Random) -> timedelta:
        """The job's own time (demo.sleep's seconds) and a few milliseconds of overhead."""
        return timedelta(seconds=float(row["args"].get("seconds", 0))) + seconds(rng, 0.002, 0.04)


def first_day(spec: cron.CronSpec, end: datetime) -> datetime:
    """A day back, or as many days as it takes for MIN_FIRES fires (at most MAX_HISTORY)."""
    start = end - HISTORY
    while len(spec.fire_times_between(start, end, MIN_FIRES)) < MIN_FIRES:
        if end - start >= MAX_HISTORY:
            break
        start -= timedelta(days=1)
    return start


def seconds(rng: random.Random, low: float, high: float) -> timedelta:
    return timedelta(seconds=rng.uniform(low, high))
