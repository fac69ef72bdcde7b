"""Demo schedules and run history for the panel, so that `make run` has something to show.

Idempotent: a tenant that has schedules already is left alone. Schedules go through the service
layer (validated and audited like any other); the history is inserted as a worker would leave it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select

from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import Run, Schedule, Tenant, User
from webapp.services.audit import Actor
from webapp.services.catalog import current_catalog
from webapp.services.schedules import ScheduleInput, create_schedule, pause_schedule

DEMO_SCHEDULES = (
    ScheduleInput(
        name="Morning hello",
        job="demo.echo",
        args={"message": "Good morning!"},
        cron="30 7 * * 1-5",
        time_zone="Europe/Berlin",
    ),
    ScheduleInput(
        name="Every seven minutes",
        job="demo.echo",
        args={"message": "still alive"},
        cron="*/7 * * * *",
        time_zone="Europe/Berlin",
    ),
    ScheduleInput(
        name="Slow report",
        job="demo.sleep",
        args={"seconds": 3},
        cron="0 */2 * * *",
        time_zone="Europe/Berlin",
        overlap_policy="skip",
    ),
    ScheduleInput(
        name="Flaky import",
        job="demo.fail",
        args={"message": "upstream returned 503"},
        cron="15 3 * * *",
        time_zone="America/New_York",
        misfire_policy="skip",
    ),
)


def seed_demo_schedules(tenant: Tenant, admin: User, now: datetime) -> int:
    """Creates the demo schedules and a day of history; returns how many schedules it made."""
    exists = select(Schedule.id).where(Schedule.tenant_id == tenant.id).limit(1)
    if db.session.scalar(exists) is not None:
        return 0
    if "demo.echo" not in current_catalog():
        return 0  # SCHEDULER_DEMO_JOBS is off
    actor = Actor.for_user(admin)
    schedules = [create_schedule(tenant, data, actor, now) for data in DEMO_SCHEDULES]
    pause_schedule(schedules[3], actor)
    with write_transaction(db.session):
        history = sorted(
            (now - timedelta(hours=hours, minutes=7 * number), number, schedule)
            for number, schedule in enumerate(schedules[:3])
            for hours in range(1, 25, 3)
        )
        for index, (fire, _, schedule) in enumerate(history):
            failed = schedule.job == "demo.sleep" and index % 7 == 3
            started = fire + timedelta(seconds=1 + index % 3)
            db.session.add(
                Run(
                    tenant_id=tenant.id,
                    schedule_id=schedule.id,
                    job=schedule.job,
                    args=schedule.args,
                    trigger="schedule",
                    scheduled_for=fire,
                    idempotency_key=f"demo:{schedule.id}:{fire.isoformat()}",
                    status="failed" if failed else "succeeded",
                    attempt=1,
                    queued_at=fire,
                    available_at=fire,
                    started_at=started,
                    finished_at=started
                    + timedelta(seconds=0.2 + 2.8 * (schedule.job == "demo.sleep")),
                    output=f"{schedule.args.get('message', 'slept')}\n",
                    error="TimeoutError: the report database did not answer" if failed else None,
                )
            )
    return len(schedules)
