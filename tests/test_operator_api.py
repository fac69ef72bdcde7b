"""The operator API under /api/v1/admin/: operator tokens (made by `flask token create
--operator`), who may use which endpoints, on both databases."""

from __future__ import annotations

import re

from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select

from tests.api_helpers import Api, OperatorApi, problem_fields
from tests.conftest import World
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import AuditEvent
from webapp.services import tokens
from webapp.token_models import ApiToken

SECRET = re.compile(r"sch_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")


def test_cli_creates_an_operator_token_lists_and_revokes_it(
    cli: FlaskCliRunner, world: World
) -> None:
    created = cli.invoke(
        args=["token", "create", "--operator", "--name", "Provisioning", "--expires-in", "30"]
    )
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip()
    assert SECRET.fullmatch(secret) and created.stdout == secret + "\n"
    prefix = secret.split("_")[1]
    listed = cli.invoke(args=["token", "list", "--operator"]).stdout.strip().split("\t")
    assert listed[:6] == [prefix, "write", "active", "Provisioning", "cli", "never"]
    assert cli.invoke(args=["token", "list", "--tenant", "alpha"]).stdout == ""
    found = tokens.authenticate(secret, utcnow())
    assert found is not None and found.is_operator and found.tenant_id is None
    revoked = cli.invoke(args=["token", "revoke", prefix])
    assert revoked.stdout == f"revoked operator token {prefix} (Provisioning)\n"
    assert "\trevoked\t" in cli.invoke(args=["token", "list", "--operator"]).stdout
    assert tokens.authenticate(secret, utcnow()) is None
    events = db.session.execute(
        select(AuditEvent.action, AuditEvent.tenant_id).where(AuditEvent.object_type == "token")
    )
    assert [tuple(e) for e in events] == [("token.created", None), ("token.revoked", None)]


def test_cli_refuses_an_operator_token_with_a_tenant_or_scope(
    cli: FlaskCliRunner, world: World
) -> None:
    cases = [
        ["--operator", "--tenant", "alpha", "--name", "x"],
        ["--operator", "--scope", "read", "--name", "x"],
        ["--name", "x"],
        ["--tenant", "alpha", "--name", "x"],
        ["--operator", "--name", "  "],
    ]
    for args in cases:
        result = cli.invoke(args=["token", "create", *args])
        assert result.exit_code != 0 and result.stdout == "", (args, result.output)
    assert (
        "an operator token has no --tenant nor --scope"
        in cli.invoke(args=["token", "create", *cases[0]]).output
    )
    assert cli.invoke(args=["token", "list"]).exit_code != 0
    assert cli.invoke(args=["token", "list", "--operator", "--tenant", "alpha"]).exit_code != 0
    assert db.session.scalar(select(ApiToken.id)) is None


def test_the_operator_api_takes_operator_tokens_only(app: Flask, world: World) -> None:
    operator = OperatorApi(app)
    listed = operator.get("/api/v1/admin/tenants")
    assert listed.status_code == 200, listed.get_json()
    assert [t["slug"] for t in listed.get_json()["items"]] == ["alpha", "beta"]
    tenant_token = Api(app, world.alpha, world.alice)
    refused = tenant_token.get("/api/v1/admin/tenants")
    assert refused.status_code == 403
    assert "operator token" in refused.get_json()["detail"]
    problem_fields(refused)  # a problem details document
    anonymous = app.test_client().get("/api/v1/admin/tenants")
    assert anonymous.status_code == 401 and anonymous.mimetype == "application/problem+json"
    assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")


def test_an_operator_token_never_reads_tenant_data_through_the_tenant_endpoints(
    app: Flask, world: World
) -> None:
    operator = OperatorApi(app)
    for url in ("/api/v1/schedules", "/api/v1/runs", "/api/v1/calendars", "/api/v1/catalog"):
        refused = operator.get(url)
        assert refused.status_code == 403, url
        assert "/api/v1/admin/" in refused.get_json()["detail"]
    assert operator.post("/api/v1/schedules", json={}).status_code == 403
