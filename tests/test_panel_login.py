"""Logging in: the limiter in the database, session renewal, the landing page."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from tests.conftest import PASSWORD, World, migrated_app
from tests.panel_helpers import csrf_token, log_in
from webapp.config import ConfigError, settings
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import LoginAttempt, UserSession
from webapp.services import sessions
from webapp.web import login_limiter


def test_five_failures_for_one_account_answer_429_with_retry_after(
    app: Flask, world: World
) -> None:
    client = app.test_client()
    for _ in range(5):
        assert log_in(client, "alice@example.com", "wrong-password").status_code == 401
    refused = log_in(client, "alice@example.com", PASSWORD)
    assert refused.status_code == 429
    assert 800 < int(refused.headers["Retry-After"]) <= 900
    assert "Too many failed attempts" in refused.get_data(as_text=True)
    # Another account from the same address is not locked out by these five.
    assert log_in(client, "bob@example.com", PASSWORD).status_code == 303


def test_the_limit_is_in_the_database_not_in_one_process(app: Flask, world: World) -> None:
    for _ in range(5):
        log_in(app.test_client(), "nobody@example.com", "wrong-password")
    count = db.session.scalar(
        select(func.count())
        .select_from(LoginAttempt)
        .where(LoginAttempt.subject == "email:nobody@example.com")
    )
    assert count == 5
    # A fresh client (another browser, another process) is refused too.
    assert log_in(app.test_client(), "nobody@example.com", "x").status_code == 429


def test_failures_from_one_address_do_not_lock_out_a_correct_password(
    app: Flask, world: World
) -> None:
    # Behind a proxy every client has the proxy's address: 20 guesses at unknown accounts
    # must not lock alice out.
    client = app.test_client()
    for number in range(20):
        log_in(client, f"guess{number}@example.com", "wrong-password")
    assert log_in(app.test_client(), "alice@example.com", PASSWORD).status_code == 303


def test_past_the_flood_guard_only_wrong_passwords_answer_429(app: Flask, world: World) -> None:
    now = utcnow()
    db.session.add_all(
        LoginAttempt(subject="ip:127.0.0.1", attempted_at=now - timedelta(minutes=1))
        for _ in range(login_limiter.MAX_FAILURES_PER_ADDRESS)
    )
    db.session.commit()
    wrong = log_in(app.test_client(), "bob@example.com", "wrong-password")
    assert wrong.status_code == 429
    assert log_in(app.test_client(), "nobody@example.com", "x").status_code == 429
    assert log_in(app.test_client(), "alice@example.com", PASSWORD).status_code == 303


def test_parallel_guesses_get_no_more_password_checks_than_the_limit(
    app: Flask, world: World
) -> None:
    guesses = 30
    start = threading.Barrier(guesses)

    def guess() -> int:
        client = FlaskClient(app, app.response_class, use_cookies=True)
        token = csrf_token(client)
        start.wait()
        data = {"email": "alice@example.com", "password": "wrong", "csrf_token": token}
        return client.post("/login", data=data).status_code

    db.session.commit()
    with ThreadPoolExecutor(guesses) as pool:
        statuses = sorted(pool.map(lambda _: guess(), range(guesses)))
    assert statuses.count(401) == login_limiter.MAX_FAILURES_PER_PAIR
    assert statuses.count(429) == guesses - login_limiter.MAX_FAILURES_PER_PAIR


def test_an_unknown_email_costs_one_password_check_as_a_wrong_password_does(
    app: Flask, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both failures check one scrypt hash, so that their time does not tell which emails have
    an account (a process's first unknown email made the hash, then checked it: twice the time)."""
    scrypts: list[int] = []
    real = hashlib.scrypt

    def counted(password: bytes, **parameters: Any) -> bytes:
        scrypts.append(parameters["n"])
        return real(password, **parameters)

    monkeypatch.setattr(hashlib, "scrypt", counted)
    client = app.test_client()
    log_in(client, "alice@example.com", "wrong")  # the process's first login
    for email in ("nobody@example.com", "alice@example.com", "someone@example.com"):
        scrypts.clear()
        assert log_in(client, email, "wrong").status_code == 401
        assert len(scrypts) == 1, (email, scrypts)


@contextmanager
def another_app(database_url: str, **config: object) -> Iterator[Flask]:
    application = migrated_app(database_url, **config)
    try:
        yield application
    finally:
        with application.app_context():
            db.engine.dispose()


def test_a_trusted_proxy_tells_clients_apart_and_an_untrusted_header_is_ignored(
    database_url: str, world: World
) -> None:
    def from_client(application: Flask, address: str, password: str) -> int:
        client = application.test_client()
        client.environ_base["HTTP_X_FORWARDED_FOR"] = address
        return log_in(client, "alice@example.com", password).status_code

    with another_app(database_url, SCHEDULER_TRUSTED_PROXIES=1) as proxied:
        for _ in range(5):
            assert from_client(proxied, "203.0.113.5", "wrong") == 401
        assert from_client(proxied, "203.0.113.5", PASSWORD) == 429
        assert from_client(proxied, "198.51.100.7", PASSWORD) == 303

    # Without a trusted proxy a client cannot dodge its limit by inventing addresses.
    with another_app(database_url) as direct:
        for number in range(5):
            assert from_client(direct, f"192.0.2.{number}", "wrong") == 401
        assert from_client(direct, "192.0.2.99", PASSWORD) == 429


