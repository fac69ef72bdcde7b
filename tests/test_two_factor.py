"""Two-factor login: enrolment, the login's second step, recovery codes, replays, the limiter,
turning it off, a tenant's requirement for its admins and the operator's reset."""

from __future__ import annotations

import re

import pyotp
from flask import Flask
from flask.testing import FlaskClient, FlaskCliRunner
from sqlalchemy import select
from werkzeug.test import TestResponse

from tests.conftest import PASSWORD, World
from tests.panel_helpers import Panel, csrf_token, log_in
from tests.test_panel_login import lock_account_from_many_addresses
from tests.two_factor_helpers import Enrolled, enrol
from webapp import create_app
from webapp.extensions import db
from webapp.models import AuditEvent, RecoveryCode, Tenant, User
from webapp.services import sealing
from webapp.web import login_limiter
from webapp.web.auth import PENDING_KEY

SECOND_STEP = "/login/two-factor"


def second_step(client: FlaskClient, code: str) -> TestResponse:
    token = csrf_token(client, SECOND_STEP)
    return client.post(SECOND_STEP, data={"code": code, "csrf_token": token})


def actions(user: User) -> list[str]:
    return list(
        db.session.scalars(
            select(AuditEvent.action).where(AuditEvent.object_id == user.id).order_by(AuditEvent.id)
        )
    )


def logged_in(client: FlaskClient) -> bool:
    return client.get("/").status_code == 200


def test_enrolment_shows_a_qr_code_and_keeps_the_recovery_codes_hashed(
    app: Flask, world: World
) -> None:
    enrolled = enrol(Panel(app, world.alice))
    alice = db.session.get(User, world.alice.id)
    assert alice is not None and alice.two_factor_enabled_at is not None
    hashes = list(db.session.scalars(select(RecoveryCode.code_hash)))
    assert len(hashes) == 10 and not set(hashes) & set(enrolled.recovery_codes)
    assert "user.two_factor_enabled" in actions(world.alice)
    page = Panel(app, world.alice).get("/account/two-factor").get_data(as_text=True)
    assert "is <strong>on</strong>" in page and enrolled.secret not in page


def test_a_wrong_code_does_not_turn_it_on(app: Flask, world: World) -> None:
    panel = Panel(app, world.alice)
    panel.post("/account/two-factor/setup", htmx=False)
    refused = panel.post("/account/two-factor/confirm", {"code": "000000"}, htmx=False)
    assert refused.status_code == 422
    assert "That code is not the current one" in refused.get_data(as_text=True)
    alice = db.session.get(User, world.alice.id)
    assert alice is not None and alice.two_factor_enabled_at is None


def test_login_needs_the_code_before_any_session(app: Flask, world: World) -> None:
    enrolled = enrol(Panel(app, world.alice))
    client = app.test_client()
    password_step = log_in(client, "alice@example.com", PASSWORD, next_url="/runs")
    assert password_step.status_code == 303
    assert password_step.headers["Location"].endswith(SECOND_STEP)
    assert not logged_in(client)
    wrong = second_step(client, "123456" if enrolled.code() != "123456" else "654321")
    assert wrong.status_code == 401
    assert "Wrong or already used code." in wrong.get_data(as_text=True)
    right = second_step(client, enrolled.code())
    assert right.status_code == 303 and right.headers["Location"].endswith("/runs")
    assert logged_in(client)


def test_a_code_is_refused_when_replayed_within_its_window(app: Flask, world: World) -> None:
    enrolled = enrol(Panel(app, world.alice))
    code = enrolled.code()
    first = app.test_client()
    log_in(first, "alice@example.com")
    assert second_step(first, code).status_code == 303
    again = app.test_client()
    log_in(again, "alice@example.com")
    assert second_step(again, code).status_code == 401
    assert not logged_in(again)


def test_a_recovery_code_works_once(app: Flask, world: World) -> None:
    enrolled = enrol(Panel(app, world.alice))
    code = enrolled.recovery_codes[3].upper()  # as typed from paper
    first = app.test_client()
    log_in(first, "alice@example.com")
    assert second_step(first, code).status_code == 303
    assert logged_in(first)
    again = app.test_client()
    log_in(again, "alice@example.com")
    assert second_step(again, code).status_code == 401
    assert "user.recovery_code_used" in actions(world.alice)
    assert len(list(db.session.scalars(select(RecoveryCode.id)))) == 9


