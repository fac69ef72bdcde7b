"""The service layer: one place for validation, quotas and the audit trail, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from sqlalchemy import delete, func, select

from tests.conftest import World
from tests.settings_support import reconfigure
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule, Tenant
from webapp.services.audit import Actor
from webapp.services.schedules import (
    ScheduleError,
    create_schedule,
    delete_schedule,
    pause_schedule,
    preview_cron,
    resume_schedule,
    run_now,
    update_schedule,
)

NOW = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)


def echo(**changes: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "name": "Morning hello",
        "job": "demo.echo",
        "args": {"message": "hi"},
        "cron": "30 7 * * *",
        "time_zone": "Europe/Berlin",
    }
    fields.update(changes)
    return fields


def alice(world: World) -> Actor:
    return Actor.for_user(world.alice)


def count(model: type) -> int:
    return int(db.session.scalar(select(func.count()).select_from(model)) or 0)


def refused(world: World, **changes: object) -> dict[str, str]:
    with pytest.raises(ScheduleError) as caught:
        create_schedule(world.alpha, echo(**changes), alice(world), NOW)
    assert count(Schedule) == 0 and count(AuditEvent) == 0
    return caught.value.errors


def test_create_stores_the_schedule_with_its_next_fire_and_an_audit_event(
    app: Flask, world: World
) -> None:
    schedule = create_schedule(world.alpha, echo(), alice(world), NOW)
    assert schedule.key == "morning-hello"
    assert schedule.next_run_at == datetime(2026, 3, 8, 6, 30, tzinfo=UTC)  # 07:30 CET
    assert schedule.created_by == world.alice.id
    event = db.session.scalars(select(AuditEvent)).one()
    assert (event.action, event.actor_label, event.object_id) == (
        "schedule.created",
        "alice@example.com",
        schedule.id,
    )
    assert event.after is not None and event.after["cron"] == "30 7 * * *"


def test_a_second_schedule_with_the_same_name_gets_its_own_key(app: Flask, world: World) -> None:
    keys = [create_schedule(world.alpha, echo(), alice(world), NOW).key for _ in range(3)]
    assert keys == ["morning-hello", "morning-hello-2", "morning-hello-3"]


@pytest.mark.parametrize(
    "job", ["os.system", "builtins.eval", "demo.echo.__globals__", "", "__import__"]
)
def test_a_job_outside_the_catalog_is_refused(app: Flask, world: World, job: str) -> None:
    assert refused(world, job=job) == {"job": f"job '{job}' is not in the catalog"}


def test_a_system_job_cannot_be_scheduled_by_a_tenant(app: Flask, world: World) -> None:
    errors = refused(world, job="maintenance.prune_runs", args={})
    assert errors == {
        "job": "job 'maintenance.prune_runs' is a system job "
        "and cannot be used in a tenant schedule"
    }


def test_missing_extra_and_mistyped_args_are_refused_by_field(app: Flask, world: World) -> None:
    assert refused(world, args={}) == {"args.message": "Field required"}
    assert refused(world, args={"message": "x", "loud": True}) == {
        "args.loud": "Extra inputs are not permitted"
    }
    assert refused(world, args={"message": 5}) == {"args.message": "Input should be a valid string"}
    assert refused(world, job="demo.sleep", args={"seconds": 4000}) == {
        "args.seconds": "Input should be less than or equal to 3600"
    }


def test_invalid_cron_and_zone_are_refused_with_the_reason(app: Flask, world: World) -> None:
    assert refused(world, cron="61 * * * *") == {"cron": "minute 61 is out of range 0-59"}
    assert refused(world, time_zone="Mars/Olympus") == {
        "time_zone": "unknown time zone 'Mars/Olympus'"
    }
    assert "never" in refused(world, cron="0 0 30 2 *")["cron"]


def test_bad_policies_and_names_are_refused(app: Flask, world: World) -> None:
    errors = refused(world, name="  ", misfire_policy="sometimes", overlap_policy="maybe")
    assert errors == {
        "name": "a name is required",
        "misfire_policy": "'sometimes' is not one of fire_once, fire_all, skip",
        "overlap_policy": "'maybe' is not one of allow, skip",
    }


def test_the_schedule_count_quota_refuses_one_too_many(app: Flask, world: World) -> None:
    world.alpha.max_schedules = 2
    db.session.commit()
    for _ in range(2):
        create_schedule(world.alpha, echo(), alice(world), NOW)
    with pytest.raises(ScheduleError) as caught:
        create_schedule(world.alpha, echo(), alice(world), NOW)
    assert caught.value.errors == {
        "quota": "tenant 'alpha' may have at most 2 schedules: it has 2 and this adds 1"
    }
    assert count(Schedule) == 2


def test_the_operator_default_quota_applies_unless_the_tenant_overrides_it(
    app: Flask, world: World
) -> None:
    reconfigure(app, SCHEDULER_MIN_INTERVAL=300)
    assert refused(world, cron="*/2 * * * *") == {
        "cron": "fires as often as every 120 s; this tenant allows at most one fire every 300 s"
    }
    world.alpha.min_interval_seconds = 60
    db.session.commit()
    assert create_schedule(world.alpha, echo(cron="*/2 * * * *"), alice(world), NOW).id


def test_update_audits_only_the_changed_fields_and_keeps_the_cadence(
    app: Flask, world: World
) -> None:
    schedule = create_schedule(world.alpha, echo(), alice(world), NOW)
    later = datetime(2026, 3, 7, 20, 0, tzinfo=UTC)
    update_schedule(schedule, echo(args={"message": "hello"}), alice(world), later)
    assert schedule.next_run_at == datetime(2026, 3, 8, 6, 30, tzinfo=UTC)
    event = db.session.scalars(select(AuditEvent).order_by(AuditEvent.id.desc())).first()
    assert event is not None and event.action == "schedule.updated"
    assert event.before == {"args": {"message": "hi"}}
    assert event.after == {"args": {"message": "hello"}}


def test_changing_the_cron_restarts_the_cadence_from_now(app: Flask, world: World) -> None:
    schedule = create_schedule(world.alpha, echo(), alice(world), NOW)
    update_schedule(schedule, echo(cron="0 * * * *"), alice(world), NOW)
    assert schedule.next_run_at == datetime(2026, 3, 7, 13, 0, tzinfo=UTC)


def test_a_refused_update_changes_nothing(app: Flask, world: World) -> None:
    schedule = create_schedule(world.alpha, echo(), alice(world), NOW)
    with pytest.raises(ScheduleError):
        update_schedule(schedule, echo(cron="bad"), alice(world), NOW)
    db.session.expire_all()
    assert db.session.scalar(select(Schedule.cron)) == "30 7 * * *"
    assert count(AuditEvent) == 1


def test_pause_and_resume_skipping_missed_fires(app: Flask, world: World) -> None:
    schedule = create_schedule(world.alpha, echo(cron="0 * * * *"), alice(world), NOW)
    pause_schedule(schedule, alice(world))
    assert not schedule.active
    days_later = datetime(2026, 3, 10, 9, 30, tzinfo=UTC)
    resume_schedule(schedule, alice(world), days_later, catch_up=False)
    assert schedule.active and schedule.next_run_at == datetime(2026, 3, 10, 10, 0, tzinfo=UTC)
    actions = db.session.scalars(select(AuditEvent.action).order_by(AuditEvent.id)).all()
    assert actions == ["schedule.created", "schedule.paused", "schedule.resumed"]


def test_resume_with_catch_up_leaves_missed_fires_due(app: Flask, world: World) -> None:
    schedule = create_schedule(world.alpha, echo(cron="0 * * * *"), alice(world), NOW)
    pause_schedule(schedule, alice(world))
    resume_schedule(schedule, alice(world), datetime(2026, 3, 10, tzinfo=UTC), catch_up=True)
    assert schedule.next_run_at == datetime(2026, 3, 7, 13, 0, tzinfo=UTC)


@pytest.mark.parametrize("zone", ["posix/UTC", "right/Europe/Berlin", "Mars/Olympus"])
def test_a_schedule_with_a_zone_that_saving_refuses_is_not_resumed(
    app: Flask, world: World, zone: str
) -> None:
    schedule = create_schedule(world.alpha, echo(active=False), alice(world), NOW)
    schedule.time_zone = zone  # stored by hand or by an older version: the tick refuses it
    db.session.commit()
    with pytest.raises(ScheduleError) as caught:
        resume_schedule(schedule, alice(world), NOW, catch_up=False)
    assert caught.value.errors == {
        "resume": f"cannot resume: unknown time zone '{zone}'; edit it first"
    }
    db.session.expire_all()
    assert db.session.scalar(select(Schedule.active)) is False
    assert count(AuditEvent) == 1  # the creation only


@pytest.mark.parametrize(
    ("at", "reason"),
    [
        (NOW - timedelta(seconds=1), "2026-03-07 12:59 CET (+01:00) is in the past"),
        (
            NOW + timedelta(days=366, seconds=1),
            "2027-03-08 13:00 CET (+01:00) is more than a year (366 days) from now",
        ),
    ],
)
def test_a_run_is_not_requested_for_the_past_nor_more_than_a_year_ahead(
    app: Flask, world: World, at: datetime, reason: str
) -> None:
    schedule = create_schedule(world.alpha, echo(), alice(world), NOW)
    with pytest.raises(ScheduleError) as caught:
        run_now(schedule, alice(world), NOW, at=at)
    assert caught.value.errors == {"at": reason}
    assert count(Run) == 0
    for edge in (NOW, NOW + timedelta(days=366)):
        assert run_now(schedule, alice(world), NOW, at=edge).available_at == edge


def test_delete_keeps_the_run_history(app: Flask, world: World) -> None:
    schedule = create_schedule(world.alpha, echo(), alice(world), NOW)
    run = run_now(schedule, alice(world), NOW)
    delete_schedule(schedule, alice(world))
    assert count(Schedule) == 0
    kept = db.session.get(Run, run.id)
    assert kept is not None and kept.schedule_id is None and kept.job == "demo.echo"


def test_a_new_schedule_never_gets_the_id_of_a_deleted_one_nor_its_audit_trail(
    app: Flask, world: World
) -> None:
    first = create_schedule(world.alpha, echo(name="First"), alice(world), NOW)
    newest = create_schedule(world.alpha, echo(name="Newest"), alice(world), NOW)
    newest_id = newest.id
    run = run_now(newest, alice(world), NOW)
    delete_schedule(newest, alice(world))
    db.session.execute(delete(Run).where(Run.id == run.id))  # the newest run goes too
    db.session.commit()
    created = create_schedule(world.alpha, echo(name="Created"), alice(world), NOW)
    again = run_now(created, alice(world), NOW)
    assert created.id not in (first.id, newest_id)
    assert again.id != run.id
    trail = db.session.scalars(
        select(AuditEvent.action).where(
            AuditEvent.object_type == "schedule", AuditEvent.object_id == created.id
        )
    ).all()
    assert sorted(trail) == ["schedule.created", "schedule.run_now"]


def test_run_now_queues_a_manual_run_without_touching_the_cadence(app: Flask, world: World) -> None:
    schedule = create_schedule(world.alpha, echo(), alice(world), NOW)
    run = run_now(schedule, alice(world), NOW)
    assert (run.status, run.trigger, run.scheduled_for, run.requested_by) == (
        "queued",
        "manual",
        NOW,
        world.alice.id,
    )
    assert run.args == {"message": "hi"} and run.idempotency_key.startswith("manual:")
    assert schedule.next_run_at == datetime(2026, 3, 8, 6, 30, tzinfo=UTC)
    # The audit log names the run and who asked for it.
    event = db.session.scalars(
        select(AuditEvent).where(AuditEvent.action == "schedule.run_now")
    ).one()
    assert (event.object_id, event.actor_id, event.tenant_id) == (
        schedule.id,
        world.alice.id,
        world.alpha.id,
    )
    assert event.after == {"run_id": run.id, "at": NOW.isoformat()}


def test_run_now_at_a_later_time_waits_until_then(app: Flask, world: World) -> None:
    schedule = create_schedule(world.alpha, echo(), alice(world), NOW)
    at = datetime(2026, 3, 9, tzinfo=UTC)
    run = run_now(schedule, alice(world), NOW, at=at)
    assert run.available_at == at and run.queued_at == NOW


def test_run_now_with_overlap_skip_records_a_skipped_run(app: Flask, world: World) -> None:
    schedule = create_schedule(world.alpha, echo(overlap_policy="skip"), alice(world), NOW)
    first = run_now(schedule, alice(world), NOW)
    second = run_now(schedule, alice(world), NOW)
    assert first.status == "queued"
    assert second.status == "skipped"
    assert second.error == "skipped: an earlier run of this schedule is still queued or running"


def test_preview_describes_and_lists_fires_with_dst_notes(app: Flask) -> None:
    preview = preview_cron(
        "30 2 * * *", "America/New_York", datetime(2026, 3, 7, 12, tzinfo=UTC), 2
    )
    assert preview.description == "At 02:30"
    assert preview.fires[0][:2] == (
        datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
        "2026-03-08 03:00 EDT (-04:00)",
    )
    assert preview.fires[0][2] is not None and "does not exist" in preview.fires[0][2]
    assert preview.fires[1][2] is None


def test_preview_names_the_field_at_fault(app: Flask) -> None:
    with pytest.raises(ScheduleError) as caught:
        preview_cron("* * *", "UTC", NOW)
    assert list(caught.value.errors) == ["cron"]
    with pytest.raises(ScheduleError) as caught:
        preview_cron("* * * * *", "Nowhere/City", NOW)
    assert caught.value.errors == {"time_zone": "unknown time zone 'Nowhere/City'"}


def test_tenants_do_not_share_keys(app: Flask, world: World) -> None:
    create_schedule(world.alpha, echo(key="nightly"), alice(world), NOW)
    create_schedule(world.beta, echo(key="nightly"), Actor.for_user(world.charlie), NOW)
    tenants = db.session.scalars(select(Tenant.slug).join(Schedule).order_by(Tenant.slug)).all()
    assert tenants == ["alpha", "beta"]


def test_run_now_refuses_a_job_whose_scope_does_not_match(app: Flask, world: World) -> None:
    schedule = create_schedule(world.alpha, echo(), alice(world), NOW)
    schedule.job = "maintenance.prune_runs"  # a tampered row, or a job an operator re-scoped
    db.session.commit()
    with pytest.raises(ScheduleError) as caught:
        run_now(schedule, alice(world), NOW)
    assert caught.value.errors == {
        "job": "job 'maintenance.prune_runs' is a system job and cannot be used in a tenant "
        "schedule"
    }
    assert count(Run) == 0


def test_an_edit_that_reactivates_skips_the_missed_fires(app: Flask, world: World) -> None:
    schedule = create_schedule(world.alpha, echo(cron="0 * * * *"), alice(world), NOW)
    pause_schedule(schedule, alice(world))
    week_later = NOW + timedelta(days=7, minutes=5)
    update_schedule(schedule, echo(cron="0 * * * *", active=True), alice(world), week_later)
    assert schedule.active
    assert schedule.next_run_at == datetime(2026, 3, 14, 13, 0, tzinfo=UTC)


def test_a_tenant_name_with_nul_or_too_long_is_refused(app: Flask) -> None:
    from webapp.services.accounts import AccountError, create_tenant

    for name, refused in (
        ("a\x00b", "must not contain a NUL character"),
        ("x" * 201, "at most 200 characters"),
        ("a\ud800b", "lone surrogate"),
    ):
        with pytest.raises(AccountError, match=refused):
            create_tenant("gamma", name)
    assert count(Tenant) == 0
