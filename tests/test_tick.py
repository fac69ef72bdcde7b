"""The tick, step by step with an explicit now, on both databases."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import select

from tests.conftest import World, make_run, make_schedule
from tests.scheduler_helpers import all_runs, catalog, settings
from webapp.extensions import db
from webapp.models import Schedule
from webapp.scheduler.tick import TickResult, tick, tick_once

NOW = datetime(2026, 3, 7, 12, 0, 20, tzinfo=UTC)


def run_tick(now: datetime = NOW, **changes: object) -> TickResult:
    return tick(db.session(), catalog(), settings(**changes), now)


def reload(schedule: Schedule) -> Schedule:
    db.session.expire_all()
    fresh = db.session.get(Schedule, schedule.id)
    assert fresh is not None
    return fresh


def test_a_due_schedule_fires_once_and_advances(app: Flask, world: World) -> None:
    schedule = make_schedule(world.alpha, "hourly", datetime(2026, 3, 7, 12, tzinfo=UTC))
    result = run_tick()
    assert (result.claimed, result.queued) == (1, 1)
    (run,) = all_runs()
    assert (run.status, run.trigger, run.scheduled_for, run.fires_covered) == (
        "queued",
        "schedule",
        datetime(2026, 3, 7, 12, tzinfo=UTC),
        1,
    )
    assert run.idempotency_key == f"schedule:{schedule.id}:2026-03-07T12:00:00Z"
    assert (run.job, run.args, run.tenant_id) == (
        "demo.echo",
        {"message": "hourly"},
        world.alpha.id,
    )
    fresh = reload(schedule)
    assert fresh.next_run_at == datetime(2026, 3, 7, 13, tzinfo=UTC)
    assert fresh.last_run_at == datetime(2026, 3, 7, 12, tzinfo=UTC)
    assert run_tick().claimed == 0
    assert len(all_runs()) == 1


def test_schedules_not_yet_due_and_paused_ones_do_not_fire(app: Flask, world: World) -> None:
    make_schedule(world.alpha, "later", datetime(2026, 3, 7, 13, tzinfo=UTC))
    make_schedule(world.alpha, "paused", datetime(2026, 3, 7, 11, tzinfo=UTC), active=False)
    assert run_tick().claimed == 0
    assert all_runs() == []


def test_it_skips_a_fire_already_recorded(
    app: Flask, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    fire = datetime(2026, 3, 7, 12, tzinfo=UTC)
    schedule = make_schedule(world.alpha, "hourly", fire)
    make_run(
        world.alpha,
        scheduled_for=fire,
        schedule_id=schedule.id,
        trigger="schedule",
        idempotency_key="recorded-by-another-worker",
    )
    with caplog.at_level(logging.DEBUG, logger="webapp.scheduler"):
        result = run_tick()
    assert (result.queued, result.already_recorded) == (0, 1)
    assert [r.idempotency_key for r in all_runs()] == ["recorded-by-another-worker"]
    assert reload(schedule).next_run_at == datetime(2026, 3, 7, 13, tzinfo=UTC)
    assert [(r.levelname, vars(r)["action"]) for r in caplog.records] == [
        ("DEBUG", "fire_already_recorded"),
        ("INFO", "tick_batch"),
    ]
    assert vars(caplog.records[1])["already_recorded"] == 1


def test_each_batch_logs_one_info_line_saying_how_many_fired_and_each_fire_at_debug(
    app: Flask, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """5 due schedules in batches of 2: one `tick_batch` line per batch at INFO, and which
    schedules fired only at DEBUG (a fire per line at INFO was most of a herd's log)."""
    due = [
        make_schedule(world.alpha, f"s{n}", datetime(2026, 3, 7, 12, tzinfo=UTC)) for n in range(5)
    ]
    busy = make_schedule(
        world.alpha, "busy", datetime(2026, 3, 7, 12, tzinfo=UTC), overlap_policy="skip"
    )
    make_run(busy, scheduled_for=NOW, trigger="manual")  # unfinished: its fire is skipped
    with caplog.at_level(logging.DEBUG, logger="webapp.scheduler"):
        assert run_tick(batch_size=2).queued == 5
    info = [vars(r) for r in caplog.records if r.levelno >= logging.INFO]
    batches = [(r["action"], r["claimed"], r["queued"], r["skipped"]) for r in info]
    assert sorted(batches) == [("tick_batch", 2, 1, 1)] + [("tick_batch", 2, 2, 0)] * 2
    debug = [vars(r) for r in caplog.records if r.levelno == logging.DEBUG]
    fired = {r["schedule_id"] for r in debug if r["action"] == "schedule_fired"}
    skipped = [r["schedule_id"] for r in debug if r["action"] == "fire_skipped"]
    assert (fired, skipped) == ({s.id for s in due}, [busy.id])


def test_fire_once_coalesces_missed_fires_into_one_run(app: Flask, world: World) -> None:
    schedule = make_schedule(world.alpha, "hourly", datetime(2026, 3, 7, 8, tzinfo=UTC))
    run_tick()
    (run,) = all_runs()
    assert (run.trigger, run.scheduled_for, run.fires_covered, run.status) == (
        "catchup",
        datetime(2026, 3, 7, 12, tzinfo=UTC),
        5,
        "queued",
    )
    assert reload(schedule).next_run_at == datetime(2026, 3, 7, 13, tzinfo=UTC)


def test_fire_all_queues_every_missed_fire_within_the_bounds(app: Flask, world: World) -> None:
    make_schedule(
        world.alpha, "hourly", datetime(2026, 3, 7, 6, tzinfo=UTC), misfire_policy="fire_all"
    )
    run_tick(max_catchup=3)
    runs = all_runs()
    assert [(r.scheduled_for.hour, r.status, r.trigger, r.fires_covered) for r in runs] == [
        (8, "skipped", "catchup", 3),
        (9, "queued", "catchup", 1),
        (10, "queued", "catchup", 1),
        (11, "queued", "catchup", 1),
        (12, "queued", "schedule", 1),
    ]
    assert runs[0].error == (
        "skipped 3 missed fire times outside the recovery window (86400 s, at most 3 runs)"
    )


def test_fire_all_respects_the_recovery_window(app: Flask, world: World) -> None:
    make_schedule(
        world.alpha, "hourly", datetime(2026, 3, 7, 6, tzinfo=UTC), misfire_policy="fire_all"
    )
    run_tick(recovery_window=timedelta(hours=2))  # 10:00 is 2 h 20 s old at 12:00:20
    assert [(r.scheduled_for.hour, r.status, r.fires_covered) for r in all_runs()] == [
        (10, "skipped", 5),
        (11, "queued", 1),
        (12, "queued", 1),
    ]


def test_skip_records_one_skipped_run_saying_how_many(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "hourly", datetime(2026, 3, 7, 9, tzinfo=UTC), misfire_policy="skip"
    )
    run_tick(now=datetime(2026, 3, 7, 12, 30, tzinfo=UTC))
    (run,) = all_runs()
    assert (run.status, run.fires_covered, run.scheduled_for) == (
        "skipped",
        4,
        datetime(2026, 3, 7, 12, tzinfo=UTC),
    )
    assert run.error == "skipped 4 missed fire times (misfire policy: skip)"
    assert reload(schedule).next_run_at == datetime(2026, 3, 7, 13, tzinfo=UTC)


def test_skip_still_fires_the_fire_time_that_is_on_time(app: Flask, world: World) -> None:
    make_schedule(
        world.alpha, "hourly", datetime(2026, 3, 7, 11, tzinfo=UTC), misfire_policy="skip"
    )
    run_tick()
    assert [(r.scheduled_for.hour, r.status) for r in all_runs()] == [
        (11, "skipped"),
        (12, "queued"),
    ]


def test_overlap_skip_records_a_skipped_run_while_an_earlier_one_runs(
    app: Flask, world: World
) -> None:
    schedule = make_schedule(
        world.alpha, "hourly", datetime(2026, 3, 7, 12, tzinfo=UTC), overlap_policy="skip"
    )
    make_run(
        world.alpha,
        scheduled_for=NOW - timedelta(hours=1),
        schedule_id=schedule.id,
        status="running",
    )
    run_tick()
    fired = all_runs()[-1]
    assert (fired.status, fired.error) == (
        "skipped",
        "skipped: an earlier run of this schedule is still queued or running",
    )


def test_overlap_allow_queues_beside_a_running_run(app: Flask, world: World) -> None:
    schedule = make_schedule(world.alpha, "hourly", datetime(2026, 3, 7, 12, tzinfo=UTC))
    make_run(
        world.alpha,
        scheduled_for=NOW - timedelta(hours=1),
        schedule_id=schedule.id,
        status="running",
    )
    run_tick()
    assert all_runs()[-1].status == "queued"


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"cron": "61 * * * *"}, "schedule deactivated: minute 61 is out of range 0-59"),
        ({"job": "os.system"}, "schedule deactivated: job 'os.system' is not in the catalog"),
        ({"time_zone": "Mars/Olympus"}, "schedule deactivated: unknown time zone 'Mars/Olympus'"),
        # Zones that ZoneInfo opens but saving refuses: the tick applies the same check.
        ({"time_zone": "posix/UTC"}, "schedule deactivated: unknown time zone 'posix/UTC'"),
        ({"time_zone": "right/UTC"}, "schedule deactivated: unknown time zone 'right/UTC'"),
        ({"time_zone": "localtime"}, "schedule deactivated: unknown time zone 'localtime'"),
        # Arguments stored before the size limits: not copied into a run at every fire.
        (
            {"args": {"message": "x" * 5000}},
            "schedule deactivated: args.message: should be at most 4096 bytes, not 5000",
        ),
    ],
)
def test_a_tampered_schedule_fails_once_is_deactivated_and_others_still_fire(
    app: Flask, world: World, fields: dict[str, Any], reason: str
) -> None:
    bad = make_schedule(world.alpha, "bad", datetime(2026, 3, 7, 11, tzinfo=UTC), **fields)
    make_schedule(world.alpha, "good", datetime(2026, 3, 7, 12, tzinfo=UTC))
    result = run_tick()
    assert (result.failed, result.queued) == (1, 1)
    failed = next(r for r in all_runs() if r.schedule_id == bad.id)
    assert (failed.status, failed.error) == ("failed", reason)
    fresh = reload(bad)
    assert (fresh.active, fresh.inactive_reason) == (False, reason)
    assert run_tick(now=NOW + timedelta(days=1)).failed == 0


