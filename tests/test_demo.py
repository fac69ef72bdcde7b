"""`flask demo`: the demo tenant's schedules and the history the worker's own steps made."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select

from tests.conftest import make_schedule
from webapp import cron
from webapp.config import settings
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule, Tenant, User, Worker
from webapp.scheduler.run_rows import OVERLAP_REASON, fire_key
from webapp.scheduler.runs import REQUEUE_ERROR
from webapp.services import accounts
from webapp.services.demo import DOWNTIME, seed_demo_schedules


def known(moment: datetime | None) -> datetime:
    assert moment is not None
    return moment


def counts() -> dict[str, int]:
    return {
        model.__name__: db.session.scalar(select(func.count()).select_from(model)) or 0
        for model in (Tenant, User, Schedule, Run, AuditEvent, Worker)
    }


def demo(cli: FlaskCliRunner) -> None:
    result = cli.invoke(args=["demo"])
    assert result.exit_code == 0, result.output
    db.session.expire_all()


def all_runs() -> list[Run]:
    return list(db.session.scalars(select(Run).order_by(Run.id)))


def test_demo_runs_are_the_fire_times_of_their_schedules(cli: FlaskCliRunner) -> None:
    before = datetime.now(UTC)
    demo(cli)
    schedules = {s.id: s for s in db.session.scalars(select(Schedule))}
    runs = all_runs()
    assert len({run.schedule_id for run in runs}) == 4  # every demo schedule has a history
    for run in runs:
        assert run.schedule_id is not None
        schedule = schedules[run.schedule_id]
        # Every moment is the fake clock's, in the past of the command, in the order a run
        # lives them (not the real clock's: the history took a second or two to make).
        moments = [run.queued_at, run.available_at, run.started_at, run.finished_at]
        lived = [moment for moment in moments if moment is not None]
        assert lived == sorted(lived) and lived[-1] < before, (schedule.name, moments)
        if run.trigger == "manual":
            assert run.idempotency_key.startswith("manual:") and run.requested_by is not None
            continue
        spec = cron.validate(schedule.cron, schedule.time_zone)
        assert spec.next_fire_after(run.scheduled_for - timedelta(microseconds=1)) == (
            run.scheduled_for
        ), (schedule.name, run.scheduled_for)
        assert run.idempotency_key == fire_key(schedule.id, run.scheduled_for)
        assert run.queued_at >= run.scheduled_for
    for schedule in schedules.values():
        if schedule.tenant_id is None:
            continue
        fired = [r.scheduled_for for r in runs if r.schedule_id == schedule.id]
        assert len(fired) >= 3, schedule.name
        # The tick left the schedule where the history ends.
        assert schedule.last_run_at == max(
            r.scheduled_for for r in runs if r.schedule_id == schedule.id and r.trigger != "manual"
        )
        spec = cron.validate(schedule.cron, schedule.time_zone)
        assert schedule.next_run_at == spec.next_fire_after(schedule.last_run_at)
        assert before - timedelta(minutes=1) < schedule.next_run_at or not schedule.active


def test_demo_runs_vary_and_tell_the_products_stories(cli: FlaskCliRunner) -> None:
    demo(cli)
    runs = all_runs()
    executed = [run for run in runs if run.started_at is not None]
    lags = {
        known(run.started_at) - run.scheduled_for for run in executed if run.trigger == "schedule"
    }
    durations = {known(run.finished_at) - known(run.started_at) for run in executed}
    assert len(lags) > len(executed) // 2 and len(durations) > len(executed) // 2
    assert all(timedelta(0) < lag < timedelta(minutes=2) for lag in lags)
    assert all(run.finished_at is not None and run.status != "queued" for run in runs)
    # The slow report lasts its 3 seconds (on the fake clock), the echoes a few milliseconds.
    for run in executed:
        took = known(run.finished_at) - known(run.started_at)
        expected = (3, 3.1) if run.job == "demo.sleep" else (0, 0.1)
        assert expected[0] < took.total_seconds() < expected[1], (run.job, took)
    # Failed: one attempt of a job that allows one, with the job's own error; the schedule
    # counts them in a row, and it is the paused one.
    failed = [run for run in runs if run.status == "failed"]
    assert failed and all(run.job == "demo.fail" and run.attempt == 1 for run in failed)
    upstream = "RuntimeError: upstream returned 503"
    assert all((run.error or "").startswith(upstream) for run in failed)
    flaky = failed[0].schedule
    assert flaky is not None and not flaky.active and flaky.consecutive_failures == len(failed) >= 3
    # Retried after a lost worker: the lease ran out, the reaper queued it again, attempt 2
    # succeeded.
    retried = [run for run in runs if run.attempt == 2]
    assert retried and all(run.status == "succeeded" and run.error is None for run in retried)
    assert all(run.job == "demo.sleep" and run.max_attempts == 2 for run in retried)
    lock_ttl = settings().lock_ttl
    assert all(run.available_at - run.queued_at > lock_ttl for run in retried)
    assert all(known(run.started_at) >= run.available_at for run in retried)
    # Catch-ups after the worker's downtime, one standing for several missed fires (another
    # schedule's fire may fall into the downtime too, depending on the time of day).
    # A schedule whose misfire policy is `skip` records its missed fire as skipped, saying why.
    catchups = [run for run in runs if run.trigger == "catchup"]
    executed_catchups = [run for run in catchups if run.status == "succeeded"]
    assert executed_catchups and max(run.fires_covered for run in executed_catchups) > 1
    for run in catchups:
        policy = run.schedule.misfire_policy if run.schedule else None
        assert run.status == ("skipped" if policy == "skip" else "succeeded"), run.error
        assert run.queued_at - run.scheduled_for <= DOWNTIME + timedelta(seconds=1)
    # One fire skipped because a Run now of the same schedule was still running.
    (skipped,) = [run for run in runs if run.status == "skipped" and run.trigger != "catchup"]
    (manual,) = [run for run in runs if run.trigger == "manual"]
    assert skipped.error == OVERLAP_REASON and skipped.attempt == 0
    assert skipped.schedule_id == manual.schedule_id and manual.status == "succeeded"
    assert known(manual.started_at) < skipped.queued_at < known(manual.finished_at)
    echoed = {run.output for run in runs if run.job == "demo.echo"}
    assert echoed == {"Good morning!\n", "still alive\n"}
    assert REQUEUE_ERROR not in {run.error for run in runs}


def test_demo_twice_adds_nothing(cli: FlaskCliRunner) -> None:
    demo(cli)
    before = counts()
    demo(cli)
    assert counts() == before


def test_demo_leaves_the_default_schedules_as_production_would(cli: FlaskCliRunner) -> None:
    demo(cli)
    defaults = db.session.execute(
        select(Schedule.key, Schedule.scope, Schedule.active).where(Schedule.tenant_id.is_(None))
    ).all()
    assert defaults == [("maintenance.prune_runs", "system", True)]
    assert cli.invoke(args=["scheduler", "sync"]).stdout == "created 0 default schedules\n"


def test_demo_touches_nothing_else_when_other_work_is_waiting(cli: FlaskCliRunner) -> None:
    """The history's steps see the whole database: with another schedule overdue (its worker
    stopped), the demo's schedules come without a history, and the other one is left to its
    worker."""
    overdue_since = datetime.now(UTC) - timedelta(hours=3)
    other = make_schedule(None, "other-overdue", overdue_since)
    demo(cli)
    assert all_runs() == []
    db.session.refresh(other)
    assert other.next_run_at == overdue_since
    demo_schedules = list(
        db.session.scalars(select(Schedule).where(Schedule.tenant_id.is_not(None)))
    )
    assert len(demo_schedules) == 4
    assert all(known(s.next_run_at) > overdue_since + timedelta(hours=3) for s in demo_schedules)


def test_demo_history_is_the_same_for_the_same_present(app: Flask) -> None:
    """Lags and durations are seeded by what they belong to: two tenants seeded for the same
    present get the same history, so screenshots are stable. The present at :10 past a minute:
    30 s before it (the history's end) is never within a second after a fire (on the minute),
    which the first tenant's history would leave unticked, and the second tenant's demo would
    then be seeded without one (demo.quiet: a schedule due); CI met that once, 2026-12-07."""
    now = datetime.now(UTC).replace(second=10, microsecond=0)
    histories = []
    for slug in ("first", "second"):
        tenant = accounts.create_tenant(slug, slug.title(), "Europe/Berlin")
        password = "demo-password" if slug == "first" else None  # then a second membership
        admin = accounts.add_user("admin@demo.example", slug, "admin", password).user
        assert seed_demo_schedules(tenant, admin, now) == 4
        mine = select(Run).where(Run.tenant_id == tenant.id)
        histories.append(
            sorted(
                (r.scheduled_for, r.job, r.status, r.attempt, r.started_at, r.finished_at)
                for r in db.session.scalars(mine)
            )
        )
    assert len(histories[0]) > 200 and histories[0] == histories[1]


def test_the_flaky_schedule_fails_three_times_whatever_the_hour_of_the_demo(app: Flask) -> None:
    """Seeded at 17:20 UTC in winter, the demo's downtime (9 hours before, 08:10-08:50 UTC)
    holds the daily Flaky import's fire (03:15 New York = 08:15 UTC), which its misfire policy
    skips: its history goes back a day further, so that it still failed three times in a row."""
    now = datetime(2026, 1, 20, 17, 20, tzinfo=UTC)
    tenant = accounts.create_tenant("winter", "Winter", "Europe/Berlin")
    admin = accounts.add_user("admin@demo.example", "winter", "admin", "demo-password").user
    assert seed_demo_schedules(tenant, admin, now) == 4
    flaky = db.session.scalars(select(Schedule).where(Schedule.key == "flaky-import")).one()
    runs = db.session.scalars(select(Run).where(Run.schedule_id == flaky.id)).all()
    failed = [run for run in runs if run.status == "failed"]
    assert not flaky.active and flaky.consecutive_failures == len(failed) == 3
    assert [run.status for run in runs if run.status != "failed"] == ["skipped"]  # the downtime's
