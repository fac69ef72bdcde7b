"""POST /api/v1/admin/sign-in-links: an operator token gets a one-time URL that signs a person
into a tenant's panel; bad input is a problem by field and makes no link; tenant tokens and no
token are refused; the OpenAPI document describes it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from flask import Flask
from sqlalchemy import func, select

from tests.api_helpers import Api, OperatorApi, problem_fields
from tests.conftest import World
from tests.panel_helpers import token_in
from tests.settings_support import reconfigure
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import AuditEvent, User
from webapp.sign_in_models import SignInLink

URL = "/api/v1/admin/sign-in-links"
ASKED = {"tenant": "alpha", "email": "dora@example.com", "role": "viewer"}


def links() -> int:
    return int(db.session.scalar(select(func.count()).select_from(SignInLink)) or 0)


def test_an_operator_token_gets_a_link_that_signs_the_person_in(app: Flask, world: World) -> None:
    operator = OperatorApi(app, "host app")
    made = operator.post(URL, json=ASKED)
    assert made.status_code == 200, made.get_json()
    document = made.get_json()
    assert set(document) == {"url", "expires_at"}
    expires = datetime.fromisoformat(document["expires_at"])
    assert timedelta(seconds=55) < expires - utcnow() <= timedelta(seconds=60)
    url = urlsplit(document["url"])
    assert (url.scheme, url.netloc) == ("http", "localhost")
    assert url.path.startswith("/sign-in/alpha/")
    browser = app.test_client()
    page = browser.get(url.path)
    assert "Sign in to Alpha Corp" in page.get_data(as_text=True)
    signed_in = browser.post(url.path, data={"csrf_token": token_in(page, "meta")})
    assert signed_in.status_code == 303
    assert "dora@example.com" in browser.get("/").get_data(as_text=True)
    event = db.session.scalar(
        select(AuditEvent).where(AuditEvent.action == "user.signed_in_by_link")
    )
    assert event is not None and event.tenant_id == world.alpha.id
    assert event.after is not None
    assert event.after["link_by"] == f"operator token {operator.token.prefix} (host app)"


def test_the_url_is_at_the_base_url_when_it_is_set(app: Flask, world: World) -> None:
    reconfigure(app, SCHEDULER_BASE_URL="https://cron.example.com/")
    made = OperatorApi(app).post(URL, json=ASKED).get_json()
    assert made["url"].startswith("https://cron.example.com/sign-in/alpha/")


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"tenant": "nosuch"}, "tenant", "no tenant with slug 'nosuch'"),
        ({"email": "nobody"}, "email", "invalid email address 'nobody'"),
        ({"role": "owner"}, "role", "'owner' is not one of admin, viewer"),
        ({"return_url": "javascript:alert(1)"}, "return_url", "absolute http or https URL"),
        ({"return_url": "//evil.example/"}, "return_url", "absolute http or https URL"),
        ({"return_url": "https://evil.example/"}, "return_url", "host evil.example is not in"),
        ({"return_url": 5}, "return_url", ""),
        ({"extra": True}, "extra", ""),
    ],
)
def test_bad_input_is_a_problem_by_field_and_makes_no_link(
    app: Flask, world: World, changes: dict[str, Any], field: str, message: str
) -> None:
    reconfigure(app, SCHEDULER_RETURN_URL_HOSTS=["app.example.com"])
    refused = OperatorApi(app).post(URL, json={**ASKED, **changes})
    assert refused.status_code == 422
    fields = problem_fields(refused)
    assert list(fields) == [field] and message in fields[field]
    assert links() == 0


def test_a_missing_field_is_named(app: Flask, world: World) -> None:
    refused = OperatorApi(app).post(URL, json={"tenant": "alpha"})
    assert refused.status_code == 422
    assert set(problem_fields(refused)) == {"email", "role"}
    assert links() == 0


def test_a_return_url_on_an_allowed_host_is_kept(app: Flask, world: World) -> None:
    reconfigure(app, SCHEDULER_RETURN_URL_HOSTS=["app.example.com"])
    asked = {**ASKED, "return_url": "https://app.example.com/settings"}
    assert OperatorApi(app).post(URL, json=asked).status_code == 200
    stored = db.session.scalars(select(SignInLink)).one()
    assert stored.return_url == "https://app.example.com/settings"


def test_a_tenant_token_or_no_token_gets_no_link(app: Flask, world: World) -> None:
    tenant_token = Api(app, world.alpha, world.alice)
    refused = tenant_token.post(URL, json=ASKED)
    assert refused.status_code == 403 and "operator token" in refused.get_json()["detail"]
    anonymous = app.test_client().post(URL, json=ASKED)
    assert anonymous.status_code == 401
    assert links() == 0
    assert db.session.scalar(select(User).where(User.email == "dora@example.com")) is None


def test_an_idempotency_key_is_refused(app: Flask, world: World) -> None:
    """The answer holds the token, which is never stored: it cannot be replayed."""
    refused = OperatorApi(app).post(URL, json=ASKED, headers={"Idempotency-Key": "k1"})
    assert refused.status_code == 400
    assert "cannot be replayed" in problem_fields(refused)["Idempotency-Key"]
    assert links() == 0


def test_the_answer_is_not_cached(app: Flask, world: World) -> None:
    made = OperatorApi(app).post(URL, json=ASKED)
    assert made.headers["Cache-Control"] == "no-store"


def test_the_openapi_document_describes_it(app: Flask, world: World) -> None:
    spec = app.test_client().get("/api/v1/openapi.json").get_json()
    operation = spec["paths"][URL]["post"]
    assert operation["security"] == [{"operator": []}]
    body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body.endswith("/LinkIn")
    assert set(spec["components"]["schemas"]["LinkIn"]["required"]) == {"tenant", "email", "role"}
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert answer.endswith("/SignInLinkOut")
    assert "422" in operation["responses"] and "403" in operation["responses"]
    assert all(p["name"] != "Idempotency-Key" for p in operation.get("parameters", []))


def test_a_deleted_tenant_takes_its_links_along(app: Flask, world: World) -> None:
    operator = OperatorApi(app)
    url = urlsplit(operator.post(URL, json=ASKED).get_json()["url"]).path
    assert operator.delete("/api/v1/admin/tenants/alpha?cascade=true").status_code == 200
    assert links() == 0
    assert app.test_client().get(url).status_code == 404
