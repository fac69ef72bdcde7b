"""The health checks behind /healthz and `flask scheduler health`: each one bounded statement or
two, each answering ok or not with one line that says why."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import func, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from webapp.models import Run, Schedule, Tenant, Worker
from webapp.run_rules import overdue_runs, overdue_schedule_ids, schedule_late
from webapp.services.metrics import COUNT_LIMIT, RECENT_WORKERS_LIMIT, capped_count


@dataclass(frozen=True)
class Check:
    ok: bool
    line: str  # what `scheduler health` prints after "ok " or "fail "
    details: dict[str, Any] = field(default_factory=dict)  # what /healthz adds to {"ok": ...}

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, **self.details}


def unreachable_reason(error: SQLAlchemyError, session: Session) -> str:
    """The driver's first line, without the password should a driver ever print it."""
    reason = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
    password = session.get_bind().engine.url.password
    return reason.replace(str(password), "***") if password else reason


def database_check(session: Session) -> Check:
    try:
        session.execute(text("SELECT 1"))
    except SQLAlchemyError as error:
        session.rollback()
        reason = unreachable_reason(error, session)
        # /healthz answers anyone: the kind of error only, not the host or the message.
        return Check(False, f"database unreachable: {reason}", {"error": type(error).__name__})
    return Check(True, "database reachable")


@functools.cache
def head_revision(directory: str) -> str | None:
    """The newest migration in the folder: read once, it changes only with a deployment."""
    return ScriptDirectory(directory).get_current_head()


def migrations_check(session: Session, directory: str) -> Check:
    head = head_revision(directory)
    try:
        current = MigrationContext.configure(session.connection()).get_current_revision()
    except SQLAlchemyError:
        session.rollback()
        current = None
    details = {"current": current, "head": head}
    if current == head:
        return Check(True, f"migrations at head ({head})", details)
    return Check(
        False,
        f"migrations at {current or 'none'}, not at head {head}: "
        "run `flask --app webapp db upgrade`",
        details,
    )


def ago(seconds: float) -> str:
    """`40 s ago`, `12 min ago`, `3 h ago`, `2 days ago`."""
    if seconds < 120:
        return f"{int(seconds)} s ago"
    if seconds < 7200:
        return f"{int(seconds // 60)} min ago"
    if seconds < 2 * 86400:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86400)} days ago"


def heartbeat_check(
    session: Session, now: datetime, max_age: timedelta, celery: bool = False
) -> Check:
    """A worker that has not stopped heartbeated within `max_age`: a scheduler worker (it
    ticks and leases; a row from before workers.kind counts), or with `celery` a Celery worker
    of the fleet (SCHEDULER_EXECUTOR=celery: without one, what is sent never runs)."""
    kind = func.coalesce(Worker.kind, "thread")
    what = "Celery worker" if celery else "worker"
    newest = session.execute(
        select(Worker.id, Worker.hostname, Worker.last_heartbeat_at, Worker.stopped_at)
        .order_by(Worker.last_heartbeat_at.desc())
        .limit(1)
        .where(Worker.stopped_at.is_(None))
        .where((kind == "celery-worker") if celery else (kind != "celery-worker"))
        .where(
            Worker.id.in_(select(Worker.id).order_by(Worker.id.desc()).limit(RECENT_WORKERS_LIMIT))
        )
    ).first()
    limit = int(max_age.total_seconds())
    if newest is None:
        return Check(False, f"no {what} heartbeat in the last {limit} s (no {what} is running)")
    age = (now - newest.last_heartbeat_at).total_seconds()
    where = f"{what} {newest.id} on {newest.hostname}, {ago(max(age, 0))}"
    if age > max_age.total_seconds():
        return Check(False, f"no {what} heartbeat in the last {limit} s (newest: {where})")
    return Check(True, f"{what} heartbeat fresh ({where})")


def overdue_schedules_check(session: Session, now: datetime, grace: timedelta) -> Check:
    count = capped_count(session, select(overdue_schedule_ids(now, grace).subquery()))
    seconds = int(grace.total_seconds())
    if not count:
        return Check(True, f"no schedule overdue beyond the {seconds} s grace")
    named = select(Tenant.slug, Schedule.key).outerjoin(Tenant, Tenant.id == Schedule.tenant_id)
    late = session.execute(
        named.add_columns(Schedule.next_run_at)
        .where(schedule_late(now, grace))
        .order_by(Schedule.next_run_at)
        .limit(1)
    ).first()
    if late is not None:
        due = ago((now - late.next_run_at).total_seconds())
        oldest = f"{late.slug or 'system'}/{late.key} due {due}"
    else:  # overdue for a run that has not started
        waiting = overdue_runs(now, grace, Run.schedule_id, Run.available_at).subquery()
        run = session.execute(
            named.add_columns(waiting.c.available_at)
            .join(waiting, waiting.c.schedule_id == Schedule.id)
            .where(Schedule.active)
            .order_by(waiting.c.available_at)
            .limit(1)
        ).one()
        since = ago((now - run.available_at).total_seconds())
        oldest = f"{run.slug or 'system'}/{run.key}, a run not started, could start {since}"
    counted = f"{count}+" if count >= COUNT_LIMIT else str(count)
    plural = "schedule" if count == 1 else "schedules"
    return Check(
        False, f"{counted} {plural} overdue beyond the {seconds} s grace (oldest: {oldest})"
    )


def overdue_runs_check(session: Session, now: datetime, grace: timedelta) -> Check:
    count = capped_count(session, select(overdue_runs(now, grace, Run.available_at).subquery()))
    seconds = int(grace.total_seconds())
    if not count:
        return Check(True, f"no run waiting to start beyond the {seconds} s grace")
    waiting = overdue_runs(now, grace, Run.available_at).subquery()
    oldest = session.execute(select(func.min(waiting.c.available_at))).scalar_one()
    counted = f"{count}+" if count >= COUNT_LIMIT else str(count)
    plural = "run" if count == 1 else "runs"
    return Check(
        False,
        f"{counted} {plural} waiting to start beyond the {seconds} s grace "
        f"(oldest: could start {ago((now - oldest).total_seconds())})",
    )
