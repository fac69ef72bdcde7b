"""API tokens: created in the panel or by the CLI, the secret shown once and stored hashed,
listed, revoked, audited; on both databases."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import event, func, select

from tests.api_helpers import NEW, Api
from tests.conftest import World, migrated_app
from tests.panel_helpers import Panel
from tests.settings_support import reconfigure
from webapp.config import settings
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import AuditEvent
from webapp.services import tokens
from webapp.services.audit import Actor
from webapp.token_models import ApiToken

SECRET = re.compile(r"sch_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")


def audit_actions() -> list[tuple[str, str, str | None]]:
    rows = db.session.execute(
        select(AuditEvent.action, AuditEvent.actor_label, AuditEvent.object_label)
        .where(AuditEvent.object_type == "token")
        .order_by(AuditEvent.id)
    )
    return [(action, actor, label) for action, actor, label in rows]


def test_a_token_is_stored_as_the_sha256_of_its_secret_only(app: Flask, world: World) -> None:
    token, secret = tokens.create_token(
        world.alpha, "CI", "write", None, Actor.for_user(world.alice), utcnow()
    )
    assert SECRET.fullmatch(secret)
    assert secret.startswith(f"sch_{token.prefix}_")
    stored = db.session.execute(select(ApiToken.__table__)).one()._mapping
    assert stored["token_hash"] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in {str(value) for value in stored.values()}
    assert tokens.authenticate(secret, utcnow()) == token
    assert tokens.authenticate(secret + "x", utcnow()) is None


def test_revoked_and_expired_tokens_authenticate_nothing(app: Flask, world: World) -> None:
    alice = Actor.for_user(world.alice)
    now = utcnow()
    revoked, revoked_secret = tokens.create_token(world.alpha, "old", "read", None, alice, now)
    _expiring, expiring_secret = tokens.create_token(world.alpha, "temp", "read", 1, alice, now)
    assert tokens.revoke_token(revoked, alice, now) is True
    assert tokens.revoke_token(revoked, alice, now) is False  # once only, one audit event
    assert tokens.authenticate(revoked_secret, now) is None
    assert tokens.authenticate(expiring_secret, now + timedelta(hours=23)) is not None
    assert tokens.authenticate(expiring_secret, now + timedelta(days=1, seconds=1)) is None
    assert [a for a, _, _ in audit_actions()] == ["token.created"] * 2 + ["token.revoked"]


def test_a_use_records_when_the_token_was_last_used(app: Flask, world: World) -> None:
    token, secret = tokens.create_token(
        world.alpha, "CI", "read", None, Actor.for_user(world.alice), utcnow()
    )
    assert token.last_used_at is None
    later = utcnow() + timedelta(minutes=5)
    found = tokens.authenticate(secret, later)
    assert found is not None
    assert tokens.count_request(found, later, limit=10) is None
    db.session.commit()  # a new transaction: the write was another connection's
    assert db.session.get(ApiToken, token.id).last_used_at == later  # type: ignore[union-attr]


def test_cli_create_prints_the_secret_alone_and_list_and_revoke_use_the_prefix(
    cli: FlaskCliRunner, world: World
) -> None:
    created = cli.invoke(
        args=["token", "create", "--tenant", "alpha", "--name", "Deploy", "--scope", "write",
              "--expires-in", "30"]
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip()
    assert SECRET.fullmatch(secret) and created.stdout == secret + "\n"
    prefix = secret.split("_")[1]
    listed = cli.invoke(args=["token", "list", "--tenant", "alpha"])
    fields = listed.stdout.strip().split("\t")
    assert fields[:6] == [prefix, "write", "active", "Deploy", "cli", "never"]
    assert cli.invoke(args=["token", "list", "--tenant", "beta"]).stdout == ""
    revoked = cli.invoke(args=["token", "revoke", prefix])
    assert revoked.exit_code == 0
    assert revoked.stdout == f"revoked token {prefix} (Deploy) of alpha\n"
    assert "\trevoked\t" in cli.invoke(args=["token", "list", "--tenant", "alpha"]).stdout
    assert tokens.authenticate(secret, utcnow()) is None
    assert audit_actions() == [
        ("token.created", "cli", "Deploy"),
        ("token.revoked", "cli", "Deploy"),
    ]


def test_cli_refuses_bad_input_with_one_line_and_writes_nothing(
    cli: FlaskCliRunner, world: World
) -> None:
    cases = {
        ("--tenant", "nope", "--name", "x", "--scope", "read"): "no tenant with slug 'nope'",
        ("--tenant", "alpha", "--name", "  ", "--scope", "read"): "name: a name is required",
        ("--tenant", "alpha", "--name", "x", "--scope", "admin"): "'admin' is not one of",
        ("--tenant", "alpha", "--name", "x", "--scope", "read", "--expires-in", "0"): "0",
    }
    for args, message in cases.items():
        result = cli.invoke(args=["token", "create", *args])
        assert result.exit_code != 0, args
        assert message in result.output, (args, result.output)
    unknown = cli.invoke(args=["token", "revoke", "deadbeef"])
    assert unknown.exit_code == 1
    assert unknown.output == "Error: prefix: no token with prefix 'deadbeef'\n"
    assert db.session.scalar(select(ApiToken.id)) is None


def test_an_admin_creates_a_token_in_the_panel_and_sees_its_secret_once(
    app: Flask, world: World
) -> None:
    panel = Panel(app, world.alice)
    page = panel.post("/tokens", {"name": "CI <b>", "scope": "read", "expires_in": "90"}, False)
    assert page.status_code == 201
    assert page.headers["Cache-Control"] == "no-store"  # no cache keeps the secret
    html = page.get_data(as_text=True)
    found = SECRET.search(html)
    assert found is not None
    assert "CI &lt;b&gt;" in html and "CI <b>" not in html
    again = panel.get("/tokens").get_data(as_text=True)
    assert found.group(0) not in again  # shown once
    token = db.session.scalar(select(ApiToken))
    assert token is not None and token.prefix in again and "alice@example.com" in again
    assert token.expires_at is not None
    assert audit_actions() == [("token.created", "alice@example.com", "CI <b>")]


def test_the_panel_names_the_field_of_a_bad_token(app: Flask, world: World) -> None:
    panel = Panel(app, world.alice)
    page = panel.post("/tokens", {"name": "", "scope": "read", "expires_in": ""}, False)
    assert page.status_code == 422
    assert "a name is required" in page.get_data(as_text=True)
    page = panel.post("/tokens", {"name": "x", "scope": "read", "expires_in": "7"}, False)
    assert page.status_code == 422
    assert db.session.scalar(select(ApiToken.id)) is None


def test_an_admin_revokes_a_token_and_other_tenants_and_viewers_cannot(
    app: Flask, world: World
) -> None:
    token, _secret = tokens.create_token(
        world.alpha, "CI", "write", None, Actor.for_user(world.alice), utcnow()
    )
    url = f"/tokens/{token.id}/revoke"
    assert Panel(app, world.charlie).post(url).status_code == 404
    assert Panel(app, world.bob).post(url).status_code == 403
    assert Panel(app, world.bob).get("/tokens").status_code == 403
    assert Panel(app, world.alice).post(url, csrf=False).status_code == 400
    db.session.refresh(token)
    assert token.revoked_at is None
    response = Panel(app, world.alice).post(url)
    assert response.status_code == 200 and response.headers["HX-Redirect"] == "/tokens"
    db.session.refresh(token)
    assert token.revoked_at is not None
    assert audit_actions()[-1] == ("token.revoked", "alice@example.com", "CI")


def test_the_audit_log_shows_token_events(app: Flask, world: World) -> None:
    tokens.create_token(world.alpha, "CI", "write", None, Actor.for_user(world.alice), utcnow())
    html = Panel(app, world.alice).get("/audit").get_data(as_text=True)
    assert "created" in html and "token" in html and "CI" in html


def test_the_rate_limit_counts_requests_per_token_per_minute(app: Flask, world: World) -> None:
    token, _secret = tokens.create_token(
        world.alpha, "CI", "read", None, Actor.for_user(world.alice), utcnow()
    )
    minute = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    waits = [tokens.count_request(token, minute + timedelta(seconds=s), 2) for s in (1, 2, 45)]
    assert waits == [None, None, 15]
    assert tokens.count_request(token, minute + timedelta(minutes=1), 2) is None  # a new window
    assert tokens.count_request(token, minute + timedelta(minutes=1, seconds=1), 0) is None


def test_an_api_request_holds_one_pooled_connection_at_a_time(app: Flask, world: World) -> None:
    """The token's count is written on the request's own connection: with more threads than
    connections to spare, a request waiting for a second one would wait for the pool."""
    api = Api(app, world.alpha, world.alice)
    held, most = 0, 0

    def checkout(*_args: object) -> None:
        nonlocal held, most
        held += 1
        most = max(most, held)

    def checkin(*_args: object) -> None:
        nonlocal held
        held -= 1

    db.session.remove()  # the test's own session gives its connection back
    event.listen(db.engine, "checkout", checkout)
    event.listen(db.engine, "checkin", checkin)
    try:
        for url in ("/api/v1/schedules", "/api/v1/runs"):
            assert api.get(url).status_code == 200
        assert api.post("/api/v1/schedules", json=NEW).status_code == 201
    finally:
        event.remove(db.engine, "checkout", checkout)
        event.remove(db.engine, "checkin", checkin)
    assert most == 1


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_the_pool_keeps_a_connection_for_each_request_thread(database_url: str) -> None:
    for threads, size in (("2", 5), ("32", 32)):
        app = migrated_app(database_url, SCHEDULER_WEB_THREADS=threads)
        with app.app_context():
            assert db.engine.pool.size() == size  # type: ignore[attr-defined]
            db.engine.dispose()


def test_a_tenant_may_hold_only_so_many_active_tokens(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    """SCHEDULER_MAX_TOKENS caps a tenant's active tokens (100 by default): the panel and the
    command line refuse another with the reason, until one is revoked or expires."""
    assert settings(app).SCHEDULER_MAX_TOKENS == 100
    reconfigure(app, SCHEDULER_MAX_TOKENS=2)
    now = utcnow()
    tokens.create_token(world.alpha, "old", "read", None, Actor.cli(), now - timedelta(days=2))
    expired = db.session.scalar(select(ApiToken))
    assert expired is not None
    expired.expires_at = now - timedelta(days=1)  # an expired token does not count
    db.session.commit()
    panel = Panel(app, world.alice)
    assert (
        panel.post("/tokens", {"name": "a", "scope": "read", "expires_in": ""}, False).status_code
        == 201
    )
    assert (
        panel.post("/tokens", {"name": "b", "scope": "read", "expires_in": ""}, False).status_code
        == 201
    )
    refused = panel.post("/tokens", {"name": "c", "scope": "read", "expires_in": ""}, False)
    assert refused.status_code == 422
    message = "the tenant has 2 active tokens, the most it may have (SCHEDULER_MAX_TOKENS)"
    assert message in refused.get_data(as_text=True)
    by_cli = cli.invoke(
        args=["token", "create", "--tenant", "alpha", "--name", "d", "--scope", "read"]
    )
    assert by_cli.exit_code == 1 and message in by_cli.stderr
    other = cli.invoke(
        args=["token", "create", "--tenant", "beta", "--name", "e", "--scope", "read"]
    )
    assert other.exit_code == 0  # the cap is per tenant
    prefix = db.session.scalar(select(ApiToken.prefix).where(ApiToken.name == "a"))
    assert cli.invoke(args=["token", "revoke", str(prefix)]).exit_code == 0
    again = panel.post("/tokens", {"name": "c", "scope": "read", "expires_in": ""}, False)
    assert again.status_code == 201
    assert db.session.scalar(select(func.count()).select_from(ApiToken)) == 5
