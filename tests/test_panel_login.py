"""Logging in: the limiter in the database, session renewal, the landing page."""

from __future__ import annotations

import re

from flask import Flask
from sqlalchemy import func, select

from tests.conftest import PASSWORD, World
from webapp.extensions import db
from webapp.models import LoginAttempt


def csrf_token(client: object) -> str:
    page = client.get("/login").get_data(as_text=True)  # type: ignore[attr-defined]
    found = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', page)
    assert found
    return found.group(1)


def attempt(client: object, email: str, password: str) -> object:
    return client.post(  # type: ignore[attr-defined]
        "/login", data={"email": email, "password": password, "csrf_token": csrf_token(client)}
    )


def test_five_failures_for_one_account_answer_429_with_retry_after(
    app: Flask, world: World
) -> None:
    client = app.test_client()
    for _ in range(5):
        assert attempt(client, "alice@example.com", "wrong-password").status_code == 401  # type: ignore[attr-defined]
    refused = attempt(client, "alice@example.com", PASSWORD)
    assert refused.status_code == 429  # type: ignore[attr-defined]
    assert 800 < int(refused.headers["Retry-After"]) <= 900  # type: ignore[attr-defined]
    assert "Too many failed attempts" in refused.get_data(as_text=True)  # type: ignore[attr-defined]
    # Another account from the same address is not locked out by these five.
    assert attempt(client, "bob@example.com", PASSWORD).status_code == 303  # type: ignore[attr-defined]


def test_the_limit_is_in_the_database_not_in_one_process(app: Flask, world: World) -> None:
    for _ in range(5):
        attempt(app.test_client(), "nobody@example.com", "wrong-password")
    count = db.session.scalar(
        select(func.count()).select_from(LoginAttempt).where(
            LoginAttempt.subject == "email:nobody@example.com"
        )
    )
    assert count == 5
    # A fresh client (another browser, another process) is refused too.
    assert attempt(app.test_client(), "nobody@example.com", "x").status_code == 429  # type: ignore[attr-defined]


def test_one_address_is_slowed_down_across_accounts(app: Flask, world: World) -> None:
    client = app.test_client()
    for number in range(20):
        attempt(client, f"guess{number}@example.com", "wrong-password")
    assert attempt(client, "alice@example.com", PASSWORD).status_code == 429  # type: ignore[attr-defined]


def test_a_successful_login_renews_the_session(app: Flask, world: World) -> None:
    client = app.test_client()
    token_before = csrf_token(client)
    attempt(client, "alice@example.com", PASSWORD)
    page = client.get("/").get_data(as_text=True)
    token_after = re.search(r'<meta name="csrf-token" content="([^"]+)"', page)
    assert token_after and token_after.group(1) != token_before
    with client.session_transaction() as session:
        assert session["_user_id"] == str(world.alice.id)


def test_login_lands_on_the_schedules_of_the_tenant(app: Flask, world: World) -> None:
    client = app.test_client()
    response = attempt(client, "alice@example.com", PASSWORD)
    assert response.headers["Location"] == "/"  # type: ignore[attr-defined]
    page = client.get("/").get_data(as_text=True)
    assert "Schedules" in page and "Alpha Corp" in page


def test_logout_needs_csrf_and_ends_the_session(app: Flask, world: World) -> None:
    client = app.test_client()
    attempt(client, "alice@example.com", PASSWORD)
    assert client.post("/logout").status_code == 400
    page = client.get("/").get_data(as_text=True)
    token = re.search(r'<meta name="csrf-token" content="([^"]+)"', page)
    assert token
    assert client.post("/logout", data={"csrf_token": token.group(1)}).status_code == 303
    assert client.get("/").status_code == 302
