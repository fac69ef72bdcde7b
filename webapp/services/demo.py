"""Demo schedules and their history, so that `make run` shows what the product does.

The history is made by the worker's own steps on a fake clock, stepped from a day ago (a few days
for rare crons) to the present and given to each step as its `now`: the tick (the misfire and
overlap policies), the lease with its start marks, the job run through the catalog, its outcome
stored (retries, backoff, failures in a row), the reaper, and a Run now through the service. It
tells three stories: the worker was down for 40 minutes (a catch-up run stands for the missed
fires), a worker was lost in the middle of a run (the reaper queues it again; attempt 2
succeeds), and a fire came while a Run now was still running (skipped by the overlap policy).
Lags and durations are seeded by what they belong to, so screenshots are stable; `demo.sleep`
runs with 0 seconds and its `seconds` are the attempt's duration on the fake clock.

Idempotent: a tenant that has the demo schedules already is left alone. The steps see the whole
database, so the history is played only where they would touch nothing else (`quiet`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from sqlalchemy import and_, func, or_, select, update

from webapp import cron
from webapp.catalog.current import current_catalog
from webapp.config import settings
from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import Run, Schedule, Tenant, User, Worker, run_status_is
from webapp.scheduler import claims
from webapp.scheduler.execution import FinishedRun, decide, run_job, store_outcomes
from webapp.scheduler.leases import LeasedRun, lease_with_starts, reap_once
from webapp.scheduler.tick import TickSettings, tick
from webapp.services import scope
from webapp.services.audit import Actor
from webapp.services.schedules import (
    ScheduleInput,
    create_schedule,
    pause_schedule,
    run_now,
)

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
# The schedule of the stories of a lost worker and of a Run now still running at a fire.
STORIES = "slow-report"
SLEEP_JOB = "demo.sleep"  # runs with 0 seconds; its `seconds` are the fake clock's duration

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
CONCURRENCY = 4


def seed_demo_schedules(tenant: Tenant, admin: User, now: datetime) -> int:
    """Creates the demo schedules and their history; returns how many schedules it made."""
    keys = [data["key"] for data in DEMO_SCHEDULES]
    exists = scope.schedules(tenant.id).where(Schedule.key.in_(keys))
    if db.session.scalar(exists.limit(1)) is not None:
        return 0
    if "demo.echo" not in current_catalog():
        return 0  # SCHEDULER_DEMO_JOBS is off
    actor = Actor.for_user(admin)
    end = now - SETTLED
    play = quiet(now, end)
    down = (now - DOWNTIME_AGO).replace(minute=10, second=0, microsecond=0)
    downtime = (down, down + DOWNTIME)
    starts = {
        data["key"]: history_start(data, end, downtime) if play else now for data in DEMO_SCHEDULES
    }
    schedules = [
        create_schedule(tenant, data, actor, starts[data["key"]]) for data in DEMO_SCHEDULES
    ]
    if play:
        worker = FakeClockWorker(actor, min(starts.values()), downtime)
        worker.play(next(s for s in schedules if s.key == STORIES), starts[STORIES], end)
    for schedule in schedules:
        if schedule.key == PAUSED:
            pause_schedule(schedule, actor)
    return len(schedules)


def quiet(now: datetime, end: datetime) -> bool:
    """Whether the worker's steps, played back to `end`, would touch nothing but the demo's:
    no other schedule due, no run waiting for a lease or a reaper, and no live worker that
    would fire the demo's schedules itself (they are created in the past)."""
    ahead = TickSettings.of(settings()).fire_ahead
    due = select(Schedule.id).where(Schedule.active, Schedule.next_run_at <= end + ahead)
    waiting = select(Run.id).where(
        or_(
            and_(run_status_is("queued"), Run.available_at <= end),
            and_(run_status_is("running"), Run.locked_until <= end),
        )
    )
    alive = select(Worker.id).where(
        Worker.stopped_at.is_(None), Worker.last_heartbeat_at >= now - 2 * settings().lock_ttl
    )
    return all(db.session.scalar(query.limit(1)) is None for query in (due, waiting, alive))


def history_start(
    data: ScheduleInput, end: datetime, downtime: tuple[datetime, datetime]
) -> datetime:
    """A day back, or as many days as it takes for MIN_FIRES fires (at most MAX_HISTORY) while
    the worker was up: a daily fire in the downtime is not fired (misfire "skip") or fired late,
    whatever the hour `flask demo` runs at."""
    spec = cron.validate(data["cron"], data["time_zone"])
    start = end - HISTORY

    def fires_while_up() -> int:
        fires = spec.fire_times_between(start, end, MIN_FIRES + 1)
        return sum(1 for fire in fires if not downtime[0] <= fire < downtime[1])

    while fires_while_up() < MIN_FIRES:
        if end - start >= MAX_HISTORY:
            break
        start -= timedelta(days=1)
    return start


