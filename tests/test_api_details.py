"""What users of good APIs expect: Idempotency-Key on POSTs, ETag and If-Match, and a per-token
rate limit answering 429 with Retry-After; on both databases."""

from __future__ import annotations

from flask import Flask
from sqlalchemy import func, select

from tests.api_helpers import NEW, Api, count, problem_fields
from tests.conftest import World, migrated_app
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule
from webapp.token_models import ApiIdempotencyKey


def test_a_retried_create_or_run_now_answers_the_first_result(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    key = {"Idempotency-Key": "create-1"}
    first = api.post("/api/v1/schedules", NEW, headers=key)
    again = api.post("/api/v1/schedules", NEW, headers=key)
    assert first.status_code == again.status_code == 201
    assert again.get_json() == first.get_json()
    assert again.headers["Location"] == first.headers["Location"]
    assert again.headers["ETag"] == first.headers["ETag"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert count(Schedule) == 1
    url = first.headers["Location"] + "/runs"
    runs = [api.post(url, headers={"Idempotency-Key": "run-1"}) for _ in range(3)]
    assert len({r.get_json()["id"] for r in runs}) == 1 and count(Run) == 1
    other = api.post("/api/v1/schedules", {**NEW, "name": "Other"}, headers=key)
    assert other.status_code == 422 and "another request" in other.get_json()["detail"]
    assert count(Schedule) == 1


def test_a_refused_request_does_not_use_up_its_key(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    key = {"Idempotency-Key": "k"}
    assert api.post("/api/v1/schedules", {**NEW, "cron": "nope"}, headers=key).status_code == 422
    assert count(ApiIdempotencyKey) == 0
    assert api.post("/api/v1/schedules", NEW, headers=key).status_code == 201
    bad = api.post("/api/v1/schedules", NEW, headers={"Idempotency-Key": "é" * 3})
    assert bad.status_code == 400 and "Idempotency-Key" in problem_fields(bad)


def test_keys_belong_to_their_token(app: Flask, world: World) -> None:
    first, second = Api(app, world.alpha, world.alice), Api(app, world.alpha, world.alice)
    key = {"Idempotency-Key": "same"}
    assert first.post("/api/v1/schedules", NEW, headers=key).status_code == 201
    second_try = second.post("/api/v1/schedules", {**NEW, "name": "Two"}, headers=key)
    assert second_try.status_code == 201 and count(Schedule) == 2


def test_if_match_refuses_a_change_made_since_the_read(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    created = api.post("/api/v1/schedules", NEW)
    url, tag = created.headers["Location"], created.headers["ETag"]
    assert api.get(url).headers["ETag"] == tag
    changed = api.patch(url, {"name": "Mine"}, headers={"If-Match": tag})
    assert changed.status_code == 200 and changed.headers["ETag"] != tag
    stale = api.patch(url, {"name": "Theirs"}, headers={"If-Match": tag})
    assert stale.status_code == 412 and stale.mimetype == "application/problem+json"
    assert api.delete(url, headers={"If-Match": tag}).status_code == 412
    assert api.get(url).get_json()["name"] == "Mine"
    updates = select(func.count()).where(AuditEvent.action == "schedule.updated")
    assert db.session.scalar(updates) == 1
    # If-Match compares strongly (RFC 9110): a weak tag matches nothing, even the current one.
    weak = api.delete(url, headers={"If-Match": "W/" + changed.headers["ETag"]})
    assert weak.status_code == 412
    assert api.delete(url, headers={"If-Match": changed.headers["ETag"]}).status_code == 204


def test_a_retried_pause_replays_the_etag_of_its_first_answer(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    url = api.post("/api/v1/schedules", NEW).headers["Location"]
    key = {"Idempotency-Key": "pause-1"}
    first = api.post(url + "/pause", headers=key)
    api.patch(url, {"name": "Renamed since"})  # a new ETag; the retry still answers the first
    again = api.post(url + "/pause", headers=key)
    assert again.get_json() == first.get_json() and again.headers["ETag"] == first.headers["ETag"]
    assert api.get(url).headers["ETag"] != first.headers["ETag"]


def test_a_get_with_the_current_etag_in_if_none_match_answers_304(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    created = api.post("/api/v1/schedules", NEW)
    url, tag = created.headers["Location"], created.headers["ETag"]
    unchanged = api.get(url, headers={"If-None-Match": tag})
    assert unchanged.status_code == 304 and unchanged.get_data() == b""
    assert unchanged.headers["ETag"] == tag
    assert api.get(url, headers={"If-None-Match": f'"other", W/{tag}'}).status_code == 304
    assert api.get(url, headers={"If-None-Match": "*"}).status_code == 304
    changed = api.patch(url, {"name": "Mine"})
    fresh = api.get(url, headers={"If-None-Match": tag})
    assert fresh.status_code == 200 and fresh.get_json()["name"] == "Mine"
    assert fresh.headers["ETag"] == changed.headers["ETag"] != tag
    other_tenant = Api(app, world.beta, world.charlie)
    assert other_tenant.get(url, headers={"If-None-Match": "*"}).status_code == 404


def test_a_token_over_its_rate_limit_waits_retry_after(world: World, database_url: str) -> None:
    limited = migrated_app(database_url, SCHEDULER_API_RATE_LIMIT=3)
    with limited.app_context():
        api = Api(limited, db.session.merge(world.alpha), db.session.merge(world.alice))
        other = Api(limited, db.session.merge(world.alpha), db.session.merge(world.alice))
        answers = [api.get("/api/v1/schedules") for _ in range(3)]
        # Until a 429: the fourth, or a few more if a minute's window ended meanwhile.
        while answers[-1].status_code != 429 and len(answers) < 8:
            answers.append(api.get("/api/v1/schedules"))
        assert [a.status_code for a in answers[:3]] == [200, 200, 200]
        assert answers[-1].status_code == 429
        assert 1 <= int(answers[-1].headers["Retry-After"]) <= 60
        assert answers[-1].get_json()["type"] == "/api/docs#problem-rate-limited"
        assert other.get("/api/v1/schedules").status_code == 200  # per token
        db.session.remove()
        db.engine.dispose()
