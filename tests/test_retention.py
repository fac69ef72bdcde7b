"""Retention: expired runs are folded into daily roll-ups, then deleted, batch by batch."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select

from tests.conftest import World, make_run, make_schedule
from webapp.catalog.context import JobContext, JobTimeout
from webapp.catalog.maintenance import PruneParams, prune_runs
from webapp.catalog.retention import PruneReport, prune
from webapp.config import ConfigError, load_settings
from webapp.extensions import db
from webapp.models import AuditEvent, Run, RunStatus, Schedule, Tenant
from webapp.rollup_models import RunRollup

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
# 90 days before NOW is 2026-03-03 12:00: days up to 2026-03-02 have wholly expired.
LAST_EXPIRED_DAY = date(2026, 3, 2)


def fired(day: date, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def add(
    owner: Schedule | Tenant | None,
    at: datetime,
    status: RunStatus = "succeeded",
    *,
    lag: float | None = 1.0,
    duration: float | None = 2.0,
    **fields: Any,
) -> Run:
    """A run (of a schedule, or a manual one of a tenant) fired `at`, started `lag` seconds
    later (None: never started) and finished `duration` seconds after its start (unless it is
    queued or running)."""
    started = at + timedelta(seconds=lag) if lag is not None else None
    finished = None
    if status not in ("queued", "running"):
        if started is not None and duration is not None:
            finished = started + timedelta(seconds=duration)
        else:
            finished = at
    return make_run(
        owner, status, scheduled_for=at, started_at=started, finished_at=finished, **fields
    )


def prune_now(**options: Any) -> PruneReport:
    days = options.pop("run_retention_days", 90)
    rollup_days = options.pop("rollup_retention_days", 730)
    db.session.commit()
    report = prune(db.session(), NOW, days, rollup_days, **options)
    db.session.expire_all()
    return report


def runs_left() -> list[tuple[int | None, datetime, str]]:
    rows = db.session.execute(
        select(Run.schedule_id, Run.scheduled_for, Run.status).order_by(Run.scheduled_for)
    )
    return [tuple(row) for row in rows]  # type: ignore[misc]


def rollups() -> list[RunRollup]:
    return list(db.session.scalars(select(RunRollup).order_by(RunRollup.day, RunRollup.id)))


def rolled_up_runs() -> int:
    return int(db.session.scalar(select(func.coalesce(func.sum(RunRollup.runs), 0))) or 0)


def test_expired_finished_runs_are_folded_then_deleted_newer_and_unfinished_kept(
    app: Flask, world: World
) -> None:
    nightly = make_schedule(world.alpha, "nightly", NOW)
    add(nightly, fired(LAST_EXPIRED_DAY, 23, 59))  # its whole day is past the cutoff
    add(nightly, fired(LAST_EXPIRED_DAY - timedelta(days=30)), "failed")
    add(nightly, fired(LAST_EXPIRED_DAY + timedelta(days=1)))  # the cutoff falls in its day
    add(nightly, fired(LAST_EXPIRED_DAY - timedelta(days=5)), "running", duration=None)
    add(nightly, fired(LAST_EXPIRED_DAY - timedelta(days=6)), "queued", lag=None)

    report = prune_now()

    assert (report.runs_deleted, report.rollups_created) == (2, 2)
    assert [status for _, _, status in runs_left()] == ["queued", "running", "succeeded"]
    assert [(r.schedule_id, r.day, r.runs, r.succeeded, r.failed) for r in rollups()] == [
        (nightly.id, LAST_EXPIRED_DAY - timedelta(days=30), 1, 0, 1),
        (nightly.id, LAST_EXPIRED_DAY, 1, 1, 0),
    ]


def test_a_days_rollup_counts_statuses_and_has_exact_percentiles_and_lag(
    app: Flask, world: World
) -> None:
    hourly = make_schedule(world.alpha, "hourly", NOW)
    day = date(2026, 1, 10)
    for hour, (lag, duration) in enumerate([(0, 1), (1, 2), (2, 3), (3, 4), (4, 10)]):
        add(hourly, fired(day, hour), lag=lag, duration=duration)
    add(hourly, fired(day, 5), "failed", lag=10, duration=3)
    add(hourly, fired(day, 6), "skipped", lag=None)  # never started: no duration, no lag
    add(hourly, fired(day, 7), "skipped", lag=None)

    prune_now()

    (rollup,) = rollups()
    assert (rollup.tenant_id, rollup.job, rollup.day) == (world.alpha.id, "demo.echo", day)
    assert (rollup.runs, rollup.succeeded, rollup.failed, rollup.skipped) == (8, 5, 1, 2)
    # Durations 1, 2, 3, 3, 4, 10: percentile_cont's linear interpolation between ranks.
    assert rollup.duration_p50_seconds == pytest.approx(3.0)
    assert rollup.duration_p95_seconds == pytest.approx(4 + (10 - 4) * 0.75)
    assert rollup.lag_mean_seconds == pytest.approx((0 + 1 + 2 + 3 + 4 + 10) / 6)
    assert rollup.lag_max_seconds == pytest.approx(10.0)


def test_a_tenants_own_retention_overrides_the_global_one(app: Flask, world: World) -> None:
    world.alpha.retention_days = 10
    world.beta.retention_days = 200
    alpha, beta = make_schedule(world.alpha, "a", NOW), make_schedule(world.beta, "b", NOW)
    system = make_schedule(None, "system", NOW)
    thirty_days_ago, hundred_days_ago = NOW - timedelta(days=30), NOW - timedelta(days=100)
    add(alpha, thirty_days_ago)  # past alpha's 10 days
    add(beta, hundred_days_ago)  # within beta's 200 days
    add(system, hundred_days_ago)  # system runs: the global 90 days
    add(system, thirty_days_ago)

    report = prune_now()

    assert report.runs_deleted == 2
    assert runs_left() == [
        (beta.id, hundred_days_ago, "succeeded"),
        (system.id, thirty_days_ago, "succeeded"),
    ]
    assert {(r.tenant_id, r.schedule_id) for r in rollups()} == {
        (world.alpha.id, alpha.id),
        (None, system.id),
    }


def test_a_second_prune_changes_nothing(app: Flask, world: World) -> None:
    nightly = make_schedule(world.alpha, "nightly", NOW)
    for days_ago in range(95, 100):
        add(nightly, NOW - timedelta(days=days_ago))
    first = prune_now()
    before = [(r.id, r.runs, r.duration_p50_seconds) for r in rollups()]

    second = prune_now()

    assert (first.runs_deleted, second.runs_deleted, second.rollups_created) == (5, 0, 0)
    assert [(r.id, r.runs, r.duration_p50_seconds) for r in rollups()] == before
    assert rolled_up_runs() == 5


def test_a_straggler_that_finished_late_merges_into_its_days_rollup(
    app: Flask, world: World
) -> None:
    hourly = make_schedule(world.alpha, "hourly", NOW)
    day = date(2026, 1, 10)
    add(hourly, fired(day, 1), lag=2, duration=4)
    add(hourly, fired(day, 2), lag=4, duration=4)
    add(hourly, fired(day, 3), "skipped", lag=None)
    straggler = add(hourly, fired(day, 4), "running", lag=12, duration=None)
    prune_now()
    (rollup,) = rollups()
    assert (rollup.runs, rollup.lag_mean_seconds, rollup.duration_p50_seconds) == (3, 3.0, 4.0)

    straggler.status = "failed"
    straggler.finished_at = fired(day, 4) + timedelta(seconds=12, hours=1)
    report = prune_now()

    assert (report.runs_deleted, report.rollups_created, report.rollups_merged) == (1, 0, 1)
    (merged,) = rollups()
    assert merged.id == rollup.id
    assert (merged.runs, merged.succeeded, merged.failed, merged.skipped) == (4, 2, 1, 1)
    assert merged.lag_mean_seconds == pytest.approx((2 + 4 + 12) / 3)  # weighted: exact
    assert merged.lag_max_seconds == pytest.approx(12.0)
    # Approximate: the two rows' medians (4 s of 2 runs, 3600 s of 1) weighted by runs.
    assert merged.duration_p50_seconds == pytest.approx((4 * 2 + 3600) / 3)


def test_runs_of_deleted_schedules_fold_per_tenant_job_and_day(app: Flask, world: World) -> None:
    day = date(2026, 1, 10)
    add(world.alpha, fired(day, 1), job="demo.echo", lag=1)
    add(world.alpha, fired(day, 2), job="demo.echo", lag=3)
    add(world.alpha, fired(day, 3), job="demo.sleep")
    add(world.beta, fired(day, 4), job="demo.echo")
    add(world.alpha, fired(day + timedelta(days=1)), job="demo.echo")

    report = prune_now()

    assert report.runs_deleted == 5
    assert runs_left() == []
    assert [(r.tenant_id, r.schedule_id, r.job, r.day, r.runs) for r in rollups()] == [
        (world.alpha.id, None, "demo.echo", day, 2),
        (world.alpha.id, None, "demo.sleep", day, 1),
        (world.beta.id, None, "demo.echo", day, 1),
        (world.alpha.id, None, "demo.echo", day + timedelta(days=1), 1),
    ]
    assert rollups()[0].lag_mean_seconds == pytest.approx(2.0)


def test_rollups_older_than_their_retention_are_deleted(app: Flask, world: World) -> None:
    nightly = make_schedule(world.alpha, "nightly", NOW)
    oldest_kept = NOW.date() - timedelta(days=730)
    for day in (oldest_kept - timedelta(days=1), oldest_kept):
        db.session.add(
            RunRollup(tenant_id=world.alpha.id, schedule_id=nightly.id, job="demo.echo", day=day)
        )

    report = prune_now()

    assert report.rollups_expired == 1
    assert [r.day for r in rollups()] == [oldest_kept]


def test_batches_hold_whole_days_and_commit_one_by_one(app: Flask, world: World) -> None:
    schedules = [make_schedule(world.alpha, f"s{n}", NOW) for n in range(3)]
    for schedule in schedules:
        for day_offset in range(4):
            for hour, duration in enumerate((1, 5, 9)):
                at = fired(date(2026, 1, 1) + timedelta(days=day_offset), hour)
                add(schedule, at, duration=duration)
    add(world.beta, fired(date(2026, 1, 1)))
    add(world.beta, fired(date(2026, 1, 2)))

    report = prune_now(batch_size=2)

    # A batch ends at the midnight after its second run: one schedule's day (3 runs) each.
    assert report.runs_deleted == 38
    assert len(report.batch_seconds) == 3 * 4 + 2 + 1  # the last batch of a walk may be empty
    days = rollups()
    assert len(days) == 3 * 4 + 2
    assert all(r.duration_p50_seconds == 5.0 for r in days if r.schedule_id is not None)


def test_a_timeout_between_batches_leaves_every_run_counted_once(app: Flask, world: World) -> None:
    nightly = make_schedule(world.alpha, "nightly", NOW)
    for day_offset in range(6):
        add(nightly, fired(date(2026, 1, 1) + timedelta(days=day_offset)))
    asked = 0

    def time_out_at_the_third_batch() -> None:
        nonlocal asked
        asked += 1
        if asked == 3:
            raise JobTimeout

    with pytest.raises(JobTimeout):
        prune_now(batch_size=1, check_timeout=time_out_at_the_third_batch)

    assert (len(runs_left()), rolled_up_runs()) == (4, 2)  # two batches committed, no more
    report = prune_now(batch_size=1)
    assert (report.runs_deleted, len(runs_left()), rolled_up_runs()) == (4, 0, 6)


def run_prune_job(app: Flask, **given: str) -> list[str]:
    """Runs the prune job as a worker would, with the app's job settings (`given` over them);
    the lines it logged."""
    lines: list[str] = []

    class Lines(logging.Logger):
        def info(self, msg: object, *args: object, **kwargs: Any) -> None:
            lines.append(str(msg))

    ctx = JobContext(
        run_id=0,
        idempotency_key="prune",
        logger=Lines("prune"),
        config=load_settings(app.instance_path, given).settings.job_settings(),
        db=db.session(),
    )
    prune_runs(ctx, PruneParams())
    return lines


def test_the_prune_job_logs_what_it_did(app: Flask, world: World) -> None:
    nightly = make_schedule(world.alpha, "nightly", NOW)
    add(nightly, NOW - timedelta(days=100))
    add(nightly, NOW - timedelta(days=101))
    db.session.commit()

    lines = run_prune_job(app)  # 90 days, the default

    assert len(lines) == 1
    assert lines[0].startswith(
        "folded 2 runs into 2 new and 0 merged daily roll-ups, then deleted them, in 2 batches "
        "(longest "
    )
    assert lines[0].endswith(" ms); deleted 0 expired roll-ups")


def test_the_prune_job_keeps_what_the_operators_retention_setting_keeps(
    app: Flask, world: World
) -> None:
    """The job reads SCHEDULER_RUN_RETENTION_DAYS as the settings typed it (no default of its
    own): with 365 days, runs of 100 days ago stay."""
    nightly = make_schedule(world.alpha, "nightly", NOW)
    add(nightly, NOW - timedelta(days=100))
    db.session.commit()

    lines = run_prune_job(app, SCHEDULER_RUN_RETENTION_DAYS="365")

    assert lines[0].startswith("folded 0 runs")
    assert db.session.scalar(select(func.count()).select_from(Run)) == 1


def test_tenant_set_is_audited_in_the_tenants_log_with_what_changed(
    cli: FlaskCliRunner, world: World
) -> None:
    cli.invoke(args=["tenant", "set", "alpha", "--retention-days", "30"])
    cli.invoke(args=["tenant", "set", "alpha", "--retention-days", "30"])  # nothing changes
    events = db.session.scalars(
        select(AuditEvent).where(AuditEvent.action == "tenant.limits_changed")
    ).all()
    assert [(e.tenant_id, e.actor_label, e.before, e.after) for e in events] == [
        (world.alpha.id, "cli", {"retention_days": None}, {"retention_days": 30})
    ]


@pytest.mark.parametrize("days", ["0", "3651"])
def test_tenant_set_refuses_a_retention_outside_1_to_3650_days(
    cli: FlaskCliRunner, world: World, days: str
) -> None:
    result = cli.invoke(
        args=["tenant", "set", "alpha", "--retention-days", days, "--max-schedules", "5"]
    )
    assert result.exit_code == 1
    assert result.stderr == "Error: --retention-days must be from 1 to 3650 days, or 'default'\n"
    db.session.expire_all()
    alpha = db.session.get(Tenant, world.alpha.id)
    assert alpha is not None and (alpha.retention_days, alpha.max_schedules) == (None, None)


def test_tenant_set_retention_days_and_back_to_the_default(
    cli: FlaskCliRunner, world: World
) -> None:
    result = cli.invoke(args=["tenant", "set", "alpha", "--retention-days", "3650"])
    assert result.stdout == (
        "tenant alpha: max schedules default, min interval default, retention days 3650, "
        "max running default\n"
    )
    db.session.expire_all()
    assert db.session.get(Tenant, world.alpha.id).retention_days == 3650  # type: ignore[union-attr]

    cli.invoke(args=["tenant", "set", "alpha", "--min-interval", "60"])  # keeps the retention
    db.session.expire_all()
    assert db.session.get(Tenant, world.alpha.id).retention_days == 3650  # type: ignore[union-attr]

    result = cli.invoke(args=["tenant", "set", "alpha", "--retention-days", "default"])
    assert result.stdout.endswith("min interval 60, retention days default, max running default\n")
    db.session.expire_all()
    assert db.session.get(Tenant, world.alpha.id).retention_days is None  # type: ignore[union-attr]


@pytest.mark.parametrize("days", ["0", "3651"])
def test_configuration_load_refuses_a_run_retention_outside_1_to_3650_days(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, days: str
) -> None:
    monkeypatch.setenv("SCHEDULER_RUN_RETENTION_DAYS", days)
    with pytest.raises(ConfigError) as refused:
        load_settings(str(tmp_path))
    assert str(refused.value) == f"SCHEDULER_RUN_RETENTION_DAYS='{days}' must be from 1 to 3650"
