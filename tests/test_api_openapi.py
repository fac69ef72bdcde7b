"""The OpenAPI document and its reference page: generated from the models, covering every API
route, with links a client can follow; the page readable without a token, under the CSP."""

from __future__ import annotations

from typing import Any

from flask import Flask

from tests.api_helpers import Api
from tests.conftest import World
from webapp.api.openapi import OPERATIONS
from webapp.api.schemas import ScheduleOut, SchedulePatch
from webapp.extensions import db
from webapp.services.schema import ScheduleIn


def document(app: Flask) -> dict[str, Any]:
    response = app.test_client().get("/api/v1/openapi.json")
    assert response.status_code == 200 and response.mimetype == "application/json"
    result: dict[str, Any] = response.get_json()
    return result


def test_the_document_is_openapi_3_1_and_describes_every_api_route(app: Flask) -> None:
    spec = document(app)
    assert spec["openapi"] == "3.1.0"
    routes = {
        (rule.endpoint, method)
        for rule in app.url_map.iter_rules()
        if rule.endpoint.startswith("api.")
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }
    described = {rule for rule in routes if rule[0] in OPERATIONS}
    assert routes - described == {("api.openapi_document", "GET"), ("api.docs", "GET")}
    ids = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    assert len(ids) == len(OPERATIONS)
    create = spec["paths"]["/api/v1/schedules"]["post"]
    body = create["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/ScheduleIn"}
    assert body["example"]["cron"] == "30 2 * * *"
    schedule_in = spec["components"]["schemas"]["ScheduleIn"]
    assert schedule_in["additionalProperties"] is False
    assert set(schedule_in["required"]) == {"name", "job", "time_zone", "cron"}
    assert "Location" in create["responses"]["201"]["headers"]
    problem = create["responses"]["422"]["content"]["application/problem+json"]
    assert problem["schema"] == {"$ref": "#/components/schemas/ProblemOut"}


def resolve(expression: str, body: dict[str, Any]) -> Any:
    assert expression.startswith("$response.body#/")
    return body[expression.removeprefix("$response.body#/")]


def test_a_client_follows_the_links_from_the_example_to_the_run(app: Flask, world: World) -> None:
    spec = document(app)
    by_id = {
        op["operationId"]: (method, path)
        for path, methods in spec["paths"].items()
        for method, op in methods.items()
    }
    api = Api(app, world.alpha, world.alice)
    create = spec["paths"]["/api/v1/schedules"]["post"]
    example = create["requestBody"]["content"]["application/json"]["example"]
    created = api.post("/api/v1/schedules", example)
    assert created.status_code == 201
    seen = {}
    for name, link in create["responses"]["201"]["links"].items():
        method, path = by_id[link["operationId"]]
        values = {k: resolve(v, created.get_json()) for k, v in link["parameters"].items()}
        in_path = {k: v for k, v in values.items() if "{" + k + "}" in path}
        url = path
        for key, value in in_path.items():
            url = url.replace("{" + key + "}", str(value))
        in_query = {k: v for k, v in values.items() if k not in in_path}
        if in_query:
            url += "?" + "&".join(f"{k}={v}" for k, v in in_query.items())
        response = api.client.open(url, method=method.upper(), headers=api.headers())
        seen[name] = response.status_code
        if name == "RunNow":
            run_links = spec["paths"][path][method]["responses"]["201"]["links"]
            get_run = run_links["GetRun"]
            method, run_path = by_id[get_run["operationId"]]
            run_id = resolve(get_run["parameters"]["run_id"], response.get_json())
            run = api.get(run_path.replace("{run_id}", str(run_id)))
            assert run.status_code == 200 and run.get_json()["status"] == "queued"
    assert seen == {"GetSchedule": 200, "RunNow": 201, "ListRuns": 200}


def test_the_reference_page_needs_no_token_and_no_inline_script(app: Flask) -> None:
    response = app.test_client().get("/api/docs")
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert "<script>" not in html and "style=" not in html
    assert 'id="op-create_schedule"' in html and 'id="problem-validation"' in html
    assert "&#34;30 2 * * *&#34;" in html or "&quot;30 2 * * *&quot;" in html
    assert 'id="schema-ScheduleIn"' in html
    # Swagger UI replaces it when JavaScript runs (tests/test_api_docs_browser.py).
    assert 'data-openapi-url="/api/v1/openapi.json"' in html
    assert "/static/vendor/swagger-ui-bundle.js" in html and "/static/api-docs.js" in html
    db.session.rollback()


def test_every_field_a_schedule_takes_is_answered_patched_and_audited() -> None:
    """The add-a-field recipe (docs/architecture.md): a field on ScheduleIn that the API does
    not answer or let a PATCH change fails here (the audit log, the ETag and the export take
    ScheduleIn's fields themselves)."""
    taken = set(ScheduleIn.model_fields)
    assert taken - set(ScheduleOut.model_fields) == set()
    assert taken - set(SchedulePatch.model_fields) == set()