@dataclass
class FakeClockWorker:
    """A worker's rounds on a fake clock: the tick, the reaper, the lease, the jobs and their
    outcomes, each step given the round's `now`."""

    actor: Actor
    now: datetime
    downtime: tuple[datetime, datetime]
    settings: TickSettings = field(default_factory=lambda: TickSettings.of(settings()))
    worker_id: int = 0
    # Attempts under way, stored by the first round after their end (as a worker's flush).
    running: list[FinishedRun] = field(default_factory=list)
    lost: tuple[int, datetime] | None = None  # the fire whose worker dies during its job
    lost_until: datetime | None = None  # when that attempt's lease runs out
    run_now_at: datetime | None = None

    def play(self, stories: Schedule, since: datetime, end: datetime) -> None:
        """The rounds from now to `end`, by a worker that starts and stops with them.
        `stories`: the schedule of the lost worker and the Run now; its history starts at
        `since`."""
        fires = cron.validate(stories.cron, stories.time_zone).fire_times_between(since, end, 99)
        overlapped = fires[len(fires) // 2]
        self.run_now_at = overlapped - lag(f"run now {overlapped}", 0.6, 1.4)
        self.lost = stories.id, fires[len(fires) // 4]
        with write_transaction(db.session) as session:
            worker = Worker(hostname="demo", pid=0, kind="thread", concurrency=CONCURRENCY)
            worker.started_at = worker.last_heartbeat_at = self.now
            session.add(worker)
            session.flush()
            self.worker_id = worker.id
        moment = self.next_moment(end)
        while moment is not None:
            self.round(moment, stories)
            moment = self.next_moment(end)
        stopped = max([self.now, *(done.finished_at for done in self.running)])
        self.store(self.running)
        with write_transaction(db.session) as session:
            stop = {"last_heartbeat_at": stopped, "stopped_at": stopped}
            session.execute(update(Worker).where(Worker.id == self.worker_id).values(stop))

    def next_moment(self, end: datetime) -> datetime | None:
        """When the next round comes: the first of a due fire (when a tick would see it), a
        queued run's start (a retry), an expired lease, the Run now; never while the worker is
        down. None: the history is done."""
        session = db.session()
        moments = [d.outcome.retry_at for d in self.running if d.outcome.retry_at is not None]
        if self.lost_until is not None:
            moments.append(self.lost_until + lag(f"reap {self.lost_until}", 0.1, 1.0))
        fire = claims.earliest_next_run(session)
        waiting = select(func.min(Run.available_at)).where(
            run_status_is("queued"), Run.available_at > self.now
        )
        starts = [
            None if fire is None else fire + lag(f"tick {fire}", 0.02, 0.95),
            session.scalar(waiting),
            self.run_now_at,
        ]
        moments += [start for start in starts if start is not None and start <= end]
        moment = min(moments, default=None)
        if moment is None:
            return None
        down_start, down_end = self.downtime
        if down_start <= moment < down_end:
            moment = down_end + lag(f"tick {down_end}", 0.02, 0.95)
        return max(moment, self.now)

    def round(self, now: datetime, stories: Schedule) -> None:
        """What one round of the worker does at `now`: stores the attempts that have ended,
        reaps expired leases (the rounds between find none), fires what is due and leases what
        may start."""
        session = db.session()
        self.now = now
        self.store([done for done in self.running if done.finished_at <= now])
        if self.lost_until is not None and self.lost_until < now:
            self.lost_until = None
            reap_once(session, now)
        if self.run_now_at is not None and self.run_now_at <= now:
            self.run_now_at = None
            run_now(stories, self.actor, now)
        tick(session, current_catalog(), self.settings, now)
        self.now = now + lag(f"lease {now}", 0.004, 0.15)
        lease = lease_with_starts(
            session,
            self.worker_id,
            self.now,
            settings().lock_ttl,
            CONCURRENCY - len(self.running),
            [],
            CONCURRENCY,
            settings().SCHEDULER_MAX_RUNNING,
        )
        for run in lease.runs:
            if (run.schedule_id, run.scheduled_for) == self.lost and run.attempt == 1:
                # Its worker dies during the job: nothing is stored, the lease runs out.
                self.lost_until = self.now + settings().lock_ttl
            else:
                self.running.append(self.execute(run))

    def store(self, done: list[FinishedRun]) -> None:
        if done:
            store_outcomes(db.session(), self.worker_id, done)
            self.running = [attempt for attempt in self.running if attempt not in done]

    def execute(self, run: LeasedRun) -> FinishedRun:
        """Runs the job through the catalog as a worker's slot does; the attempt ends on the
        fake clock, after the job's own time (a sleep's seconds) and a few milliseconds."""
        assert run.started_at is not None
        seconds = float(run.args.get("seconds", 0)) if run.job == SLEEP_JOB else 0.0
        job = replace(run, args={**run.args, "seconds": 0}) if seconds else run
        session = db.session()
        result = run_job(job, current_catalog(), settings().job_settings(), session)
        session.rollback()  # as execution.run_attempt: nothing the job left open goes on
        took = timedelta(seconds=seconds) + lag(
            f"{run.job} {run.scheduled_for} {run.attempt}", 0.002, 0.04
        )
        finished_at = run.started_at + took
        return FinishedRun(run, decide(run, result, finished_at), run.started_at, finished_at)


def lag(seed: str, low: float, high: float) -> timedelta:
    """A duration between `low` and `high` seconds, the same for the same seed."""
    return timedelta(seconds=random.Random(seed).uniform(low, high))