def test_wrong_codes_count_in_the_login_limiter(app: Flask, world: World) -> None:
    enrolled = enrol(Panel(app, world.alice))
    client = app.test_client()
    log_in(client, "alice@example.com")
    for _ in range(login_limiter.MAX_FAILURES_PER_PAIR):
        assert second_step(client, "000000").status_code == 401
    refused = second_step(client, enrolled.code())
    assert refused.status_code == 429 and "Retry-After" in refused.headers
    assert not logged_in(client)
    # A correct password does not start the count afresh: the next code is refused as well.
    assert log_in(client, "alice@example.com").status_code == 429


def test_the_second_step_expires(app: Flask, world: World) -> None:
    enrolled = enrol(Panel(app, world.alice))
    client = app.test_client()
    log_in(client, "alice@example.com")
    with client.session_transaction() as session:
        session[PENDING_KEY] = {**session[PENDING_KEY], "until": 0}
    expired = client.get(SECOND_STEP)
    assert expired.status_code == 303 and expired.headers["Location"].endswith("/login")
    token = csrf_token(client)  # a post with the code cannot log in either
    posted = client.post(SECOND_STEP, data={"code": enrolled.code(), "csrf_token": token})
    assert posted.status_code == 303 and not logged_in(client)


def test_turning_it_off_needs_the_password_and_a_code(app: Flask, world: World) -> None:
    panel = Panel(app, world.alice)
    enrolled: Enrolled = enrol(panel)
    wrong_password = panel.post(
        "/account/two-factor/disable", {"password": "nope", "code": enrolled.code()}, htmx=False
    )
    assert wrong_password.status_code == 422
    assert "Wrong password." in wrong_password.get_data(as_text=True)
    wrong_code = panel.post(
        "/account/two-factor/disable", {"password": PASSWORD, "code": "000000"}, htmx=False
    )
    assert wrong_code.status_code == 422
    assert "Wrong or already used code." in wrong_code.get_data(as_text=True)
    alice = db.session.get(User, world.alice.id)
    assert alice is not None and alice.two_factor_enabled_at is not None
    off = panel.post(
        "/account/two-factor/disable", {"password": PASSWORD, "code": enrolled.code()}, htmx=False
    )
    assert off.status_code == 303
    db.session.expire_all()
    alice = db.session.get(User, world.alice.id)
    assert alice is not None and alice.two_factor_enabled_at is None and alice.totp_secret is None
    assert db.session.scalar(select(RecoveryCode.id)) is None
    assert "user.two_factor_disabled" in actions(world.alice)
    client = app.test_client()
    assert log_in(client, "alice@example.com").headers["Location"].endswith("/")


