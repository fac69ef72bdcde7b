"""Backfill: one run per fire time of a past window, from the panel, the CLI and the API, on
SQLite and PostgreSQL. Fire times that already have a run are skipped, the window's fire times
follow the cron module's DST rules, bad windows are refused with the rule and nothing queued,
and every backfill is one audit event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select, update

from tests.api_helpers import Api, problem_fields
from tests.browser_support import LiveServer, PageErrors, log_in
from tests.conftest import World, make_run, make_schedule
from tests.panel_helpers import Panel
from webapp import cron
from webapp.catalog.current import current_catalog
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule
from webapp.services.accounts import find_tenant
from webapp.services.audit import Actor
from webapp.services.backfill import MAX_BACKFILL_RUNS, backfill, plan_backfill
from webapp.services.schedules import ScheduleInput, create_schedule, pause_schedule
from webapp.services.schema import ScheduleError

NOW = datetime.now(UTC)
# A past window of an hourly schedule in Europe/Berlin (UTC+1 in January): 06:00 to 11:00
# local, both ends included: six fire times, 05:00 to 10:00 UTC.
JANUARY = {"from": "2026-01-05T06:00", "to": "2026-01-05T11:00"}
# What each schedule here has but its cron: made by alice, in Berlin, its runs say "backfilled".
BACKFILLED: dict[str, Any] = {"time_zone": "Europe/Berlin", "args": {"message": "backfilled"}}
JANUARY_FIRES = [datetime(2026, 1, 5, hour, tzinfo=UTC) for hour in range(5, 11)]


def backfill_runs(schedule_id: int | None = None) -> list[Run]:
    query = select(Run).where(Run.trigger == "backfill").order_by(Run.scheduled_for)
    if schedule_id is not None:
        query = query.where(Run.schedule_id == schedule_id)
    return list(db.session.scalars(query))


def backfill_events() -> list[AuditEvent]:
    query = select(AuditEvent).where(AuditEvent.action == "schedule.backfilled")
    return list(db.session.scalars(query))


def nothing_written() -> None:
    assert backfill_runs() == []
    assert backfill_events() == []


# --- The service: counts, skips, DST, limits -------------------------------------------------


def test_one_queued_run_per_fire_time_with_the_ticks_fields(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    result = backfill(schedule, JANUARY["from"], JANUARY["to"], Actor.for_user(world.alice), NOW)
    assert (result.queued, result.skipped) == (6, 0)
    runs = backfill_runs()
    assert [run.scheduled_for for run in runs] == JANUARY_FIRES
    echo = current_catalog().get("demo.echo")
    for run in runs:
        assert run.status == "queued" and run.attempt == 0
        assert run.tenant_id == world.alpha.id and run.schedule_id == schedule.id
        assert (run.job, run.args) == ("demo.echo", {"message": "backfilled"})
        assert run.max_attempts == echo.max_attempts
        fire = f"{run.scheduled_for:%Y-%m-%dT%H:%M:%SZ}"
        assert run.idempotency_key == f"schedule:{schedule.id}:{fire}"  # the tick's key
        assert run.available_at == NOW and run.queued_at == NOW  # available now
        assert run.requested_by == world.alice.id


def test_fire_times_that_already_have_a_run_are_skipped(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    make_run(schedule, "succeeded", scheduled_for=JANUARY_FIRES[2])  # the tick fired it
    make_run(schedule, "failed", scheduled_for=JANUARY_FIRES[4], trigger="catchup")
    # A manual run at a fire time is outside the unique index: it does not stand for the fire.
    make_run(schedule, "succeeded", scheduled_for=JANUARY_FIRES[0], trigger="manual")
    db.session.commit()
    plan = plan_backfill(schedule, JANUARY["from"], JANUARY["to"], NOW)
    assert (plan.count, plan.existing, plan.new) == (6, 2, 4)
    alice = Actor.for_user(world.alice)
    first = backfill(schedule, JANUARY["from"], JANUARY["to"], alice, NOW)
    assert (first.queued, first.skipped) == (4, 2)
    assert [r.scheduled_for for r in backfill_runs()] == [JANUARY_FIRES[i] for i in (0, 1, 3, 5)]
    again = backfill(schedule, "2026-01-05T05:00", JANUARY["to"], alice, NOW)
    assert (again.queued, again.skipped) == (1, 6)  # only 04:00 UTC is new
    assert len(backfill_runs()) == 5


def test_a_spring_forward_day_follows_debian_crons_rules(app: Flask, world: World) -> None:
    """Europe/Berlin skips 02:00-02:59 on 2026-03-29: a fixed-time job runs at 03:00 that day,
    a wildcard job in that hour does not run at all."""
    alice = Actor.for_user(world.alice)
    window = ("2026-03-28T00:00", "2026-03-30T23:59")
    fixed = make_schedule(
        world.alpha, "Fixed", by=world.alice, key="fixed", cron="30 2 * * *", **BACKFILLED
    )
    backfill(fixed, *window, alice, NOW)
    assert [r.scheduled_for for r in backfill_runs(fixed.id)] == [
        datetime(2026, 3, 28, 1, 30, tzinfo=UTC),  # 02:30 CET
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # 03:00 CEST, the first instant after the gap
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),  # 02:30 CEST
    ]
    gap_day = plan_backfill(fixed, "2026-03-29T00:00", "2026-03-29T23:59", NOW)
    assert gap_day.first is not None
    assert gap_day.spec.dst_note(gap_day.first) == "02:30 does not exist on this day: runs at 03:00"
    wildcard = make_schedule(
        world.alpha, "Wildcard", by=world.alice, key="wildcard", cron="*/30 2 * * *", **BACKFILLED
    )
    backfill(wildcard, *window, alice, NOW)
    assert [r.scheduled_for for r in backfill_runs(wildcard.id)] == [
        datetime(2026, 3, 28, 1, 0, tzinfo=UTC),
        datetime(2026, 3, 28, 1, 30, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 0, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]
    hourly = make_schedule(
        world.alpha, "Hourly", by=world.alice, key="hourly-dst", cron="0 * * * *", **BACKFILLED
    )
    day = backfill(hourly, "2026-03-29T00:00", "2026-03-29T23:59", alice, NOW)
    assert day.queued == 23  # the day has 23 hours
    spec = cron.validate("0 * * * *", "Europe/Berlin")
    start = datetime(2026, 3, 28, 23, tzinfo=UTC) - timedelta(microseconds=1)
    expected = spec.fire_times_between(start, datetime(2026, 3, 29, 21, 59, tzinfo=UTC))
    assert [r.scheduled_for for r in backfill_runs(hourly.id)] == expected


def test_at_most_a_thousand_runs_per_request(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "Minutely", by=world.alice, key="minutely", cron="* * * * *", **BACKFILLED
    )
    alice = Actor.for_user(world.alice)
    # 2026-01-05 00:00 to 16:39 local, both ends included: exactly 1,000 minutes.
    result = backfill(schedule, "2026-01-05T00:00", "2026-01-05T16:39", alice, NOW)
    assert result.queued == MAX_BACKFILL_RUNS == 1000
    with pytest.raises(ScheduleError) as refused:
        backfill(schedule, "2026-01-06T00:00", "2026-01-06T16:40", alice, NOW)
    assert refused.value.errors == {
        "window": "the window holds 1,001 fire times; a backfill queues at most 1,000 runs "
        "per request: choose a shorter window"
    }
    with pytest.raises(ScheduleError) as huge:
        plan_backfill(schedule, "2025-01-01T00:00", "2026-01-01T00:00", NOW)
    assert "more than 10,000 fire times" in huge.value.errors["window"]
    assert len(backfill_runs()) == 1000 and len(backfill_events()) == 1


def test_a_window_before_the_schedule_existed_and_a_paused_schedule(
    app: Flask, world: World
) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    assert schedule.created_at > JANUARY_FIRES[-1]
    pause_schedule(schedule, Actor.for_user(world.alice))
    plan = plan_backfill(schedule, JANUARY["from"], JANUARY["to"], NOW)
    assert plan.paused and plan.count == 6
    result = backfill(schedule, JANUARY["from"], JANUARY["to"], Actor.for_user(world.alice), NOW)
    assert result.queued == 6
    assert all(run.status == "queued" for run in backfill_runs())


def test_the_current_instant_may_end_the_window(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    now = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)  # a fire time
    plan = plan_backfill(schedule, "2026-01-05T09:30:00+00:00", now.isoformat(), now)
    assert plan.fires == [now]
    with pytest.raises(ScheduleError) as future:
        plan_backfill(schedule, "2026-01-05T09:00:00+00:00", "2026-01-05T10:00:01+00:00", now)
    assert future.value.errors == {
        "to": "2026-01-05T10:00:01Z is in the future: a backfill covers past fire times only "
        "(now is 2026-01-05T10:00:00Z)"
    }


def test_a_job_that_cannot_run_is_refused(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    db.session.execute(update(Schedule).values(args={"message": 5}))
    db.session.commit()
    with pytest.raises(ScheduleError) as bad_args:
        backfill(schedule, JANUARY["from"], JANUARY["to"], Actor.cli(), NOW)
    assert bad_args.value.errors == {"args.message": "Input should be a valid string"}
    db.session.execute(update(Schedule).values(job="os.system"))
    db.session.commit()
    with pytest.raises(ScheduleError) as unknown:
        backfill(schedule, JANUARY["from"], JANUARY["to"], Actor.cli(), NOW)
    assert unknown.value.errors == {"job": "job 'os.system' is not in the catalog"}
    nothing_written()


def test_one_audit_event_with_the_window_and_the_counts(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    make_run(schedule, "succeeded", scheduled_for=JANUARY_FIRES[1])
    db.session.commit()
    backfill(schedule, JANUARY["from"], JANUARY["to"], Actor.for_user(world.alice), NOW)
    [event] = backfill_events()
    assert (event.tenant_id, event.object_type, event.object_id) == (
        world.alpha.id,
        "schedule",
        schedule.id,
    )
    assert (event.actor_id, event.actor_label) == (world.alice.id, "alice@example.com")
    assert event.after == {
        "from": "2026-01-05T05:00:00+00:00",
        "to": "2026-01-05T10:00:00+00:00",
        "queued": 5,
        "skipped": 1,
    }


# --- Bad input, on each way in ---------------------------------------------------------------

FUTURE = (NOW + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
BAD_WINDOWS = {
    "future": ({"from": "2026-01-05T06:00", "to": FUTURE}, "to", "is in the future"),
    "reversed": ({"from": "2026-01-05T11:00", "to": "2026-01-05T06:00"}, "to", "must be after"),
    "too long": (
        {"from": "2025-01-01T00:00", "to": "2025-03-01T00:00"},
        "window",
        "a backfill queues at most 1,000 runs per request",
    ),
    "unparseable from": ({"from": "yesterday", "to": "2026-01-05T06:00"}, "from", "not an ISO"),
    "unparseable to": ({"from": "2026-01-05T06:00", "to": "2026-13-01T00:00"}, "to", "not an"),
    "missing from": ({"from": "", "to": "2026-01-05T06:00"}, "from", "required"),
    "out of range": ({"from": "0999-01-01T00:00", "to": "2026-01-05T06:00"}, "from", "1970"),
    "empty window": ({"from": "2026-01-05T06:10", "to": "2026-01-05T06:50"}, "window", "no fire"),
}
bad_windows = pytest.mark.parametrize(
    ("window", "field", "message"), list(BAD_WINDOWS.values()), ids=list(BAD_WINDOWS)
)


@bad_windows
def test_the_panel_refuses_a_bad_window(
    app: Flask, world: World, window: dict[str, str], field: str, message: str
) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    alice = Panel(app, world.alice)
    url = f"/schedules/{schedule.id}/backfill"
    queued = alice.post(url, window, htmx=False)
    assert queued.status_code == 422 and message in queued.get_data(as_text=True)
    if field != "window" or message != "no fire":  # an empty window's preview says so, no error
        preview = alice.get(url, query_string=window)
        assert preview.status_code == 422 and message in preview.get_data(as_text=True)
        assert "Queue " not in preview.get_data(as_text=True)
    nothing_written()


@bad_windows
def test_the_cli_refuses_a_bad_window(
    cli: FlaskCliRunner, world: World, window: dict[str, str], field: str, message: str
) -> None:
    make_schedule(world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED)
    args = ["schedule", "backfill", "hourly", "--tenant", "alpha"]
    args += ["--from", window["from"], "--to", window["to"]]
    result = cli.invoke(args=args)
    assert result.exit_code == 1 and message in result.stderr
    assert result.stderr.startswith(f"Error: {field}: ")
    nothing_written()


@bad_windows
def test_the_api_refuses_a_bad_window(
    app: Flask, world: World, window: dict[str, str], field: str, message: str
) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    api = Api(app, world.alpha, world.alice)
    response = api.post(f"/api/v1/schedules/{schedule.id}/backfill", window)
    assert response.status_code == 422
    assert message in problem_fields(response)[field]
    nothing_written()


def test_the_api_refuses_a_malformed_body(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    api = Api(app, world.alpha, world.alice)
    url = f"/api/v1/schedules/{schedule.id}/backfill"
    assert problem_fields(api.post(url, {"from": JANUARY["from"]})) == {"to": "field required"}
    wrong = api.post(url, {**JANUARY, "dry_run": "maybe", "extra": 1})
    assert wrong.status_code == 422 and set(problem_fields(wrong)) == {"dry_run", "extra"}
    assert api.post(url, data="{", content_type="application/json").status_code == 400
    nothing_written()


# --- Viewers and other tenants ---------------------------------------------------------------


def test_a_viewer_gets_403_and_another_tenant_404(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    url = f"/schedules/{schedule.id}/backfill"
    bob = Panel(app, world.bob)  # alpha's viewer
    assert bob.get(url).status_code == 403
    assert bob.get(url, query_string=JANUARY).status_code == 403
    assert bob.post(url, JANUARY, htmx=False).status_code == 403
    assert "Backfill" not in bob.get(f"/schedules/{schedule.id}").get_data(as_text=True)
    charlie = Panel(app, world.charlie)  # beta's admin
    assert charlie.get(url, query_string=JANUARY).status_code == 404
    assert charlie.post(url, JANUARY, htmx=False).status_code == 404
    api_url = f"/api/v1/schedules/{schedule.id}/backfill"
    read = Api(app, world.alpha, world.alice, scope="read")
    assert read.post(api_url, JANUARY).status_code == 403
    beta = Api(app, world.beta, world.charlie)
    assert beta.post(api_url, {**JANUARY, "dry_run": True}).status_code == 404
    nothing_written()


def test_the_cli_finds_schedules_in_the_given_tenant_only(
    cli: FlaskCliRunner, world: World
) -> None:
    make_schedule(world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED)
    args = ["schedule", "backfill", "hourly", "--tenant", "beta"]
    result = cli.invoke(args=[*args, "--from", JANUARY["from"], "--to", JANUARY["to"]])
    assert result.exit_code == 1
    assert result.stderr == "Error: key: tenant 'beta' has no schedule with key 'hourly'\n"
    nothing_written()


# --- The three ways in -----------------------------------------------------------------------


def test_the_panel_previews_then_queues(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    make_run(schedule, "succeeded", scheduled_for=JANUARY_FIRES[0])
    db.session.commit()
    pause_schedule(schedule, Actor.for_user(world.alice))
    alice = Panel(app, world.alice)
    detail = alice.get(f"/schedules/{schedule.id}").get_data(as_text=True)
    url = f"/schedules/{schedule.id}/backfill"
    assert f'href="{url}"' in detail
    form = alice.get(url)
    assert form.status_code == 200 and "Preview" in form.get_data(as_text=True)
    preview = alice.get(url, query_string=JANUARY).get_data(as_text=True)
    assert "6 fire times in the window" in preview
    assert "2026-01-05 06:00 CET (+01:00)" in preview and "2026-01-05 05:00 UTC" in preview
    assert "2026-01-05 11:00 CET (+01:00)" in preview and "2026-01-05 10:00 UTC" in preview
    assert "1 already has a run" in preview
    assert "paused: the runs will still run" in preview
    assert "Queue 5 runs" in preview
    nothing_written()  # a preview changes nothing
    assert alice.post(url, JANUARY, htmx=False, csrf=False).status_code == 400  # CSRF
    queued = alice.post(url, JANUARY, htmx=False)
    assert queued.status_code == 303
    assert queued.location == f"/runs?schedule={schedule.id}&trigger=backfill"
    history = alice.get(queued.location).get_data(as_text=True)
    assert "Backfill of “Hourly report”: 5 runs queued, 1 skipped (already had a run)." in history
    assert len(backfill_runs()) == 5 and len(backfill_events()) == 1


def test_the_cli_prints_the_preview_and_what_it_queued(cli: FlaskCliRunner, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    make_run(schedule, "succeeded", scheduled_for=JANUARY_FIRES[0])
    db.session.commit()
    args = ["schedule", "backfill", "hourly", "--tenant", "alpha"]
    args += ["--from", JANUARY["from"], "--to", JANUARY["to"]]
    dry = cli.invoke(args=[*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.stdout == (
        "hourly: 6 fire times in the window\n"
        "first: 2026-01-05T06:00:00+01:00 (2026-01-05T05:00:00Z)\n"
        "last: 2026-01-05T11:00:00+01:00 (2026-01-05T10:00:00Z)\n"
        "dry run: would queue 5, skip 1 (already have a run)\n"
    )
    nothing_written()
    pause_schedule(db.session.get_one(Schedule, schedule.id), Actor.cli())
    done = cli.invoke(args=args)
    assert done.exit_code == 0, done.output
    assert done.stdout.endswith(
        "paused: the runs will still run\nqueued 5, skipped 1 (already had a run)\n"
    )
    assert len(backfill_runs()) == 5
    [event] = backfill_events()
    assert event.actor_label == "cli"


def test_the_api_answers_the_preview_or_the_result(app: Flask, world: World) -> None:
    schedule = make_schedule(
        world.alpha, "Hourly report", by=world.alice, key="hourly", **BACKFILLED
    )
    make_run(schedule, "succeeded", scheduled_for=JANUARY_FIRES[0])
    db.session.commit()
    api = Api(app, world.alpha, world.alice)
    url = f"/api/v1/schedules/{schedule.id}/backfill"
    window = {"from": "2026-01-05T05:00:00Z", "to": "2026-01-05T11:00:00+01:00"}
    dry = api.post(url, {**window, "dry_run": True})
    assert dry.status_code == 200
    assert dry.get_json() == {
        "schedule_id": schedule.id,
        "time_zone": "Europe/Berlin",
        "from": "2026-01-05T05:00:00Z",
        "to": "2026-01-05T10:00:00Z",
        "count": 6,
        "first": {"at": "2026-01-05T05:00:00Z", "local": "2026-01-05T06:00:00+01:00", "note": None},
        "last": {"at": "2026-01-05T10:00:00Z", "local": "2026-01-05T11:00:00+01:00", "note": None},
        "already_recorded": 1,
        "paused": False,
        "max_runs": 1000,
        "dry_run": True,
        "queued": None,
        "skipped": None,
    }
    nothing_written()
    key = {"Idempotency-Key": "backfill-january"}
    done = api.post(url, window, headers=key)
    assert done.status_code == 200
    assert (done.get_json()["queued"], done.get_json()["skipped"]) == (5, 1)
    again = api.post(url, window, headers=key)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json() == done.get_json()
    assert len(backfill_runs()) == 5 and len(backfill_events()) == 1
    [event] = backfill_events()
    assert event.actor_label.startswith("token ")
    listed = api.get("/api/v1/runs", query_string={"trigger": "backfill"}).get_json()
    assert len(listed["items"]) == 5


def test_the_openapi_document_describes_the_backfill(app: Flask) -> None:
    document = app.test_client().get("/api/v1/openapi.json").get_json()
    operation = document["paths"]["/api/v1/schedules/{schedule_id}/backfill"]["post"]
    assert operation["operationId"] == "backfill"
    assert "Idempotency-Key" in [p["name"] for p in operation["parameters"]]
    body = document["components"]["schemas"]["BackfillIn"]
    assert set(body["properties"]) == {"from", "to", "dry_run"}
    assert set(body["required"]) == {"from", "to"}
    answer = document["components"]["schemas"]["BackfillOut"]
    assert {"from", "to", "count", "first", "last", "paused", "queued"} <= set(answer["properties"])


# --- In the browser --------------------------------------------------------------------------


@pytest.mark.browser
def test_backfill_preview_queue_in_chromium(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    with live_panel.app.app_context():
        tenant = find_tenant("alpha")
        schedule = create_schedule(
            tenant,
            ScheduleInput(
                name="Browser hourly",
                job="demo.echo",
                args={"message": "m"},
                cron="0 * * * *",
                time_zone="Europe/Berlin",
            ),
            Actor.cli(),
            datetime.now(UTC),
        )
        schedule_id = schedule.id
        make_run(schedule, "succeeded", scheduled_for=JANUARY_FIRES[0])
        db.session.commit()
        db.session.remove()
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.goto(f"{live_panel.url}/schedules/{schedule_id}")
    page.get_by_role("link", name="Backfill").click()
    page.get_by_label("From").fill(JANUARY["from"])
    page.get_by_label("To").fill(JANUARY["to"])
    page.get_by_role("button", name="Preview").click()
    page.get_by_text("6 fire times in the window").wait_for()
    page.get_by_text("2026-01-05 11:00 CET (+01:00)").wait_for()
    page.get_by_role("button", name="Queue 5 runs").click()
    page.locator("#flashes").get_by_text("5 runs queued, 1 skipped").wait_for()
    assert page.url == f"{live_panel.url}/runs?schedule={schedule_id}&trigger=backfill"
    with live_panel.app.app_context():
        assert len(backfill_runs(schedule_id)) == 5
        db.session.remove()
    assert errors.messages == []
