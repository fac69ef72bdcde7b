"""The operator area's data and actions: every tenant's health at a glance, the workers and the
leases they hold, viewing a tenant and releasing a lease (both audited).

Each page costs a fixed number of statements, whatever the number of tenants or runs: counts are
GROUP BY queries joined to the list, never one query per row.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, case, func, select, type_coerce
from sqlalchemy.orm import Session

from webapp import database
from webapp.database import UTCDateTime, write_transaction
from webapp.extensions import db
from webapp.models import Run, Schedule, Tenant, Worker, run_status_is
from webapp.run_rules import run_overdue, schedule_overdue
from webapp.scheduler import runs
from webapp.services import audit
from webapp.services.audit import Actor

DAY = timedelta(hours=24)
HOUR = timedelta(hours=1)
# The workers page lists the live workers first, then the most recently stopped: every restart
# adds a row, so an old installation has many.
MAX_WORKERS = 200
MAX_EXPIRED_LEASES = 100

WorkerState = Literal["running", "stale", "stopped"]


def database_now() -> datetime:
    """The database's clock: the one heartbeats, leases and fire times are written with."""
    return database.database_now(db.session())


class NotFound(LookupError):
    """No such worker or run: the page answers 404."""


class ReleaseRefused(Exception):
    """The lease may not be released now; the message says why (the page answers 409)."""


@dataclass(frozen=True)
class TenantHealth:
    id: int
    slug: str
    name: str
    schedules: int
    failed_last_day: int
    overdue_schedules: int
    overdue_runs: int
    running: int
    max_running: int | None  # the tenant's cap, its own or SCHEDULER_MAX_RUNNING; None: none
    own_cap: bool  # whether it is the tenant's own (`tenant set --max-running`)


def count_where(condition: ColumnElement[bool]) -> ColumnElement[int]:
    """COUNT of the group's rows matching `condition` (portable: no FILTER clause needed)."""
    return func.count(case((condition, 1)))


def tenant_health(
    now: datetime, grace: timedelta, default_max_running: int | None = None
) -> list[TenantHealth]:
    """Every tenant with its schedules, runs failed in the last 24 hours, overdue schedules
    (models.schedule_overdue), overdue queued runs (models.run_overdue) and its runs running
    against its cap (`default_max_running` where it has none): one statement."""
    schedules = (
        select(
            Schedule.tenant_id,
            func.count().label("total"),
            count_where(schedule_overdue(now, grace)).label("overdue"),
        )
        .where(Schedule.tenant_id.is_not(None))
        .group_by(Schedule.tenant_id)
        .subquery()
    )
    failed = (
        select(Run.tenant_id, func.count().label("total"))
        .where(Run.status == "failed", Run.finished_at >= now - DAY)
        .group_by(Run.tenant_id)
        .subquery()
    )
    overdue_runs = (
        select(Run.tenant_id, func.count().label("total"))
        .where(run_overdue(now, grace))
        .group_by(Run.tenant_id)
        .subquery()
    )
    running = (
        select(Run.tenant_id, func.count().label("total"))
        .where(run_status_is("running"))
        .group_by(Run.tenant_id)
        .subquery()
    )
    rows = db.session.execute(
        select(
            Tenant.id,
            Tenant.slug,
            Tenant.name,
            func.coalesce(schedules.c.total, 0),
            func.coalesce(failed.c.total, 0),
            func.coalesce(schedules.c.overdue, 0),
            func.coalesce(overdue_runs.c.total, 0),
            func.coalesce(running.c.total, 0),
            Tenant.max_running,
        )
        .outerjoin(schedules, schedules.c.tenant_id == Tenant.id)
        .outerjoin(failed, failed.c.tenant_id == Tenant.id)
        .outerjoin(overdue_runs, overdue_runs.c.tenant_id == Tenant.id)
        .outerjoin(running, running.c.tenant_id == Tenant.id)
        .order_by(Tenant.name, Tenant.id)
    )
    health = []
    for id_, slug, name, schedules_, failed_, overdue, late_runs, running_, own in rows:
        health.append(
            TenantHealth(
                id_,
                slug,
                name,
                schedules_,
                failed_,
                overdue,
                late_runs,
                running_,
                max_running=default_max_running if own is None else own,
                own_cap=own is not None,
            )
        )
    return health


