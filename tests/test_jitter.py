"""Jitter: a scheduled run starts up to N seconds after its fire time, spread per fire by a hash
that every worker computes alike; the fire time and the exactly-once key do not move. Checked
through the tick (both databases), the one schedule validation (form, API, import), the tenant
default (CLI) and the preview."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from tests.api_helpers import NEW, Api, problem_fields
from tests.conftest import WorkerFactory, World, make_schedule
from tests.panel_helpers import Panel
from tests.scheduler_helpers import all_runs, catalog, settings
from webapp import cron
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule, Tenant
from webapp.scheduler.jitter import available_at, effective_jitter, jitter_limit, jitter_offset
from webapp.scheduler.leases import lease_once, reap_once
from webapp.scheduler.tick import tick
from webapp.services.audit import Actor
from webapp.services.schedules import run_now
from webapp.services.schema import ScheduleError

FIRE = datetime(2026, 3, 7, 12, tzinfo=UTC)
RULE_5_MIN = (
    "must be 0 to 150 s for this schedule: at most half its shortest interval between fires, "
    "and 3600 s at most"
)

TTL = timedelta(seconds=60)


def run_tick(now: datetime = FIRE) -> None:
    tick(db.session(), catalog(), settings(), now)


def runs_of(schedule_id: int) -> list[Run]:
    return [run for run in all_runs() if run.schedule_id == schedule_id]


# --- The spread itself (pure) ----------------------------------------------------------------


def test_the_offset_is_the_same_every_time_and_stays_within_the_jitter() -> None:
    offsets = [jitter_offset(schedule_id, FIRE, 90) for schedule_id in range(1, 2001)]
    assert offsets == [jitter_offset(schedule_id, FIRE, 90) for schedule_id in range(1, 2001)]
    assert min(offsets) == 0 and max(offsets) == 90
    assert len(set(offsets)) == 91  # every second of the window is used
    # Another fire time of the same schedule lands elsewhere: the spread is per fire.
    assert [jitter_offset(7, FIRE + timedelta(hours=h), 3600) for h in range(5)] != [
        jitter_offset(7, FIRE, 3600)
    ] * 5
    assert jitter_offset(7, FIRE, 0) == 0


def test_a_late_tick_does_not_push_a_run_back_further() -> None:
    offset = jitter_offset(3, FIRE, 600)
    assert available_at(3, FIRE, 600, FIRE) == FIRE + timedelta(seconds=offset)
    late = FIRE + timedelta(seconds=601)
    assert available_at(3, FIRE, 600, late) == late


def test_the_bound_is_half_the_shortest_interval_and_an_hour_at_most() -> None:
    assert jitter_limit(cron.validate("*/5 * * * *", "UTC"), FIRE) == 150
    assert jitter_limit(cron.validate("* * * * *", "UTC"), FIRE) == 30
    assert jitter_limit(cron.validate("@daily", "Europe/Berlin"), FIRE) == 3600
    # The tenant's default is shortened to the schedule's bound; the schedule's own wins.
    assert effective_jitter(None, 3600, "*/2 * * * *", "UTC", FIRE) == 60
    assert effective_jitter(0, 3600, "@daily", "UTC", FIRE) == 0
    assert effective_jitter(None, None, "@daily", "UTC", FIRE) == 0
    assert effective_jitter(120, 5, "@hourly", "UTC", FIRE) == 120


# --- The tick ----------------------------------------------------------------------------------


def test_the_tick_spreads_the_start_and_keeps_the_fire_time(app: Flask, world: World) -> None:
    schedule = make_schedule(world.alpha, "spread", FIRE, jitter_seconds=90)
    run_tick()
    (run,) = runs_of(schedule.id)
    assert run.scheduled_for == FIRE
    assert run.idempotency_key == f"schedule:{schedule.id}:2026-03-07T12:00:00Z"
    assert FIRE <= run.available_at <= FIRE + timedelta(seconds=90)
    assert run.available_at == FIRE + timedelta(seconds=jitter_offset(schedule.id, FIRE, 90))


def test_a_second_tick_computes_the_same_instant(app: Flask, world: World) -> None:
    schedule = make_schedule(world.alpha, "again", FIRE, jitter_seconds=3600)
    run_tick()
    (first,) = runs_of(schedule.id)
    instant = first.available_at
    assert instant > FIRE + timedelta(seconds=2)  # this schedule's offset is not tiny
    # As if the first tick's transaction had been lost: another tick, a moment later.
    db.session.execute(update(Schedule).values(next_run_at=FIRE))
    db.session.delete(first)
    db.session.commit()
    run_tick(FIRE + timedelta(seconds=2))
    (second,) = runs_of(schedule.id)
    assert (second.scheduled_for, second.available_at) == (FIRE, instant)


def test_the_duplicate_fire_is_still_refused(app: Flask, world: World) -> None:
    schedule = make_schedule(world.alpha, "twice", FIRE, jitter_seconds=600)
    run_tick()
    db.session.execute(update(Schedule).values(next_run_at=FIRE))  # a worker racing for it
    db.session.commit()
    run_tick()
    assert len(runs_of(schedule.id)) == 1
    (run,) = runs_of(schedule.id)
    db.session.add(
        Run(
            tenant_id=run.tenant_id,
            schedule_id=run.schedule_id,
            job=run.job,
            args=run.args,
            trigger="schedule",
            scheduled_for=FIRE,
            available_at=FIRE,
            queued_at=FIRE,
            idempotency_key="another-key",
        )
    )
    with pytest.raises(IntegrityError, match=r"scheduled_for|uq_runs_schedule_id_scheduled_for"):
        db.session.commit()
    db.session.rollback()


def test_the_tenant_default_applies_capped_and_a_schedules_zero_wins(
    app: Flask, world: World
) -> None:
    world.alpha.jitter_seconds = 3600
    db.session.commit()
    frequent = [make_schedule(world.alpha, f"two-{n}", FIRE, cron="*/2 * * * *") for n in range(40)]
    daily = make_schedule(world.alpha, "daily", FIRE, cron="0 12 * * *")
    none = make_schedule(world.alpha, "none", FIRE, cron="0 12 * * *", jitter_seconds=0)
    beta = make_schedule(world.beta, "beta", FIRE, cron="0 12 * * *")
    run_tick()
    delays = [(runs_of(s.id)[0].available_at - FIRE).total_seconds() for s in frequent]
    assert max(delays) <= 60 and len(set(delays)) > 10  # half of 2 minutes, spread
    (daily_run,) = runs_of(daily.id)
    offset = jitter_offset(daily.id, FIRE, 3600)
    assert daily_run.available_at == FIRE + timedelta(seconds=offset)
    assert runs_of(none.id)[0].available_at == FIRE
    assert runs_of(beta.id)[0].available_at == FIRE  # beta has no default


def test_catch_up_runs_keep_their_fire_times(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "behind", FIRE - timedelta(hours=3), misfire_policy="fire_all",
        jitter_seconds=1200,
    )  # fmt: skip
    now = FIRE + timedelta(seconds=5)
    run_tick(now)
    runs = runs_of(schedule.id)
    assert [r.scheduled_for for r in runs] == [FIRE - timedelta(hours=h) for h in (3, 2, 1, 0)]
    for run in runs:
        planned = run.scheduled_for + timedelta(
            seconds=jitter_offset(schedule.id, run.scheduled_for, 1200)
        )
        assert run.available_at == max(now, planned)


def test_run_now_is_not_jittered(app: Flask, world: World) -> None:
    schedule = make_schedule(world.alpha, "Spread", by=world.alice, now=FIRE, jitter_seconds=1800)
    run = run_now(schedule, Actor.for_user(world.alice), FIRE)
    assert (run.trigger, run.available_at) == ("manual", FIRE)


# --- The one validation: service, form, API, import ------------------------------------------


def test_the_bounds_are_checked_with_the_rule_stated(app: Flask, world: World) -> None:
    for bad, message in (
        (-1, "must be 0 to 3600 s, not -1"),
        (3601, "must be 0 to 3600 s, not 3601"),
    ):
        with pytest.raises(ScheduleError) as refused:
            make_schedule(
                world.alpha, "Spread", by=world.alice, now=FIRE, cron="@daily", jitter_seconds=bad
            )
        assert refused.value.errors == {"jitter_seconds": message}
    with pytest.raises(ScheduleError) as refused:
        make_schedule(
            world.alpha, "Spread", by=world.alice, now=FIRE, cron="*/5 * * * *", jitter_seconds=151
        )
    assert refused.value.errors == {"jitter_seconds": f"{RULE_5_MIN}, not 151"}
    assert db.session.scalars(select(Schedule)).all() == []
    assert (
        make_schedule(
            world.alpha, "Spread", by=world.alice, now=FIRE, cron="*/5 * * * *", jitter_seconds=150
        ).jitter_seconds
        == 150
    )


FORM = {
    "name": "Spread",
    "job": "demo.echo",
    "args.message": "hello",
    "cron": "*/5 * * * *",
    "time_zone": "UTC",
    "misfire_policy": "fire_once",
    "overlap_policy": "allow",
    "active": "on",
}


def field_error(page: str, field: str) -> str:
    found = re.search(rf'<p class="field-error" id="{field}-error">([^<]*)</p>', page)
    assert found, f"no error next to {field}"
    return html.unescape(found.group(1))


def test_the_form_refuses_a_jitter_out_of_bounds_next_to_the_field(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    for typed, message in (
        ("200", f"{RULE_5_MIN}, not 200"),
        ("-3", "must be 0 to 3600 s, not -3"),
        ("soon", "must be a whole number"),
    ):
        response = alice.post("/schedules/new", {**FORM, "jitter_seconds": typed})
        assert response.status_code == 422
        page = response.get_data(as_text=True)
        assert field_error(page, "jitter_seconds") == message
        assert f'value="{typed}"' in page  # kept as typed
    assert db.session.scalars(select(Schedule)).all() == []


def test_the_form_saves_the_jitter_and_the_pages_show_it(app: Flask, world: World) -> None:
    alice = Panel(app, world.alice)
    assert alice.post("/schedules/new", {**FORM, "jitter_seconds": "90"}).status_code == 200
    schedule = db.session.scalars(select(Schedule)).one()
    assert schedule.jitter_seconds == 90
    detail = alice.get(f"/schedules/{schedule.id}").get_data(as_text=True)
    assert "up to 90 s after each fire time" in detail
    assert "Each run starts up to 90 s after its fire time (spread per fire)" in detail
    edit = alice.get(f"/schedules/{schedule.id}/edit").get_data(as_text=True)
    assert 'name="jitter_seconds" value="90"' in edit
    # Blank: back to the tenant's default (None), audited as a change of the field.
    form = {**FORM, "jitter_seconds": ""}
    assert alice.post(f"/schedules/{schedule.id}/edit", form).status_code == 200
    db.session.expire_all()
    assert db.session.get(Schedule, schedule.id).jitter_seconds is None  # type: ignore[union-attr]
    event = db.session.scalars(
        select(AuditEvent).where(AuditEvent.action == "schedule.updated")
    ).one()
    assert (event.before, event.after) == ({"jitter_seconds": 90}, {"jitter_seconds": None})
    # Neither the schedule nor its tenant has a jitter: the page says so, not "up to 0 s".
    detail = alice.get(f"/schedules/{schedule.id}").get_data(as_text=True)
    assert "none (no tenant default)" in detail and "up to 0 s" not in detail


def test_the_preview_says_how_late_a_run_may_start(app: Flask, world: World) -> None:
    alice = Panel(app, world.alice)

    def preview(**query: str) -> str:
        response = alice.get("/schedules/form/preview", query_string=query, htmx=True)
        return response.get_data(as_text=True)

    base = {"cron": "*/5 * * * *", "time_zone": "UTC"}
    assert "Each run starts up to 90 s after its fire time (spread per fire)" in preview(
        **base, jitter_seconds="90"
    )
    assert "Each run starts up to" not in preview(**base, jitter_seconds="")
    refused = html.unescape(preview(**base, jitter_seconds="151"))
    assert f"Jitter (seconds): {RULE_5_MIN}, not 151" in refused
    assert '<ol class="fires">' in refused  # the fire times stay in view
    world.alpha.jitter_seconds = 600
    db.session.commit()
    assert (
        "Each run starts up to 150 s after its fire time (spread per fire; the tenant's default "
        "of 600 s, shortened for this schedule)"
    ) in html.unescape(preview(**base, jitter_seconds=""))
    form = alice.get("/schedules/new").get_data(as_text=True)
    assert "Blank: the tenant's default (600 s)" in form


def test_the_run_page_shows_the_jitter_beside_the_fire_time(app: Flask, world: World) -> None:
    schedule = make_schedule(world.alpha, "shown", FIRE, jitter_seconds=3600)
    run_tick()
    (run,) = runs_of(schedule.id)
    delay = int((run.available_at - FIRE).total_seconds())
    assert delay > 0
    page = Panel(app, world.alice).get(f"/runs/{run.id}").get_data(as_text=True)
    assert f"jitter +{delay} s" in page
    assert "Available at" in page


def test_a_jittered_run_taken_back_unstarted_shows_the_same_jitter(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = make_schedule(world.alpha, "taken-back", FIRE, jitter_seconds=3600)
    run_tick()
    (run,) = runs_of(schedule.id)
    delay = int((run.available_at - FIRE).total_seconds())
    assert delay > 0
    later = run.available_at + timedelta(seconds=5)
    (leased,) = lease_once(db.session(), make_worker().id, later, TTL, 1)
    assert leased.id == run.id
    assert reap_once(db.session(), later + TTL + timedelta(seconds=1)) == 1  # never started
    page = Panel(app, world.alice).get(f"/runs/{run.id}").get_data(as_text=True)
    assert f"jitter +{delay} s" in page  # not the time it was taken back at


def test_the_api_refuses_a_jitter_out_of_bounds_with_problem_details(
    app: Flask, world: World
) -> None:
    api = Api(app, world.alpha, world.alice)
    response = api.post("/api/v1/schedules", {**NEW, "cron": "*/5 * * * *", "jitter_seconds": 900})
    assert response.status_code == 422
    assert problem_fields(response) == {"jitter_seconds": f"{RULE_5_MIN}, not 900"}
    assert db.session.scalars(select(Schedule)).all() == []
    created = api.post("/api/v1/schedules", {**NEW, "jitter_seconds": 45})
    assert created.status_code == 201 and created.get_json()["jitter_seconds"] == 45
    url = f"/api/v1/schedules/{created.get_json()['id']}"
    patched = api.patch(url, {"jitter_seconds": -5}, headers={"If-Match": created.headers["ETag"]})
    assert patched.status_code == 422
    assert problem_fields(patched) == {"jitter_seconds": "must be 0 to 3600 s, not -5"}
    assert api.get(url).get_json()["jitter_seconds"] == 45


def test_import_refuses_and_export_carries_the_jitter(
    app: Flask, cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    item = {"key": "a", "name": "A", "job": "demo.echo", "args": {"message": "m"}}
    path = tmp_path / "schedules.json"
    path.write_text(json.dumps([{**item, "cron": "*/5 * * * *", "jitter_seconds": 400}]))
    result = cli.invoke(args=["schedule", "import", str(path), "--tenant", "alpha"])
    assert result.exit_code == 1
    assert f"item 0 (key 'a'): jitter_seconds: {RULE_5_MIN}, not 400" in result.stderr
    assert db.session.scalars(select(Schedule)).all() == []
    path.write_text(json.dumps([{**item, "cron": "@daily", "jitter_seconds": 400}]))
    assert cli.invoke(args=["schedule", "import", str(path), "--tenant", "alpha"]).exit_code == 0
    exported = json.loads(cli.invoke(args=["schedule", "export", "--tenant", "alpha"]).stdout)
    assert exported[0]["jitter_seconds"] == 400


# --- The tenant's default ----------------------------------------------------------------------


def test_the_cli_sets_the_tenant_default_audited_and_refuses_bad_values(
    app: Flask, cli: FlaskCliRunner, world: World
) -> None:
    for bad in ("-5", "3601"):
        result = cli.invoke(args=["tenant", "set", "alpha", "--jitter-seconds", bad])
        assert result.exit_code == 1, result.output
        assert "--jitter-seconds must be from 0 to 3600 s, or 'default'" in result.stderr
    result = cli.invoke(args=["tenant", "set", "alpha", "--jitter-seconds", "90"])
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("jitter seconds 90\n")
    db.session.expire_all()
    assert (
        db.session.scalars(select(Tenant.jitter_seconds).where(Tenant.slug == "alpha")).one() == 90
    )
    assert cli.invoke(args=["tenant", "set", "alpha", "--jitter-seconds", "default"]).exit_code == 0
    events = db.session.scalars(
        select(AuditEvent)
        .where(AuditEvent.action == "tenant.limits_changed")
        .order_by(AuditEvent.id)
    ).all()
    assert [(e.before, e.after) for e in events] == [
        ({"jitter_seconds": None}, {"jitter_seconds": 90}),
        ({"jitter_seconds": 90}, {"jitter_seconds": None}),
    ]


def test_admins_see_the_tenant_default_on_the_settings_page(app: Flask, world: World) -> None:
    world.alpha.jitter_seconds = 120
    db.session.commit()
    for user in (world.alice, world.bob):
        page = Panel(app, user).get("/settings/notifications").get_data(as_text=True)
        assert "each run starts up to 120 s after its fire time" in page
