"""Misfire planning after downtime, as pure time math: short and very long outages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest

from webapp.cron import validate
from webapp.models import MisfirePolicy
from webapp.scheduler import misfire
from webapp.scheduler.misfire import MisfireSettings, plan_fires

NOW = datetime(2026, 3, 10, 12, 0, 30, tzinfo=UTC)
GRACE = timedelta(seconds=60)
DAY = timedelta(days=1)
MINUTELY = validate("* * * * *", "UTC")
# The defaults: a minute's grace, a day's recovery window, at most 100 catch-up runs.
SETTINGS = MisfireSettings(grace=GRACE, recovery_window=DAY, max_catchup=100)


def at(hour: int, minute: int, day: int = 10) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


def summary(policy: MisfirePolicy, first_due: datetime) -> list[tuple[object, ...]]:
    plan = plan_fires(MINUTELY, first_due=first_due, now=NOW, policy=policy, settings=SETTINGS)
    assert plan.next_run_at == at(12, 1)
    return [(r.scheduled_for, r.trigger, r.status) for r in plan.runs]


def test_after_eight_days_down_fire_all_recovers_the_newest_inside_the_window() -> None:
    runs = summary("fire_all", NOW - timedelta(days=8))
    assert runs[0] == (at(10, 19), "catchup", "skipped")
    assert runs[1:-1] == [
        (at(10, 20) + timedelta(minutes=n), "catchup", "queued") for n in range(100)
    ]
    assert runs[-1] == (at(12, 0), "schedule", "queued")


def test_after_eight_days_down_fire_once_runs_the_most_recent_fire() -> None:
    first_due = NOW - timedelta(days=8)
    plan = plan_fires(MINUTELY, first_due=first_due, now=NOW, policy="fire_once", settings=SETTINGS)
    (run,) = plan.runs
    assert (run.scheduled_for, run.trigger, run.status) == (at(12, 0), "catchup", "queued")
    assert run.fires_covered >= 10_000
    assert plan.last_fire == at(12, 0)


def test_after_eight_days_down_skip_records_the_missed_and_runs_the_on_time_fire() -> None:
    first_due = NOW - timedelta(days=8)
    plan = plan_fires(MINUTELY, first_due=first_due, now=NOW, policy="skip", settings=SETTINGS)
    skipped, on_time = plan.runs
    assert (skipped.scheduled_for, skipped.status) == (at(11, 59), "skipped")
    assert skipped.reason == "skipped at least 10000 missed fire times (misfire policy: skip)"
    assert (on_time.scheduled_for, on_time.trigger, on_time.status) == (
        at(12, 0),
        "schedule",
        "queued",
    )


def test_a_long_outage_with_a_tiny_window_still_finds_the_latest_fire() -> None:
    hourly = validate("0 * * * *", "UTC")
    now = datetime(2027, 6, 1, 12, 30, tzinfo=UTC)  # 15 months of hourly fires missed
    first_due = datetime(2026, 3, 1, tzinfo=UTC)
    no_window = MisfireSettings(grace=GRACE, recovery_window=timedelta(0), max_catchup=100)
    plan = plan_fires(hourly, first_due=first_due, now=now, policy="skip", settings=no_window)
    (skipped,) = plan.runs
    assert skipped.scheduled_for == datetime(2027, 6, 1, 12, 0, tzinfo=UTC)
    assert plan.next_run_at == datetime(2027, 6, 1, 13, 0, tzinfo=UTC)


@pytest.mark.parametrize("policy", ["fire_once", "fire_all", "skip"])
@pytest.mark.parametrize("hours_down", [3, 30, 300])
def test_the_long_outage_path_plans_the_same_runs_as_full_enumeration(
    monkeypatch: pytest.MonkeyPatch, policy: MisfirePolicy, hours_down: int
) -> None:
    """With the enumeration limit lowered, the long-outage path must agree with the full one."""
    quarterly = validate("*/15 * * * *", "Europe/Berlin")
    now = datetime(2026, 3, 29, 6, 7, tzinfo=UTC)  # across Berlin's spring-forward night
    first_due = quarterly.next_fire_after(now - timedelta(hours=hours_down))
    settings = MisfireSettings(grace=GRACE, recovery_window=timedelta(hours=2), max_catchup=5)
    plan = partial(
        plan_fires, quarterly, first_due=first_due, now=now, policy=policy, settings=settings
    )
    full = plan()
    monkeypatch.setattr(misfire, "MAX_COUNTED_FIRES", 20)
    bounded = plan()
    assert [(r.scheduled_for, r.trigger, r.status) for r in bounded.runs] == [
        (r.scheduled_for, r.trigger, r.status) for r in full.runs
    ]
    assert (bounded.next_run_at, bounded.last_fire) == (full.next_run_at, full.last_fire)


@pytest.mark.parametrize("first_due", [NOW - timedelta(days=8), at(12, 0)])
def test_an_unknown_policy_is_an_error_naming_it_not_a_silent_skip(first_due: datetime) -> None:
    from_database: Any = "fire_twice"  # a value the schedules table's check refuses
    with pytest.raises(ValueError, match="unknown misfire policy 'fire_twice'"):
        plan_fires(MINUTELY, first_due=first_due, now=NOW, policy=from_database, settings=SETTINGS)
