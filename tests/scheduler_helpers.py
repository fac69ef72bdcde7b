"""Factories for the scheduler tests: schedules and runs written straight to the database."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import select

from webapp.catalog.current import current_catalog
from webapp.extensions import db
from webapp.models import Run, Schedule
from webapp.scheduler.tick import TickSettings


def add_schedule(tenant_id: int | None, key: str, next_run_at: datetime, **fields: Any) -> Schedule:
    values: dict[str, Any] = {
        "tenant_id": tenant_id, "scope": "tenant" if tenant_id else "system", "key": key,
        "name": key, "job": "demo.echo", "args": {"message": key}, "cron": "0 * * * *",
        "time_zone": "UTC", "next_run_at": next_run_at,
    }
    values.update(fields)
    schedule = Schedule(**values)
    db.session.add(schedule)
    db.session.commit()
    return schedule


def add_run(tenant_id: int | None, available_at: datetime, **fields: Any) -> Run:
    values: dict[str, Any] = {
        "tenant_id": tenant_id, "job": "demo.echo", "args": {"message": "hello"},
        "trigger": "manual", "scheduled_for": available_at, "available_at": available_at,
        "queued_at": available_at, "idempotency_key": f"manual:{available_at.isoformat()}:"
        f"{fields.get('job', 'demo.echo')}:{len(all_runs())}",
    }
    values.update(fields)
    run = Run(**values)
    db.session.add(run)
    db.session.commit()
    return run


def all_runs() -> list[Run]:
    db.session.expire_all()
    return list(db.session.scalars(select(Run).order_by(Run.scheduled_for, Run.id)))


def settings(**changes: Any) -> TickSettings:
    base = TickSettings.from_config(current_app.config)
    values = {**vars(base), **changes}
    if "grace" in changes and not isinstance(changes["grace"], timedelta):
        values["grace"] = timedelta(seconds=changes["grace"])
    return TickSettings(**values)


def catalog() -> Any:
    return current_catalog()
