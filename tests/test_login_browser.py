"""A real browser keeps the device cookie of its login and sends it back to the login page, so a
lockout made by guesses from elsewhere does not lock its user out (OWASP's device cookies)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.browser_support import LiveServer, PageErrors, log_out
from tests.conftest import PASSWORD
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import LoginAttempt
from webapp.web import login_limiter


def log_in(page: Any, url: str) -> None:
    page.goto(url + "/login")
    page.get_by_label("Email").fill("alice@example.com")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


def test_the_browser_that_logged_in_before_gets_through_a_lockout(
    new_page: Any, chromium: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    page = new_page
    log_in(page, live_panel.url)
    page.wait_for_url(live_panel.url + "/")
    (device,) = [c for c in page.context.cookies() if c["name"] == "device"]
    assert (device["path"], device["httpOnly"], device["sameSite"]) == ("/login", True, "Lax")
    log_out(page)
    page.wait_for_url(live_panel.url + "/login")
    with live_panel.app.app_context():  # 50 guesses at alice from other addresses
        now = utcnow() - timedelta(minutes=1)
        db.session.add_all(
            LoginAttempt(subject="email:alice@example.com", attempted_at=now)
            for _ in range(login_limiter.MAX_FAILURES_PER_ACCOUNT)
        )
        db.session.commit()
        db.session.remove()
    stranger = chromium.new_context().new_page()
    log_in(stranger, live_panel.url)
    stranger.get_by_text("Too many failed attempts").wait_for()
    stranger.context.close()
    log_in(page, live_panel.url)
    page.wait_for_url(live_panel.url + "/")
    assert errors.messages == []
