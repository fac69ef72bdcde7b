"""Bad input answers a 4xx problem document and writes nothing, never a 500 (both databases)."""

from __future__ import annotations

import json
from pathlib import Path

from flask import Flask

from tests.api_helpers import NEW, Api, count
from tests.conftest import PASSWORD, World, migrated_app
from webapp.database import MAX_JSON_DEPTH
from webapp.models import Schedule


def test_json_nested_past_any_use_is_refused(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    for depth in (MAX_JSON_DEPTH, 100_000):
        message = "[" * depth + "]" * depth
        body = json.dumps({**NEW, "args": {}})[:-1] + ', "extra": ' + message + "}"
        answer = api.post(
            "/api/v1/schedules", data=body, headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 400, (depth, answer.status_code)
        assert answer.mimetype == "application/problem+json"
        assert f"nested more than {MAX_JSON_DEPTH} levels deep" in answer.get_json()["detail"]
    assert count(Schedule) == 0
    # As deep as the bound allows: an ordinary answer (here: the unknown field).
    shallow = "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1)
    body = json.dumps({**NEW, "args": {}})[:-1] + ', "extra": ' + shallow + "}"
    answer = api.post("/api/v1/schedules", data=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.get_json()


def test_run_filters_past_the_years_a_time_can_have_are_refused(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    for query in ("from=0001-01-01", "to=9999-12-31", "from=0001-01-01T00:00:00Z"):
        answer = api.get(f"/api/v1/runs?{query}")
        assert answer.status_code == 400, (query, answer.status_code, answer.get_data())
        assert answer.mimetype == "application/problem+json"
        field = query.split("=")[0]
        assert field in {item["field"] for item in answer.get_json()["errors"]}, answer.get_json()


def test_a_nul_in_an_api_path_answers_a_problem_document(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    for path in ("/api/v1/schedules/%00", "/api/v1/%00", "/api/v1/runs/1%00"):
        answer = api.get(path)
        assert 400 <= answer.status_code < 500, (path, answer.status_code)
        assert answer.mimetype == "application/problem+json", (path, answer.get_data()[:200])


def test_while_the_database_is_away_the_panel_and_the_api_answer_503(
    app: Flask, world: World, tmp_path: Path
) -> None:
    """Both ask the client to come back (Retry-After); the panel's page reads nothing from the
    database, the API answers a problem document."""
    api = Api(app, world.alpha, world.alice)
    away = migrated_app(f"sqlite:///{tmp_path}/no-such-directory/gone.db", WTF_CSRF_ENABLED=False)
    away.testing = False
    client = away.test_client()
    answer = client.post("/login", data={"email": "alice@example.com", "password": PASSWORD})
    assert answer.status_code == 503, answer.get_data(as_text=True)[:300]
    assert answer.headers["Retry-After"] == "5"
    assert "database is not answering" in answer.get_data(as_text=True)
    answer = client.get("/api/v1/schedules", headers=api.headers())
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "5"
    assert answer.mimetype == "application/problem+json"