def test_a_tenant_that_requires_it_sends_an_admin_without_it_to_enrolment(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    saved = alice.post("/settings/two-factor", {"require_two_factor_admins": "on"}, htmx=False)
    assert saved.status_code == 303
    assert "tenant.two_factor_required" in list(
        db.session.scalars(select(AuditEvent.action).where(AuditEvent.tenant_id == world.alpha.id))
    )
    client = app.test_client()
    signed_in = log_in(client, "alice@example.com")
    assert signed_in.headers["Location"].endswith("/account/two-factor")
    # Every page of the panel sends her there until it is on.
    assert client.get("/runs").headers["Location"].endswith("/account/two-factor")
    assert "requires two-factor login" in client.get("/account/two-factor").get_data(as_text=True)
    # A viewer of the tenant and the admin of another are not asked.
    assert log_in(app.test_client(), "bob@example.com").headers["Location"].endswith("/")
    assert log_in(app.test_client(), "charlie@example.com").headers["Location"].endswith("/")
    enrol(alice)
    assert alice.get("/runs").status_code == 200


def test_a_viewer_cannot_change_the_requirement(app: Flask, world: World) -> None:
    refused = Panel(app, world.bob).post(
        "/settings/two-factor", {"require_two_factor_admins": "on"}, htmx=False
    )
    assert refused.status_code == 403
    db.session.expire_all()
    alpha = db.session.get(Tenant, world.alpha.id)
    assert alpha is not None and not alpha.require_two_factor_admins


def reset_rows(user: User) -> list[tuple[str, str, int | None]]:
    rows = db.session.execute(
        select(AuditEvent.action, AuditEvent.actor_label, AuditEvent.tenant_id).where(
            AuditEvent.object_id == user.id, AuditEvent.action == "user.two_factor_reset"
        )
    )
    return [(action, label, tenant_id) for action, label, tenant_id in rows]


def test_an_operator_resets_it_from_the_command_line(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    alice = Panel(app, world.alice)
    enrol(alice)
    result = cli.invoke(args=["user", "reset-two-factor", "Alice@Example.com"])
    assert result.exit_code == 0, result.output
    assert "two-factor login of alice@example.com is off" in result.output
    # Whoever holds the lost phone may hold a session too: the reset ends them.
    assert "/login" in alice.get("/").headers["Location"]
    assert reset_rows(world.alice) == [("user.two_factor_reset", "cli", None)]
    assert log_in(app.test_client(), "alice@example.com").headers["Location"].endswith("/")
    again = cli.invoke(args=["user", "reset-two-factor", "alice@example.com"])
    assert again.exit_code != 0 and "has no two-factor login to reset" in again.output
    unknown = cli.invoke(args=["user", "reset-two-factor", "nobody@example.com"])
    assert unknown.exit_code != 0 and "no user" in unknown.output


def test_an_operator_resets_it_in_the_operator_area(app: Flask, world: World) -> None:
    enrol(Panel(app, world.alice))
    operator = db.session.get(User, world.charlie.id)
    assert operator is not None
    operator.is_operator = True
    db.session.commit()
    panel = Panel(app, operator)
    assert "Reset two-factor login" in panel.get("/operator/two-factor").get_data(as_text=True)
    unknown = panel.post("/operator/two-factor/reset", {"email": "nobody@example.com"}, htmx=False)
    assert unknown.status_code == 422
    assert "No user &#39;nobody@example.com&#39;." in unknown.get_data(as_text=True)
    reset = panel.post("/operator/two-factor/reset", {"email": "alice@example.com"}, htmx=False)
    assert reset.status_code == 303
    assert reset_rows(world.alice) == [("user.two_factor_reset", "charlie@example.com", None)]
    assert log_in(app.test_client(), "alice@example.com").headers["Location"].endswith("/")
    # A tenant's admin who is no operator finds no such page.
    assert Panel(app, world.alice).get("/operator/two-factor").status_code == 404


def test_the_second_factor_gets_its_owner_through_a_lockout_made_elsewhere(
    app: Flask, world: World
) -> None:
    """50 wrong passwords from 10 addresses lock an account for every unknown device; with
    two-factor login on, its owner still logs in (the password and then a code), while the
    per-address limit still holds."""
    enrolled = enrol(Panel(app, world.alice))
    lock_account_from_many_addresses("alice@example.com")
    client = app.test_client()
    assert log_in(client, "alice@example.com").headers["Location"].endswith("/login/two-factor")
    assert second_step(client, enrolled.code()).status_code == 303
    assert logged_in(client)
    # Bob has no second factor: the same lockout refuses his right password.
    lock_account_from_many_addresses("bob@example.com")
    assert log_in(app.test_client(), "bob@example.com").status_code == 429


def stored_secret(user: User) -> str | None:
    db.session.expire_all()
    return db.session.scalar(select(User.totp_secret).where(User.id == user.id))


def test_the_secret_is_sealed_at_rest(app: Flask, world: World) -> None:
    """A copy of the database holds no usable secret: the column is encrypted under a key
    derived from SECRET_KEY, and the login still reads it."""
    enrolled = enrol(Panel(app, world.alice))
    stored = stored_secret(world.alice)
    assert stored is not None and stored.startswith("v1:") and enrolled.secret not in stored
    client = app.test_client()
    log_in(client, "alice@example.com")
    assert second_step(client, enrolled.code()).status_code == 303 and logged_in(client)


def test_a_secret_stored_in_plain_text_still_works_and_is_sealed_at_its_use(
    app: Flask, world: World
) -> None:
    enrolled = enrol(Panel(app, world.alice))
    alice = db.session.get(User, world.alice.id)
    assert alice is not None
    alice.totp_secret = enrolled.secret  # as the release before sealing stored it
    db.session.commit()
    client = app.test_client()
    log_in(client, "alice@example.com")
    assert second_step(client, enrolled.code()).status_code == 303 and logged_in(client)
    stored = stored_secret(world.alice)
    assert stored is not None and stored.startswith("v1:")


def test_sealed_secrets_survive_a_new_secret_key_while_the_old_one_is_a_fallback(
    app: Flask,
) -> None:
    sealed = sealing.seal("JBSWY3DPEHPK3PXP")
    rotated = {"TESTING": True, "SQLALCHEMY_DATABASE_URI": "sqlite://", "SECRET_KEY": "new-key"}
    with create_app(rotated).app_context():
        assert sealing.unseal(sealed) is None
    with create_app({**rotated, "SECRET_KEY_FALLBACKS": "test-secret"}).app_context():
        assert sealing.unseal(sealed) == "JBSWY3DPEHPK3PXP"


def test_wrong_codes_at_the_setup_count_in_the_login_limiter(app: Flask, world: World) -> None:
    panel = Panel(app, world.alice)
    setup = panel.post("/account/two-factor/setup", htmx=False).get_data(as_text=True)
    found = re.search(r'id="totp-secret">([A-Z2-7]+)<', setup)
    assert found
    for _ in range(login_limiter.MAX_FAILURES_PER_PAIR):
        wrong = panel.post("/account/two-factor/confirm", {"code": "000000"}, htmx=False)
        assert wrong.status_code == 422
    code = pyotp.TOTP(found.group(1)).now()
    refused = panel.post("/account/two-factor/confirm", {"code": code}, htmx=False)
    assert refused.status_code == 429 and "Retry-After" in refused.headers
    assert "Too many failed attempts" in refused.get_data(as_text=True)
    alice = db.session.get(User, world.alice.id)
    assert alice is not None and alice.two_factor_enabled_at is None


def test_wrong_codes_and_passwords_at_turning_it_off_count_in_the_login_limiter(
    app: Flask, world: World
) -> None:
    panel = Panel(app, world.alice)
    enrolled = enrol(panel)
    guesses = [{"password": PASSWORD, "code": "000000"}, {"password": "guess", "code": "0"}]
    for number in range(login_limiter.MAX_FAILURES_PER_PAIR):
        wrong = panel.post("/account/two-factor/disable", guesses[number % 2], htmx=False)
        assert wrong.status_code == 422
    right = {"password": PASSWORD, "code": enrolled.code()}
    refused = panel.post("/account/two-factor/disable", right, htmx=False)
    assert refused.status_code == 429 and "Retry-After" in refused.headers
    db.session.expire_all()
    alice = db.session.get(User, world.alice.id)
    assert alice is not None and alice.two_factor_enabled_at is not None


def test_the_command_line_sets_a_tenants_requirement(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    on = cli.invoke(args=["tenant", "set", "alpha", "--require-two-factor"])
    assert on.exit_code == 0, on.output
    assert "two-factor required for admins yes" in on.output
    assert (
        log_in(app.test_client(), "alice@example.com")
        .headers["Location"]
        .endswith("/account/two-factor")
    )
    off = cli.invoke(args=["tenant", "set", "alpha", "--no-require-two-factor"])
    assert off.exit_code == 0 and "two-factor required for admins no" in off.output
    assert log_in(app.test_client(), "alice@example.com").headers["Location"].endswith("/")
    rows = db.session.execute(
        select(AuditEvent.actor_label, AuditEvent.after).where(
            AuditEvent.action == "tenant.two_factor_required"
        )
    ).all()
    assert rows == [
        ("cli", {"require_two_factor_admins": True}),
        ("cli", {"require_two_factor_admins": False}),
    ]
    # Without the flag the line and the requirement stay as they were.
    unchanged = cli.invoke(args=["tenant", "set", "alpha", "--max-schedules", "9"])
    assert "two-factor" not in unchanged.output
