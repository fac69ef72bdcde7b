"""A schedule's business calendar at the tick, on both databases: a closed fire skipped with
its reason (never run), or shifted to the next or previous business day with its fire time
kept; two fires shifted onto the same time are one run; a maintenance window's end; misfire
recovery, fire-ahead, jitter and a backfill through the same rule; a calendar's change applies
to the next fire."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask

from tests.conftest import WorkerFactory, World, make_schedule
from tests.panel_helpers import counted_statements
from tests.scheduler_helpers import all_runs, catalog, settings
from webapp.calendar_models import Calendar
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Schedule
from webapp.scheduler import calendar_rules
from webapp.scheduler.jitter import jitter_offset
from webapp.scheduler.leases import lease_once
from webapp.scheduler.tick import TickResult, tick
from webapp.services import backfill, calendars
from webapp.services.audit import Actor
from webapp.services.calendar_schema import DayOffIn
from webapp.services.schedules import update_schedule

CLI = Actor.cli()
# July 2027: Thursday the 1st; Saturday the 3rd, Sunday the 4th; the calendar `ops` closes
# weekends and Monday the 5th ("Company day"), and Wednesday the 7th from 09:00 to 11:00.
SAT = datetime(2027, 7, 3, 9, tzinfo=UTC)
SUN = datetime(2027, 7, 4, 9, tzinfo=UTC)
TUE = datetime(2027, 7, 6, 9, tzinfo=UTC)
FRI = datetime(2027, 7, 2, 9, tzinfo=UTC)
SECONDS = timedelta(seconds=20)


def ops_calendar(world: World, **fields: Any) -> Calendar:
    data = {
        "key": "ops",
        "name": "Operations",
        "closed_weekdays": ["sat", "sun"],
        "days_off": [{"from": "2027-07-05", "to": "2027-07-05", "label": "Company day"}],
        "windows": [{"from": "2027-07-07T09:00", "to": "2027-07-07T11:00", "label": "DB upgrade"}],
        **fields,
    }
    return calendars.create_calendar(world.alpha, data, CLI, utcnow())


def with_calendar(
    world: World, cron: str, fire: datetime, policy: str, calendar: Calendar | None = None
) -> Schedule:
    calendar = calendar or ops_calendar(world)
    return make_schedule(
        world.alpha, "report", fire, cron=cron, calendar_id=calendar.id, calendar_policy=policy
    )


def run_tick(now: datetime, **changes: object) -> TickResult:
    return tick(db.session(), catalog(), settings(**changes), now)


def runs_of(schedule: Schedule) -> list[tuple[str, datetime, datetime, str | None]]:
    return [
        (run.status, run.scheduled_for, run.available_at, run.error)
        for run in all_runs()
        if run.schedule_id == schedule.id
    ]


def next_run_at(schedule: Schedule) -> datetime | None:
    db.session.expire_all()
    fresh = db.session.get(Schedule, schedule.id)
    assert fresh is not None
    return fresh.next_run_at


def leased(make_worker: WorkerFactory, now: datetime) -> list[datetime]:
    worker = make_worker()
    taken = lease_once(db.session(), worker.id, now, timedelta(minutes=5), 10)
    return [run.scheduled_for for run in taken]


def test_skip_records_a_skipped_run_with_the_reason_and_never_runs_it(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    us = ops_calendar(world, key="us", country="US", days_off=[], windows=[])
    christmas = datetime(2027, 12, 25, 9, tzinfo=UTC)
    schedule = with_calendar(world, "0 9 * * *", christmas, "skip", us)
    result = run_tick(christmas + SECONDS)
    assert (result.queued, result.skipped) == (0, 1)
    reason = "Christmas Day (US holidays), closed in calendar 'us'"
    assert runs_of(schedule) == [("skipped", christmas, christmas + SECONDS, reason)]
    assert leased(make_worker, christmas + timedelta(days=3)) == []
    assert next_run_at(schedule) == christmas + timedelta(days=1)


def test_next_business_day_keeps_the_fire_time_and_starts_on_the_next_open_day(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = with_calendar(world, "0 9 * * 6", SAT, "next_business_day")
    assert run_tick(SAT + SECONDS).queued == 1
    assert runs_of(schedule) == [("queued", SAT, TUE, None)]  # Monday is a company day
    assert leased(make_worker, TUE - timedelta(seconds=1)) == []
    assert leased(make_worker, TUE) == [SAT]


def test_previous_business_day_is_taken_early_and_starts_on_the_previous_open_day(
    app: Flask, world: World
) -> None:
    ops_calendar(world)
    schedule = make_schedule(
        world.alpha,
        "Weekly report",
        by=world.alice,
        now=datetime(2027, 6, 28, tzinfo=UTC),
        cron="0 9 * * 6",
        calendar="ops",
        calendar_policy="previous_business_day",
    )
    assert next_run_at(schedule) == FRI  # Saturday's fire is taken on Friday
    assert run_tick(FRI - timedelta(minutes=1)).claimed == 0
    assert run_tick(FRI + SECONDS).queued == 1
    assert runs_of(schedule) == [("queued", SAT, FRI + SECONDS, None)]
    assert next_run_at(schedule) == FRI + timedelta(days=7)
    assert run_tick(SAT + SECONDS).claimed == 0  # its fire time comes: recorded already


def test_a_previous_business_day_already_past_runs_at_once_and_says_so(
    app: Flask, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    schedule = with_calendar(world, "0 9 * * 6", SAT, "previous_business_day")
    with caplog.at_level(logging.INFO, logger="webapp.scheduler"):
        run_tick(SAT + SECONDS)
    assert runs_of(schedule) == [("queued", SAT, SAT + SECONDS, None)]
    (line,) = [r for r in caplog.records if r.getMessage() == "fire_shifted"]
    assert "moved to 2027-07-02 09:00 (already past: it runs at once)" in line.reason  # type: ignore[attr-defined]


def test_two_fires_shifted_onto_the_same_time_are_one_run(app: Flask, world: World) -> None:
    schedule = with_calendar(world, "0 9 * * 6,0", SAT, "next_business_day")
    run_tick(SAT + SECONDS)
    run_tick(SUN + SECONDS)
    merged = "Sunday, closed in calendar 'ops': moved to 2027-07-06 09:00, which already has a run"
    assert runs_of(schedule) == [
        ("queued", SAT, TUE, None),
        ("skipped", SUN, SUN + SECONDS, merged),
    ]


def test_a_fire_shifted_onto_one_of_its_own_fires_is_that_run(app: Flask, world: World) -> None:
    schedule = with_calendar(world, "0 9 * * *", SAT, "next_business_day")
    run_tick(SAT + SECONDS)
    (status, _, _, reason) = runs_of(schedule)[0]
    assert status == "skipped" and reason is not None
    assert reason.endswith("moved to 2027-07-06 09:00, which already has a run")


def test_a_maintenance_window_moves_the_run_to_its_end_or_skips_it(
    app: Flask, world: World
) -> None:
    calendar = ops_calendar(world)
    wednesday = datetime(2027, 7, 7, 10, tzinfo=UTC)
    moved = with_calendar(world, "0 10 * * 3", wednesday, "next_business_day", calendar)
    skipped = make_schedule(
        world.alpha, "skipped", wednesday, cron="0 10 * * 3", calendar_id=calendar.id
    )
    run_tick(wednesday + SECONDS)
    assert runs_of(moved) == [("queued", wednesday, wednesday + timedelta(hours=1), None)]
    reason = "DB upgrade, 2027-07-07 09:00 to 11:00, closed in calendar 'ops'"
    assert runs_of(skipped) == [("skipped", wednesday, wednesday + SECONDS, reason)]


def test_jitter_adds_to_the_shifted_start(app: Flask, world: World) -> None:
    schedule = with_calendar(world, "0 9 * * 6", SAT, "next_business_day")
    db.session.get(Schedule, schedule.id).jitter_seconds = 600  # type: ignore[union-attr]
    db.session.commit()
    run_tick(SAT + SECONDS)
    offset = timedelta(seconds=jitter_offset(schedule.id, SAT, 600))
    assert runs_of(schedule) == [("queued", SAT, TUE + offset, None)]


def test_a_fire_queued_ahead_starts_at_its_shifted_time(app: Flask, world: World) -> None:
    schedule = with_calendar(world, "0 9 * * 6", SAT, "next_business_day")
    run_tick(SAT - timedelta(minutes=3), fire_ahead=timedelta(minutes=5))
    assert runs_of(schedule) == [("queued", SAT, TUE, None)]


def test_misfire_recovery_respects_the_calendar(app: Flask, world: World) -> None:
    schedule = with_calendar(world, "0 9 * * *", FRI, "skip")
    # The tick was down from Friday to Tuesday: fire_all catches up on each fire.
    db.session.get(Schedule, schedule.id).misfire_policy = "fire_all"  # type: ignore[union-attr]
    db.session.commit()
    run_tick(TUE + SECONDS, recovery_window=timedelta(days=7), max_catchup=10)
    assert [(status, fire.day, reason) for status, fire, _, reason in runs_of(schedule)] == [
        ("queued", 2, None),
        ("skipped", 3, "Saturday, closed in calendar 'ops'"),
        ("skipped", 4, "Sunday, closed in calendar 'ops'"),
        ("skipped", 5, "Company day, closed in calendar 'ops'"),
        ("queued", 6, None),
    ]


def test_a_backfill_respects_the_calendar(app: Flask, world: World) -> None:
    schedule = with_calendar(world, "0 9 * * *", TUE, "skip")
    result = backfill.backfill(
        schedule, "2027-07-02T00:00", "2027-07-05T23:00", CLI, TUE + timedelta(days=1)
    )
    assert result.queued == 1
    assert [status for status, *_ in runs_of(schedule)] == [
        "queued",
        "skipped",
        "skipped",
        "skipped",
    ]


def test_a_change_of_the_calendar_applies_to_the_next_fire(app: Flask, world: World) -> None:
    calendar = ops_calendar(world)
    thursday = datetime(2027, 7, 8, 9, tzinfo=UTC)
    schedule = with_calendar(world, "0 9 * * *", TUE, "skip", calendar)
    run_tick(TUE + SECONDS)  # the calendar is read, and cached
    later = TUE + timedelta(hours=1)
    calendars.add_entries(
        calendar, [DayOffIn.model_validate({"from": "2027-07-08", "label": "Flood"})], CLI, later
    )
    db.session.get(Schedule, schedule.id).next_run_at = thursday  # type: ignore[union-attr]
    db.session.commit()
    run_tick(thursday + SECONDS)
    assert runs_of(schedule)[-1] == (
        "skipped",
        thursday,
        thursday + SECONDS,
        "Flood, closed in calendar 'ops'",
    )


def test_schedules_without_a_calendar_fire_as_before(app: Flask, world: World) -> None:
    ops_calendar(world)
    plain = make_schedule(world.alpha, "plain", SAT, cron="0 9 * * 6")
    run_tick(SAT + SECONDS)
    assert runs_of(plain) == [("queued", SAT, SAT + SECONDS, None)]


def test_the_tick_reads_a_calendar_only_when_a_schedule_has_one_and_it_changed(
    app: Flask, world: World
) -> None:
    calendar_rules.CACHE.clear()
    plain = make_schedule(world.alpha, "plain", TUE, cron="0 9 * * *")
    with counted_statements() as plain_tick:
        run_tick(TUE + SECONDS)
    calendar = ops_calendar(world)
    with_calendar(world, "0 9 * * *", TUE + timedelta(days=1), "skip", calendar)
    wednesday = TUE + timedelta(days=1)
    with counted_statements() as first:
        run_tick(wednesday + SECONDS)
    with counted_statements() as cached:
        run_tick(wednesday + timedelta(days=1, seconds=20))
    closed = DayOffIn.model_validate({"from": "2027-12-01", "label": "Later"})
    calendars.add_entries(calendar, [closed], CLI, utcnow())
    with counted_statements() as changed:
        run_tick(wednesday + timedelta(days=2, seconds=20))

    def entries_read(statements: list[str]) -> int:
        return sum("FROM calendar_entries" in statement for statement in statements)

    assert [entries_read(s) for s in (plain_tick, first, cached, changed)] == [0, 1, 0, 1]
    assert len(plain_tick) == len(cached)  # a cached calendar costs no statement
    assert next_run_at(plain) is not None


def test_an_edit_after_a_fire_was_taken_early_takes_it_early_again(
    app: Flask, world: World
) -> None:
    ops_calendar(world)
    schedule = make_schedule(
        world.alpha,
        "Weekly report",
        by=world.alice,
        now=datetime(2027, 6, 28, tzinfo=UTC),
        cron="0 9 * * 6",
        calendar="ops",
        calendar_policy="previous_business_day",
    )
    run_tick(FRI + SECONDS)
    edited_at = FRI + timedelta(hours=1)
    data = {
        "name": "Weekly summary",
        "job": "demo.echo",
        "args": {"message": "Weekly report"},
        "cron": "0 9 * * 6",
        "time_zone": "UTC",
        "calendar": "ops",
        "calendar_policy": "previous_business_day",
    }
    update_schedule(db.session.get(Schedule, schedule.id), data, CLI, edited_at)  # type: ignore[arg-type]
    assert runs_of(schedule) == []  # the run queued ahead of its fire time is taken back
    run_tick(edited_at + SECONDS)
    assert runs_of(schedule) == [("queued", SAT, edited_at + SECONDS, None)]
    assert next_run_at(schedule) == FRI + timedelta(days=7)
