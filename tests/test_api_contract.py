"""Contract tests: schemathesis generates requests from the OpenAPI document and checks every
answer against it (no 500, each status, content type, header and body as documented), with
data that fits the document and data that does not, on both databases; then a stateful run
follows the document's links (create -> get -> run -> runs). The operator API's operations are
called with an operator token, the others with a tenant's."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, given, settings, strategies
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import positive_data_acceptance
from sqlalchemy import func, select

from tests.api_helpers import Api, OperatorApi
from tests.conftest import World, make_run, make_schedule
from webapp.extensions import db
from webapp.models import AuditEvent, Schedule

# The document cannot say what makes a cron expression fire or a job exist: a schema-valid
# body may still be refused (422, naming the field), which is no breach of the contract.
EXCLUDED = [positive_data_acceptance]
FAST = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def api(app: Flask, world: World) -> Api:
    return Api(app, world.alpha, world.alice)


@pytest.fixture
def operator(app: Flask, world: World) -> Api:
    return OperatorApi(app)


def headers_for(path: str, api: Api, operator: Api) -> dict[str, str]:
    """The operator token on the operator API, the tenant's token elsewhere."""
    return (operator if path.startswith("/api/v1/admin/") else api).headers()


def operations(app: Flask) -> list[Any]:
    """The document's operations, deletions last (they take the seeded objects away), the
    tenant's last of all (it takes the tenant and its other objects)."""
    loaded = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app)
    found = []
    for result in loaded.get_all_operations():
        assert isinstance(result, Ok), result  # the document loads whole
        found.append(result.ok())
    return sorted(
        found,
        key=lambda operation: (
            operation.method.upper() == "DELETE",
            operation.path == "/api/v1/admin/tenants/{slug}",
        ),
    )


def fuzz(
    operation: Any, mode: GenerationMode, ids: dict[str, Any], headers: dict[str, str]
) -> None:
    """Requests generated for one operation, each answer checked against the document; with
    positive data, half of them aim at the seeded objects (`ids`)."""

    @given(case=operation.as_strategy(mode), aim=strategies.booleans())
    @FAST
    def check(case: Any, aim: bool) -> None:
        if ids and mode is GenerationMode.POSITIVE and aim:
            case.path_parameters = {**case.path_parameters, **ids}
        case.call_and_validate(headers=headers, excluded_checks=EXCLUDED)

    check()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_answer_matches_the_document(
    app: Flask, world: World, api: Api, operator: Api, mode: GenerationMode
) -> None:
    # Real objects to aim at, half the time: random ids alone would only ever meet 404s.
    schedule = make_schedule(world.alpha, "Seeded", by=world.alice, cron="*/5 * * * *")
    run = make_run(schedule, "succeeded", 5, output="seeded-output")
    db.session.commit()
    # The operator's aim: beta and its admin (the tenant token is alpha's, which stays).
    real = {
        "schedule_id": schedule.id,
        "run_id": run.id,
        "slug": world.beta.slug,
        "user_id": world.charlie.id,
    }
    found = operations(app)
    assert len(found) >= 13
    for operation in found:
        names = {parameter.name for parameter in operation.path_parameters}
        aimed = {k: v for k, v in real.items() if k in names}
        fuzz(operation, mode, aimed, headers_for(operation.path, api, operator))
    db.session.refresh(operator.token)
    assert operator.token.last_used_at is not None  # the operator API was called with it
    # Whatever was refused, nothing half-written: every stored schedule was audited.
    schedules = db.session.scalar(select(func.count()).select_from(Schedule))
    created = db.session.scalar(select(func.count()).where(AuditEvent.action == "schedule.created"))
    assert schedules is not None and created is not None and schedules <= created


def test_the_links_lead_from_a_new_schedule_to_its_run(app: Flask, api: Api, operator: Api) -> None:
    machine = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app).as_state_machine()

    class Authorized(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": headers_for(case.path, api, operator)}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            headers = headers_for(case.path, api, operator)
            case.validate_response(response, excluded_checks=EXCLUDED, headers=headers)

    Authorized.run(settings=settings(FAST, max_examples=10, stateful_step_count=6))
