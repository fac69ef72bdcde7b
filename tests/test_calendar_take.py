"""A schedule taken early by its calendar (previous_business_day) whose calendar or policy is
then changed, on both databases: its next_run_at goes back to the fire it stands for, so the
tick (which looks for the fire behind next_run_at only under previous_business_day, to keep the
tick over calendars cheap: bench.calendar_tick) records that fire, as the new policy says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask

from tests.conftest import World, make_schedule
from tests.scheduler_helpers import all_runs, catalog, settings
from webapp.api.openapi import EXAMPLE_CALENDAR
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Schedule
from webapp.scheduler.tick import tick
from webapp.services import calendars, transfer
from webapp.services.audit import Actor
from webapp.services.schedules import update_schedule

CLI = Actor.cli()
SAVED = datetime(2027, 7, 1, tzinfo=UTC)
# "The last business day of the month": July 31st 2027 is a Saturday, so Friday the 30th.
FIRE = datetime(2027, 7, 31, 9, tzinfo=UTC)
EARLY = datetime(2027, 7, 30, 9, tzinfo=UTC)


def month_end(world: World) -> Schedule:
    calendars.create_calendar(world.alpha, EXAMPLE_CALENDAR, CLI, utcnow())
    schedule = make_schedule(
        world.alpha,
        "Report",
        by=world.alice,
        now=SAVED,
        cron="0 9 L * *",
        calendar="us-business",
        calendar_policy="previous_business_day",
    )
    assert schedule.next_run_at == EARLY
    return schedule


def document(schedule: Schedule, **changes: Any) -> dict[str, Any]:
    return {
        "key": schedule.key,
        "name": schedule.name,
        "job": schedule.job,
        "args": schedule.args,
        "cron": schedule.cron,
        "time_zone": schedule.time_zone,
        "calendar": schedule.calendar,
        "calendar_policy": schedule.calendar_policy,
        **changes,
    }


def fired(schedule_id: int) -> list[tuple[str, datetime, str | None]]:
    return [
        (r.status, r.scheduled_for, r.error) for r in all_runs() if r.schedule_id == schedule_id
    ]


@pytest.mark.parametrize(
    "changes",
    [{"calendar_policy": "skip"}, {"calendar": None}],
    ids=["policy", "calendar"],
)
def test_an_edit_takes_the_fire_again_as_the_calendar_now_says(
    app: Flask, world: World, changes: dict[str, Any]
) -> None:
    schedule = month_end(world)
    update_schedule(schedule, document(schedule, **changes), CLI, SAVED + timedelta(days=1))
    db.session.expire_all()
    assert db.session.get(Schedule, schedule.id).next_run_at == FIRE  # type: ignore[union-attr]
    tick(db.session(), catalog(), settings(), EARLY + timedelta(seconds=1))
    assert fired(schedule.id) == []  # nothing on Friday any more
    tick(db.session(), catalog(), settings(), FIRE + timedelta(seconds=1))
    [(status, scheduled_for, error)] = fired(schedule.id)
    assert scheduled_for == FIRE
    if "calendar_policy" in changes:
        assert status == "skipped" and error is not None and error.startswith("Saturday")
    else:
        assert status == "queued"


def test_an_import_that_changes_the_policy_does_the_same(app: Flask, world: World) -> None:
    schedule = month_end(world)
    text = transfer.json.dumps([document(schedule, calendar_policy="next_business_day")])
    transfer.import_schedules(world.alpha, text, CLI, SAVED + timedelta(days=1))
    db.session.expire_all()
    assert db.session.get(Schedule, schedule.id).next_run_at == FIRE  # type: ignore[union-attr]


def test_an_edit_that_keeps_the_calendar_keeps_the_early_take(app: Flask, world: World) -> None:
    schedule = month_end(world)
    update_schedule(schedule, document(schedule, name="Month end"), CLI, SAVED)
    db.session.expire_all()
    assert db.session.get(Schedule, schedule.id).next_run_at == EARLY  # type: ignore[union-attr]