def find_tenant(tenant_id: int) -> Tenant:
    tenant = db.session.get(Tenant, tenant_id)
    if tenant is None:
        raise NotFound(f"no tenant {tenant_id}")
    return tenant


def record_tenant_view(tenant: Tenant, actor: Actor, now: datetime) -> None:
    """An operator opened a tenant's pages: the tenant's own audit log says who, and when."""
    with write_transaction(db.session) as session:
        audit.record_event(
            session,
            actor,
            "operator.viewed_tenant",
            ("tenant", tenant.id, tenant.name),
            tenant_id=tenant.id,
            at=now,
        )


@dataclass(frozen=True)
class HeldRun:
    """A running run and its lease, as the workers page lists it."""

    id: int
    tenant_id: int | None
    tenant_slug: str | None
    job: str
    attempt: int
    started_at: datetime | None
    locked_until: datetime | None
    worker_id: int | None
    hostname: str | None

    @property
    def status(self) -> str:
        """Always running (what formatting.started_moment reads: without a start, leased)."""
        return "running"

    def expired(self, now: datetime) -> bool:
        return self.locked_until is not None and self.locked_until < now


@dataclass
class WorkerStatus:
    worker: Worker
    state: WorkerState
    heartbeat_age: timedelta
    done_last_hour: int = 0
    failed_last_hour: int = 0
    held: list[HeldRun] = field(default_factory=list)

    @property
    def in_flight(self) -> int:
        return len(self.held)


@dataclass
class WorkersOverview:
    now: datetime  # the database's clock
    workers: list[WorkerStatus]
    more_workers: bool  # older stopped workers exist beyond MAX_WORKERS
    expired: list[HeldRun]  # running runs whose lease expired, not yet reaped


def stale_before(now: datetime, lock_ttl: timedelta) -> datetime:
    """A worker silent since before this is stale: it renews three times per TTL, so two TTLs
    without a heartbeat is no late round but a dead or cut-off process."""
    return now - 2 * lock_ttl


@dataclass(frozen=True)
class FleetAlarm:
    """No worker of a kind is alive: the banner of every operator page."""

    what: str  # "workers" (they tick and lease), "Celery workers" (they run what is sent)
    last_heartbeat_at: datetime | None  # the newest heartbeat of any of them; None: none ever


def fleet_alarms(session: Session, lock_ttl: timedelta, celery: bool) -> list[FleetAlarm]:
    """The installation-wide alarms: no scheduler worker alive, and with `celery`
    (SCHEDULER_EXECUTOR=celery) no Celery worker alive; two statements over the newest
    MAX_WORKERS rows (alive and stale as the workers page decides them)."""
    now = database.database_now(session)
    recent = (
        select(Worker.kind, Worker.last_heartbeat_at, Worker.stopped_at)
        .order_by(Worker.id.desc())
        .limit(MAX_WORKERS)
        .subquery()
    )
    alive = and_(
        recent.c.stopped_at.is_(None), recent.c.last_heartbeat_at >= stale_before(now, lock_ttl)
    )
    kinds = {
        "workers": func.coalesce(recent.c.kind, "thread") != "celery-worker",
        "Celery workers": recent.c.kind == "celery-worker",
    }
    if not celery:
        del kinds["Celery workers"]
    columns: list[ColumnElement[Any]] = []
    for kind in kinds.values():
        newest = func.max(case((kind, recent.c.last_heartbeat_at)))
        columns += [count_where(and_(alive, kind)), type_coerce(newest, UTCDateTime())]
    row = session.execute(select(*columns)).one()
    return [
        FleetAlarm(what, row[2 * index + 1])
        for index, what in enumerate(kinds)
        if row[2 * index] == 0
    ]


def worker_state(worker: Worker, now: datetime, lock_ttl: timedelta) -> WorkerState:
    if worker.stopped_at is not None:
        return "stopped"
    return "stale" if worker.last_heartbeat_at < stale_before(now, lock_ttl) else "running"


HELD_COLUMNS = (
    Run.id,
    Run.tenant_id,
    Tenant.slug,
    Run.job,
    Run.attempt,
    Run.started_at,
    Run.locked_until,
    Run.worker_id,
    Worker.hostname,
)


# Running runs with their tenant's slug and their worker's host.
RUNNING_RUNS = (
    select(*HELD_COLUMNS)
    .outerjoin(Tenant, Tenant.id == Run.tenant_id)
    .outerjoin(Worker, Worker.id == Run.worker_id)
    .where(run_status_is("running"))
)


