"""The REST API under /api/v1: tokens, tenant scoping, the schedule and run endpoints, problem
details for bad input; on both databases, through the real service layer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from flask import Flask
from sqlalchemy import select

from tests.api_helpers import NEW, Api, count, problem_fields
from tests.conftest import World, make_run, make_schedule
from tests.panel_helpers import Panel
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule
from webapp.services import tokens
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleInput, create_schedule


def audit_of(schedule_id: int) -> list[tuple[str, str]]:
    rows = db.session.execute(
        select(AuditEvent.action, AuditEvent.actor_label)
        .where(AuditEvent.object_type == "schedule", AuditEvent.object_id == schedule_id)
        .order_by(AuditEvent.id)
    )
    return [(action, label) for action, label in rows]


def test_a_token_creates_a_schedule_runs_it_and_reads_the_run(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    created = api.post("/api/v1/schedules", NEW)
    assert created.status_code == 201, created.get_json()
    schedule = created.get_json()
    assert created.headers["Location"] == f"/api/v1/schedules/{schedule['id']}"
    assert schedule["key"] == "nightly-report" and schedule["time_zone"] == "Europe/Berlin"
    assert schedule["next_run_at"].endswith("Z")
    assert schedule["description"]
    fetched = api.get(created.headers["Location"]).get_json()
    assert fetched == schedule
    run = api.post(f"/api/v1/schedules/{schedule['id']}/runs")
    assert run.status_code == 201
    assert run.headers["Location"] == f"/api/v1/runs/{run.get_json()['id']}"
    detail = api.get(run.headers["Location"]).get_json()
    assert detail["status"] == "queued" and detail["trigger"] == "manual"
    assert detail["time_zone"] == "Europe/Berlin" and detail["args"] == {"message": "hello"}
    listed = api.get(f"/api/v1/runs?schedule_id={schedule['id']}").get_json()
    assert [item["id"] for item in listed["items"]] == [detail["id"]]
    label = f"token {api.token.prefix} (write token)"
    assert audit_of(schedule["id"]) == [("schedule.created", label), ("schedule.run_now", label)]


def test_bad_input_names_the_field_with_the_panels_messages_and_writes_nothing(
    app: Flask, world: World
) -> None:
    api = Api(app, world.alpha, world.alice)
    cases = [
        ({**NEW, "cron": "0 0 30 2 *"}, "cron"),
        ({**NEW, "time_zone": "Mars/Olympus"}, "time_zone"),
        ({**NEW, "job": "os.system"}, "job"),
        ({**NEW, "args": {"message": 5}}, "args.message"),
        ({**NEW, "colour": "red"}, "colour"),
        ({**NEW, "name": "x\x00y"}, "name"),
        ({**NEW, "args": {"message": "a\x00"}}, "args.message"),
        # A lone surrogate (JSON's "\ud800") is no text at all: SQLite stored it, and every
        # page, export and worker that read it back failed.
        ({**NEW, "name": "x\ud800y"}, "name"),
        ({**NEW, "args": {"message": "\udfff"}}, "args.message"),
        ({**NEW, "args": {"\ud800": "x"}}, "args.\\ud800"),
        ({k: v for k, v in NEW.items() if k != "cron"}, "cron"),
    ]
    for document, field in cases:
        response = api.post("/api/v1/schedules", document)
        assert response.status_code == 422, (document, response.get_json())
        assert field in problem_fields(response), (document, response.get_json())
    assert problem_fields(api.post("/api/v1/schedules", {**NEW, "colour": 1})) == {
        "colour": "unknown field"
    }
    assert count(Schedule) == 0


def test_malformed_bodies_answer_problem_details(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    url = "/api/v1/schedules"
    not_json = api.post(url, data="{nope", headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400 and "not valid JSON" in not_json.get_json()["detail"]
    form = api.post(url, data="name=x", headers={"Content-Type": "text/plain"})
    assert form.status_code == 415 and form.mimetype == "application/problem+json"
    listing = api.post(url, [NEW])
    assert problem_fields(listing) == {"body": "must be a JSON object"}
    huge = api.post(url, {**NEW, "name": "x" * 2_000_000})
    assert huge.status_code == 413 and huge.mimetype == "application/problem+json"
    assert count(Schedule) == 0


def test_query_strings_are_checked_and_pages_follow_the_cursor(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    for number in range(5):
        make_schedule(world.alpha, f"S{number}", by=world.alice, cron="0 * * * *")
    first = api.get("/api/v1/schedules?limit=2").get_json()
    assert [s["name"] for s in first["items"]] == ["S0", "S1"]
    second = api.get(f"/api/v1/schedules?limit=2&cursor={first['next_cursor']}").get_json()
    third = api.get(f"/api/v1/schedules?limit=2&cursor={second['next_cursor']}").get_json()
    assert [s["name"] for s in second["items"] + third["items"]] == ["S2", "S3", "S4"]
    assert third["next_cursor"] is None
    for bad, field in [
        ("limit=100000", "limit"),
        ("limit=x", "limit"),
        ("cursor=abc", "cursor"),
        ("status=sleeping", "status"),
        ("colour=red", "colour"),
    ]:
        response = api.get(f"/api/v1/schedules?{bad}")
        assert response.status_code == 400, bad
        assert field in problem_fields(response), bad
    nul = api.get("/api/v1/schedules?q=a%00b")
    assert nul.status_code == 400 and nul.mimetype == "application/problem+json"


def test_other_tenants_ids_answer_404_and_read_tokens_403_on_writes(
    app: Flask, world: World
) -> None:
    alpha = make_schedule(world.alpha, "Alpha", by=world.alice, cron="0 * * * *")
    run = make_run(alpha, "succeeded", 5, output="alpha-output")
    db.session.commit()
    charlie = Api(app, world.beta, world.charlie)
    for url in (f"/api/v1/schedules/{alpha.id}", f"/api/v1/runs/{run.id}"):
        response = charlie.get(url)
        assert response.status_code == 404 and "alpha" not in response.get_data(as_text=True)
    assert charlie.delete(f"/api/v1/schedules/{alpha.id}").status_code == 404
    assert charlie.get(f"/api/v1/runs?schedule_id={alpha.id}").status_code == 404
    assert charlie.get("/api/v1/schedules").get_json()["items"] == []
    reader = Api(app, world.alpha, world.bob, scope="read")
    assert reader.get(f"/api/v1/schedules/{alpha.id}").status_code == 200
    writes = [
        reader.post("/api/v1/schedules", NEW),
        reader.patch(f"/api/v1/schedules/{alpha.id}", {"name": "x"}),
        reader.delete(f"/api/v1/schedules/{alpha.id}"),
        reader.post(f"/api/v1/schedules/{alpha.id}/pause"),
        reader.post(f"/api/v1/schedules/{alpha.id}/runs"),
    ]
    assert [w.status_code for w in writes] == [403] * 5
    db.session.refresh(alpha)
    assert alpha.active and alpha.name == "Alpha" and count(Run) == 1


def test_missing_revoked_and_expired_tokens_answer_401_and_the_session_cookie_is_ignored(
    app: Flask, world: World
) -> None:
    api = Api(app, world.alpha, world.alice)
    assert api.get("/api/v1/schedules").status_code == 200
    panel = Panel(app, world.alice)  # logged in to the panel: no use to the API
    anonymous = panel.client.get("/api/v1/schedules")
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
    assert anonymous.mimetype == "application/problem+json"
    assert panel.client.post("/api/v1/schedules", json=NEW).status_code == 401
    _expiring, expiring = tokens.create_token(
        world.alpha, "short", "write", 1, Actor.for_user(world.alice), utcnow() - timedelta(days=2)
    )
    headers = {"Authorization": f"Bearer {expiring}"}
    assert api.client.get("/api/v1/schedules", headers=headers).status_code == 401
    tokens.revoke_token(api.token, Actor.for_user(world.alice), utcnow())
    assert api.get("/api/v1/schedules").status_code == 401
    assert count(Schedule) == 0


def test_patch_changes_only_the_given_fields_through_the_same_checks(
    app: Flask, world: World
) -> None:
    api = Api(app, world.alpha, world.alice)
    schedule = api.post("/api/v1/schedules", NEW).get_json()
    url = f"/api/v1/schedules/{schedule['id']}"
    changed = api.patch(url, {"name": "Renamed", "cron": "0 3 * * *"})
    assert changed.status_code == 200, changed.get_json()
    assert changed.get_json()["name"] == "Renamed"
    assert changed.get_json()["args"] == {"message": "hello"}
    refused = api.patch(url, {"cron": "61 * * * *"})
    assert refused.status_code == 422 and "cron" in problem_fields(refused)
    assert api.get(url).get_json()["cron"] == "0 3 * * *"
    assert api.delete(url).status_code == 204
    assert api.get(url).status_code == 404


def test_pause_resume_and_run_at(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    schedule = api.post("/api/v1/schedules", NEW).get_json()
    url = f"/api/v1/schedules/{schedule['id']}"
    assert api.post(f"{url}/pause").get_json()["active"] is False
    bad = api.post(f"{url}/resume", {"missed": "later"})
    assert bad.status_code == 422 and "missed" in problem_fields(bad)
    resumed = api.post(f"{url}/resume", {"missed": "catch_up"})
    assert resumed.get_json()["active"] is True
    at = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    run = api.post(f"{url}/runs", {"at": at.isoformat()}).get_json()
    assert datetime.fromisoformat(run["available_at"]) == at
    # Without an offset, a wall-clock time in the schedule's zone: as the panel and the CLI read it.
    wall = at.astimezone(ZoneInfo("Europe/Berlin")).replace(tzinfo=None) + timedelta(hours=1)
    run = api.post(f"{url}/runs", {"at": wall.isoformat()}).get_json()
    assert datetime.fromisoformat(run["available_at"]) == at + timedelta(hours=1)
    far = api.post(f"{url}/runs", {"at": "2999-01-01T00:00:00Z"})
    assert far.status_code == 422 and "at" in problem_fields(far)
    ancient = api.post(f"{url}/runs", {"at": "0001-01-01T00:00:00"})
    assert problem_fields(ancient)["at"] == "0001-01-01T00:00:00 is outside the years 1970 to 2999"


def test_fires_catalog_and_cron_preview(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    schedule = create_schedule(
        world.alpha,
        ScheduleInput(
            name="N",
            job="demo.echo",
            args={"message": "m"},
            cron="30 2 * * *",
            time_zone="Europe/Berlin",
        ),
        Actor.for_user(world.alice),
        datetime.now(UTC),
    )
    fires = api.get(f"/api/v1/schedules/{schedule.id}/fires?count=3").get_json()
    assert len(fires["fires"]) == 3 and fires["time_zone"] == "Europe/Berlin"
    assert fires["fires"][0]["local"][11:16] == "02:30"
    assert api.get(f"/api/v1/schedules/{schedule.id}/fires?count=1000").status_code == 400
    jobs = {job["name"]: job for job in api.get("/api/v1/catalog").get_json()["jobs"]}
    assert "message" in jobs["demo.echo"]["params_schema"]["properties"]
    assert "maintenance.prune_runs" not in jobs  # a system job
    preview = api.get("/api/v1/cron/preview?expression=*/15+*+*+*+*&time_zone=Asia/Kolkata")
    assert preview.status_code == 200 and len(preview.get_json()["fires"]) == 5
    wrong = api.get("/api/v1/cron/preview?expression=0+0+30+2+*")
    assert wrong.status_code == 400 and "expression" in problem_fields(wrong)


def test_cron_parse_answers_a_phrase_as_cron_and_words(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice, scope="read")
    parsed = api.get("/api/v1/cron/parse", query_string={"text": "every weekday at 9:30"})
    assert parsed.status_code == 200
    assert parsed.get_json() == {
        "text": "every weekday at 9:30",
        "cron": "30 9 * * 1-5",
        "description": "At 09:30, Monday through Friday",
    }
    first = api.get("/api/v1/cron/parse", query_string={"text": "the first Monday at 8:00"})
    assert first.get_json()["cron"] == "0 8 * * 1#1"
    assert first.get_json()["description"] == "At 08:00, on the first Monday of the month"
    cron_text = api.get("/api/v1/cron/parse", query_string={"text": "*/5 * * * *"}).get_json()
    assert cron_text["cron"] == "*/5 * * * *" and cron_text["description"] == "Every 5 minutes"


def test_cron_parse_answers_a_phrase_not_understood_with_a_problem_and_examples(
    app: Flask, world: World
) -> None:
    api = Api(app, world.alpha, world.alice)
    wrong = api.get("/api/v1/cron/parse", query_string={"text": "every blue moon at 9"})
    assert wrong.status_code == 400
    assert wrong.content_type == "application/problem+json"
    problem = wrong.get_json()
    assert problem["type"] == "/api/docs#problem-phrase-not-understood"
    assert problem["title"] == "Phrase not understood"
    assert problem["detail"].startswith("did not understand “blue” in “every blue moon at 9”")
    assert problem_fields(wrong) == {"text": "did not understand “blue” in “every blue moon at 9”"}
    assert problem["examples"] == [
        "every weekday at 9:30",
        "every 15 minutes",
        "the last day of the month at 23:00",
    ]
    never = api.get("/api/v1/cron/parse", query_string={"text": "on February 30th"})
    assert never.status_code == 400
    assert "February never has 30 days" in problem_fields(never)["text"]
    assert api.get("/api/v1/cron/parse").status_code == 400  # no text
    too_long = api.get("/api/v1/cron/parse", query_string={"text": "every day " * 30})
    assert too_long.status_code == 400 and "text" in problem_fields(too_long)


@pytest.mark.parametrize(
    ("method", "url", "status"),
    [("get", "/api/v1/nothing", 404), ("put", "/api/v1/schedules", 405)],
)
def test_unknown_urls_and_methods_answer_problem_details(
    app: Flask, world: World, method: str, url: str, status: int
) -> None:
    api = Api(app, world.alpha, world.alice)
    response = api.client.open(url, method=method.upper(), headers=api.headers())
    assert response.status_code == status
    assert response.mimetype == "application/problem+json"
    assert response.get_json()["status"] == status


def test_the_run_list_filters_as_the_history_page(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    schedule = make_schedule(world.alpha, "S", by=world.alice, cron="0 * * * *")
    failed = make_run(schedule, "failed", 60)
    make_run(schedule, "succeeded", 30)
    db.session.commit()
    listed = api.get("/api/v1/runs?status=failed").get_json()
    assert [run["id"] for run in listed["items"]] == [failed.id]
    first = api.get("/api/v1/runs?limit=1").get_json()
    older = api.get(f"/api/v1/runs?limit=1&cursor={first['next_cursor']}").get_json()
    assert [first["items"][0]["id"], older["items"][0]["id"]] == [failed.id + 1, failed.id]
    assert api.get("/api/v1/runs?from=2026-13-01").status_code == 400


def test_a_run_carries_its_schedules_zone_and_the_tenants_once_it_is_deleted(
    app: Flask, world: World
) -> None:
    api = Api(app, world.alpha, world.alice)  # alpha's zone: Europe/Berlin
    york = api.post("/api/v1/schedules", {**NEW, "time_zone": "America/New_York"}).get_json()
    berlin = api.post("/api/v1/schedules", {**NEW, "name": "Here"}).get_json()
    york_run = api.post(f"/api/v1/schedules/{york['id']}/runs").get_json()
    berlin_run = api.post(f"/api/v1/schedules/{berlin['id']}/runs").get_json()
    assert york_run["time_zone"] == "America/New_York"
    listed = {run["id"]: run["time_zone"] for run in api.get("/api/v1/runs").get_json()["items"]}
    assert listed == {york_run["id"]: "America/New_York", berlin_run["id"]: "Europe/Berlin"}
    assert api.get(f"/api/v1/runs/{york_run['id']}").get_json()["time_zone"] == "America/New_York"
    cancelled = api.post(f"/api/v1/runs/{york_run['id']}/cancel").get_json()
    assert cancelled["run"]["time_zone"] == "America/New_York"
    assert api.delete(f"/api/v1/schedules/{york['id']}").status_code == 204
    orphan = api.get(f"/api/v1/runs/{york_run['id']}").get_json()
    assert orphan["schedule_id"] is None and orphan["time_zone"] == "Europe/Berlin"


def test_a_create_tells_of_a_shared_name_and_a_legacy_zone_and_matches_zones_by_case(
    app: Flask, world: World
) -> None:
    api = Api(app, world.alpha, world.alice)
    first = api.post("/api/v1/schedules", {**NEW, "time_zone": "europe/berlin"}).get_json()
    assert first["time_zone"] == "Europe/Berlin" and first["warnings"] == {}
    second = api.post("/api/v1/schedules", {**NEW, "time_zone": "EST"})
    assert second.status_code == 201
    warnings = second.get_json()["warnings"]
    assert second.get_json()["key"] == "nightly-report-2"
    assert warnings["name"] == "another schedule is named “Nightly report” (key nightly-report)"
    assert "UTC-05:00 all year" in warnings["time_zone"]
    assert "America/New_York" in warnings["time_zone"]
    assert api.get(second.headers["Location"]).get_json()["warnings"] == {}
    renamed = api.patch(second.headers["Location"], {"name": "Other", "time_zone": "UTC"})
    assert renamed.get_json()["warnings"] == {}
    berlin = api.post("/api/v1/schedules", {**NEW, "name": "B", "time_zone": "Berlin"})
    assert problem_fields(berlin) == {
        "time_zone": "unknown time zone 'Berlin': did you mean Europe/Berlin?"
    }
    preview = api.get("/api/v1/cron/preview?expression=0+9+*+*+*&time_zone=asia/kolkata")
    assert preview.get_json()["time_zone"] == "Asia/Kolkata"