def test_a_bad_trusted_proxies_setting_stops_the_app(database_url: str) -> None:
    with pytest.raises(ConfigError, match="SCHEDULER_TRUSTED_PROXIES"):
        migrated_app(database_url, SCHEDULER_TRUSTED_PROXIES=-1)


def test_a_successful_login_renews_the_session(app: Flask, world: World) -> None:
    client = app.test_client()
    token_before = csrf_token(client)
    log_in(client, "alice@example.com", PASSWORD)
    assert csrf_token(client, "/", "meta") != token_before
    with client.session_transaction() as session:
        token = session["_user_id"]
    # The cookie holds the login's token, and the server knows it as alice's session.
    assert token != str(world.alice.id)
    stored = db.session.scalar(
        select(UserSession).where(UserSession.token_hash == sessions.token_hash(token))
    )
    assert stored is not None and stored.user_id == world.alice.id


def test_login_lands_on_the_schedules_of_the_tenant(app: Flask, world: World) -> None:
    client = app.test_client()
    response = log_in(client, "alice@example.com", PASSWORD)
    assert response.headers["Location"] == "/"
    page = client.get("/").get_data(as_text=True)
    assert "Schedules" in page and "Alpha Corp" in page


def test_logout_needs_csrf_and_ends_the_session(app: Flask, world: World) -> None:
    client = app.test_client()
    log_in(client, "alice@example.com", PASSWORD)
    assert client.post("/logout").status_code == 400
    token = csrf_token(client, "/", "meta")
    assert client.post("/logout", data={"csrf_token": token}).status_code == 303
    assert client.get("/").status_code == 302


def test_an_oversized_anonymous_post_is_refused_before_it_is_read(app: Flask) -> None:
    limit = settings(app).SCHEDULER_MAX_REQUEST_BYTES
    body = b"email=a%40b.example&password=" + b"x" * limit
    response = app.test_client().post(
        "/login", data=body, content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 413
    assert "larger than the panel accepts" in response.get_data(as_text=True)
    assert db.session.scalar(select(func.count()).select_from(LoginAttempt)) == 0


def lock_account_from_many_addresses(email: str) -> None:
    """50 recent failures at `email` from 10 addresses (5 each), as the limiter records them."""
    now = utcnow()
    for number in range(login_limiter.MAX_FAILURES_PER_ACCOUNT):
        address = f"198.51.100.{number % 10}"
        subjects = login_limiter.Subjects.of(address, email)
        db.session.add_all(
            LoginAttempt(subject=subject, attempted_at=now - timedelta(minutes=1))
            for subject in (subjects.pair, subjects.account, subjects.address)
        )
    db.session.commit()


def test_a_known_device_logs_in_while_guessing_locks_the_account_for_unknown_ones(
    app: Flask, world: World
) -> None:
    """OWASP's device cookies: the browser that logged in before gets through a lockout made by
    guesses from elsewhere, and its own failures lock only itself."""
    browser = app.test_client()
    assert log_in(browser, "alice@example.com", PASSWORD).status_code == 303
    device = browser.get_cookie("device", path="/login")
    assert device is not None and device.http_only
    lock_account_from_many_addresses("alice@example.com")
    # An unknown device is refused, the right password included.
    assert log_in(app.test_client(), "alice@example.com", PASSWORD).status_code == 429
    # Another account's device cookie, or a forged one, makes no device known.
    bobs = app.test_client()
    assert log_in(bobs, "bob@example.com", PASSWORD).status_code == 303
    bob_device = bobs.get_cookie("device", path="/login")
    assert bob_device is not None
    for value in (bob_device.value, device.value[:-2] + "xx"):
        stranger = app.test_client()
        stranger.set_cookie("device", value, path="/login")
        assert log_in(stranger, "alice@example.com", PASSWORD).status_code == 429
    # The known device logs in.
    assert log_in(browser, "alice@example.com", PASSWORD).status_code == 303
    # Its own wrong passwords lock it alone, after five.
    for _ in range(login_limiter.MAX_FAILURES_PER_DEVICE):
        assert log_in(browser, "alice@example.com", "wrong-password").status_code == 401
    assert log_in(browser, "alice@example.com", PASSWORD).status_code == 429


def test_expired_attempts_of_every_email_are_pruned(app: Flask, world: World) -> None:
    """Guesses at emails that are never tried again (unknown ones) leave no rows behind."""
    long_ago = utcnow() - login_limiter.WINDOW - timedelta(minutes=1)
    stale = login_limiter.Subjects.of("203.0.113.9", "nobody-here@example.com")
    db.session.add_all(
        LoginAttempt(subject=subject, attempted_at=long_ago)
        for subject in (stale.pair, stale.account, stale.address)
    )
    db.session.commit()
    log_in(app.test_client(), "someone-else@example.com", "wrong-password")
    subjects = set(db.session.scalars(select(LoginAttempt.subject)))
    assert subjects == {
        "email:someone-else@example.com",
        "pair:someone-else@example.com|127.0.0.1",
        "ip:127.0.0.1",
    }