def workers_overview(session: Session, lock_ttl: timedelta) -> WorkersOverview:
    """The workers (live ones first), what each holds and did in the last hour, and the
    expired leases no reaper has taken back yet; four statements. Staleness is decided on the
    database's clock, the one that heartbeats and leases are written with."""
    now = database.database_now(session)
    rows = list(
        session.scalars(
            select(Worker)
            .order_by(Worker.stopped_at.is_not(None), Worker.id.desc())
            .limit(MAX_WORKERS + 1)
        )
    )
    statuses = {
        worker.id: WorkerStatus(
            worker, worker_state(worker, now, lock_ttl), now - worker.last_heartbeat_at
        )
        for worker in rows[:MAX_WORKERS]
    }
    ids = list(statuses)
    if ids:
        finished = session.execute(
            select(
                Run.worker_id,
                count_where(Run.status == "succeeded"),
                count_where(Run.status == "failed"),
            )
            .where(Run.worker_id.in_(ids), Run.finished_at >= now - HOUR)
            .group_by(Run.worker_id)
        )
        for worker_id, done, failed in finished:
            assert worker_id is not None  # the query's worker_id IN (ids)
            statuses[worker_id].done_last_hour = done
            statuses[worker_id].failed_last_hour = failed
        held = session.execute(RUNNING_RUNS.where(Run.worker_id.in_(ids)).order_by(Run.id))
        by_worker: dict[int, list[HeldRun]] = defaultdict(list)
        for row in held:
            by_worker[row.worker_id].append(HeldRun(*row))
        for worker_id, runs in by_worker.items():
            statuses[worker_id].held = runs
    expired = session.execute(
        RUNNING_RUNS.where(Run.locked_until < now)
        .order_by(Run.locked_until, Run.id)
        .limit(MAX_EXPIRED_LEASES)
    )
    return WorkersOverview(
        now=now,
        workers=list(statuses.values()),
        more_workers=len(rows) > MAX_WORKERS,
        expired=[HeldRun(*row) for row in expired],
    )


@dataclass(frozen=True)
class Released:
    run_id: int
    tenant_id: int | None
    worker_id: int
    hostname: str


def whole_seconds(age: timedelta) -> int:
    return max(0, int(age.total_seconds()))


def release_lease(worker_id: int, run_id: int, actor: Actor, lock_ttl: timedelta) -> Released:
    """Puts a run held by a dead or silent worker back in the queue without waiting for the
    reaper (as a worker that stops does: the attempt is not spent), with its audit row, in
    one transaction. Refused while the lease is live: its worker heartbeats and it has not
    expired, so the job may be running right now."""
    with write_transaction(db.session) as session:
        now = database.database_now(session)
        worker = session.get(Worker, worker_id)
        if worker is None:
            raise NotFound(f"There is no worker {worker_id}.")
        run = session.get(Run, run_id)
        if run is None:
            raise NotFound(f"There is no run {run_id}.")
        if run.status != "running" or run.worker_id != worker.id:
            raise ReleaseRefused(
                f"Run {run.id} is not held by worker {worker.id} (it is {run.status}): "
                "nothing to release."
            )
        state = worker_state(worker, now, lock_ttl)
        expired = run.locked_until is None or run.locked_until < now
        if state == "running" and not expired:
            age = whole_seconds(now - worker.last_heartbeat_at)
            raise ReleaseRefused(
                f"worker {worker.id} on {worker.hostname} is still heartbeating "
                f"(last {age} s ago): its lease is live"
            )
        before = {
            "status": run.status,
            "worker_id": worker.id,
            "locked_until": run.locked_until.isoformat() if run.locked_until else None,
            "attempt": run.attempt,
        }
        if not runs.release_run(session, run.id, worker.id, now, stale_before(now, lock_ttl)):
            raise ReleaseRefused(  # its worker renewed it between our read and the update
                f"worker {worker.id} on {worker.hostname} renewed the lease just now: it is live"
            )
        audit.record_event(
            session,
            actor,
            "operator.released_lease",
            ("run", run.id, run.job),
            tenant_id=run.tenant_id,
            before=before,
            after={
                "status": "queued",
                "worker_id": None,
                "locked_until": None,
                "attempt": run.attempt - 1,
            },
            at=now,
        )
        return Released(run.id, run.tenant_id, worker.id, worker.hostname)
