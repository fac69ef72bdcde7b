"""Sessions the server ends: logout, password change, leaving a tenant, an operator's
revocation, idle and absolute lifetimes; and Secure cookies outside debug."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select, update

from tests.conftest import PASSWORD, World, migrated_app
from tests.panel_helpers import Panel, log_in, token_in
from webapp.config import ConfigError, settings
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Schedule, UserSession
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleInput, create_schedule


def session_count(user_id: int) -> int:
    mine = select(func.count()).select_from(UserSession).where(UserSession.user_id == user_id)
    return db.session.execute(mine).scalar_one()


def test_logging_out_ends_the_session_for_a_copied_cookie_too(app: Flask, world: World) -> None:
    client = app.test_client()
    assert log_in(client, "alice@example.com", PASSWORD).status_code == 303
    copied = app.test_client()
    cookie = client.get_cookie("session")
    assert cookie is not None
    copied.set_cookie("session", cookie.value)
    page = copied.get("/")
    assert page.status_code == 200
    token = token_in(page, "meta")
    schedule = create_schedule(
        world.alpha,
        ScheduleInput(
            name="Kept", job="demo.echo", args={"message": "m"}, cron="0 2 * * *", time_zone="UTC"
        ),
        Actor.for_user(world.alice),
        utcnow(),
    )
    db.session.commit()

    own_token = token_in(client.get("/"), "meta")
    assert client.post("/logout", data={"csrf_token": own_token}).status_code == 303
    assert session_count(world.alice.id) == 0

    assert copied.get("/").status_code == 302  # to the login page
    replayed = copied.post(f"/schedules/{schedule.id}/pause", headers={"X-CSRFToken": token})
    assert replayed.status_code in (302, 401)
    assert db.session.get_one(Schedule, schedule.id).active


def test_a_new_password_ends_every_session_of_the_user(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    laptop, phone = Panel(app, world.alice), Panel(app, world.alice)
    bob = Panel(app, world.bob)
    result = cli.invoke(
        args=[
            "user",
            "create",
            "alice@example.com",
            "--tenant",
            "alpha",
            "--role",
            "admin",
            "--password-stdin",
        ],
        input="a-brand-new-password\n",
    )
    assert result.exit_code == 0, result.output
    assert laptop.get("/").status_code == 302
    assert phone.get("/").status_code == 302
    assert bob.get("/").status_code == 200  # other users keep theirs


def test_leaving_a_tenant_ends_the_users_sessions(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    bob = Panel(app, world.bob)
    assert bob.get("/").status_code == 200
    result = cli.invoke(args=["user", "remove", "BOB@example.com", "--tenant", "alpha"])
    assert result.exit_code == 0, result.output
    assert "removed bob@example.com from alpha" in result.output
    assert bob.get("/").status_code == 302
    again = cli.invoke(args=["user", "remove", "bob@example.com", "--tenant", "alpha"])
    assert again.exit_code == 1
    assert "bob@example.com is not a member of tenant 'alpha'" in again.output


def test_an_operator_revokes_all_sessions_of_a_user(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    first, second = Panel(app, world.alice), Panel(app, world.alice)
    result = cli.invoke(args=["user", "revoke-sessions", "alice@example.com"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "ended 2 sessions of alice@example.com"
    assert first.get("/").status_code == 302 and second.get("/").status_code == 302
    unknown = cli.invoke(args=["user", "revoke-sessions", "nobody@example.com"])
    assert unknown.exit_code == 1 and "no user 'nobody@example.com'" in unknown.output


def age_sessions(user_id: int, **ago: timedelta) -> None:
    now = utcnow()
    db.session.execute(
        update(UserSession)
        .where(UserSession.user_id == user_id)
        .values({column: now - delta for column, delta in ago.items()})
    )
    db.session.commit()


def test_an_idle_session_ends_and_an_active_one_is_kept_alive(app: Flask, world: World) -> None:
    idle_limit = timedelta(seconds=settings(app).SCHEDULER_SESSION_IDLE_TIMEOUT)
    alice = Panel(app, world.alice)
    age_sessions(world.alice.id, last_seen_at=idle_limit - timedelta(minutes=5))
    assert alice.get("/").status_code == 200
    seen = db.session.scalar(select(UserSession.last_seen_at))
    assert seen is not None and utcnow() - seen < timedelta(minutes=1)  # the visit counted

    age_sessions(world.alice.id, last_seen_at=idle_limit + timedelta(minutes=1))
    assert alice.get("/").status_code == 302


def test_a_session_ends_at_its_absolute_lifetime_however_active(app: Flask, world: World) -> None:
    max_age = timedelta(seconds=settings(app).SCHEDULER_SESSION_MAX_AGE)
    alice = Panel(app, world.alice)
    age_sessions(world.alice.id, created_at=max_age - timedelta(minutes=1))
    assert alice.get("/").status_code == 200
    age_sessions(world.alice.id, created_at=max_age + timedelta(minutes=1))
    assert alice.get("/").status_code == 302


def test_cookies_are_secure_outside_debug_and_tests(database_url: str, world: World) -> None:
    production = migrated_app(database_url, TESTING=False)
    assert production.config["SESSION_COOKIE_SECURE"] is True
    login = production.test_client().get("/login")
    assert "Secure" in login.headers["Set-Cookie"]
    plain = migrated_app(database_url, TESTING=False, SESSION_COOKIE_SECURE=False)
    assert plain.config["SESSION_COOKIE_SECURE"] is False
    assert (
        migrated_app(database_url, TESTING=False, DEBUG=True).config["SESSION_COOKIE_SECURE"]
        is False
    )
    for application in (production, plain):
        with application.app_context():
            db.engine.dispose()


@pytest.mark.parametrize("value", [0, -5, "soon"])
def test_a_bad_session_lifetime_stops_the_app(database_url: str, value: object) -> None:
    with pytest.raises(ConfigError, match="SCHEDULER_SESSION_IDLE_TIMEOUT"):
        migrated_app(database_url, SCHEDULER_SESSION_IDLE_TIMEOUT=value)