def test_stored_arguments_that_are_not_an_object_are_measured_without_a_crash(
    app: Flask, world: World
) -> None:
    small = make_schedule(world.alpha, "small", datetime(2026, 3, 7, 12, tzinfo=UTC), args=[1])
    large = ["x" * 20_000]
    big = make_schedule(world.alpha, "big", datetime(2026, 3, 7, 12, tzinfo=UTC), args=large)
    result = run_tick()
    assert (result.queued, result.failed) == (1, 1)
    assert reload(small).active  # its run fails when executed: not an object
    assert reload(big).inactive_reason == (
        "schedule deactivated: args: should be at most 16384 bytes as JSON in all, not 20004"
    )


def test_a_system_job_in_a_tenant_schedule_is_deactivated(app: Flask, world: World) -> None:
    bad = make_schedule(
        world.alpha,
        "prune",
        datetime(2026, 3, 7, 12, tzinfo=UTC),
        job="maintenance.prune_runs",
        args={},
    )
    run_tick()
    assert reload(bad).inactive_reason == (
        "schedule deactivated: job 'maintenance.prune_runs' is a system job "
        "and cannot be used in a tenant schedule"
    )


def test_batches_repeat_until_nothing_is_due(app: Flask, world: World) -> None:
    for n in range(7):
        make_schedule(world.alpha, f"s{n}", datetime(2026, 3, 7, 12, tzinfo=UTC))
    first = tick_once(db.session(), catalog(), settings(batch_size=3), NOW)
    assert first.claimed == 3
    rest = run_tick(batch_size=3)
    assert rest.claimed == 4
    assert len(all_runs()) == 7


def test_the_next_fire_follows_debian_dst_rules(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha,
        "night",
        datetime(2026, 3, 7, 7, 30, tzinfo=UTC),
        cron="30 2 * * *",
        time_zone="America/New_York",
    )
    run_tick(now=datetime(2026, 3, 7, 7, 30, 5, tzinfo=UTC))
    # 02:30 does not exist on 2026-03-08 in New York: Debian cron runs it at 03:00 EDT.
    assert reload(schedule).next_run_at == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)


def test_system_schedules_fire_without_a_tenant(app: Flask) -> None:
    make_schedule(
        None, "prune", datetime(2026, 3, 7, 12, tzinfo=UTC), job="maintenance.prune_runs", args={}
    )
    run_tick()
    (run,) = all_runs()
    assert (run.tenant_id, run.job, run.status) == (None, "maintenance.prune_runs", "queued")
    assert db.session.scalar(select(Schedule.active)) is True
