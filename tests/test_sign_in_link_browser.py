"""A sign-in link in Chromium, with JavaScript and without: the page, Continue, the panel with
"Back to <host>"; a used link's page; at phone width the header still fits, and axe-core finds
no serious violation on these pages."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors
from tests.panel_pages import PHONE
from tests.test_panel_axe import describe, fail_on, severe_violations
from webapp.config import settings
from webapp.database import utcnow
from webapp.extensions import db
from webapp.services import sign_in_links
from webapp.services.audit import Actor

pytestmark = pytest.mark.browser

RETURN_URL = "https://app.example.com/account"


def new_link(server: LiveServer, email: str = "dora@example.com") -> str:
    """A link to alpha for `email` (admin), back to app.example.com, as the operator API makes."""
    with server.app.app_context():
        allowed = settings().model_copy(update={"SCHEDULER_RETURN_URL_HOSTS": ["app.example.com"]})
        data = {"tenant": "alpha", "email": email, "role": "admin", "return_url": RETURN_URL}
        made = sign_in_links.create_link(
            data, Actor(None, "operator token x (host)"), utcnow(), allowed
        )
        db.session.remove()
    return f"{server.url}/sign-in/alpha/{made.token}"


def test_a_person_continues_into_the_panel_and_sees_the_way_back(
    page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    link = new_link(live_panel)
    page.goto(link)
    page.get_by_role("heading", name="Sign in to Alpha Corp").wait_for()
    page.get_by_text("dora@example.com").wait_for()
    page.get_by_role("button", name="Continue").click()
    page.wait_for_url(live_panel.url + "/")
    back = page.get_by_role("link", name="Back to app.example.com")
    assert back.get_attribute("href") == RETURN_URL
    page.get_by_role("link", name="Run history").click()
    page.wait_for_url(live_panel.url + "/runs")
    assert page.get_by_role("link", name="Back to app.example.com").count() == 1
    page.goto(link)  # used
    page.get_by_role("heading", name="This sign-in link was already used").wait_for()
    assert page.get_by_role("button", name="Continue").count() == 0
    # Chromium logs the used link's 410 as a failed load: the only message allowed.
    assert all("status of 410" in message for message in errors.messages)


def test_the_link_pages_fit_a_phone_and_pass_axe(chromium: Any, live_panel: LiveServer) -> None:
    # axe is injected as an inline script, which the CSP refuses: bypassed for this check only.
    context = chromium.new_context(viewport=PHONE, bypass_csp=True)
    page = context.new_page()
    link = new_link(live_panel)
    found: list[str] = []
    page.goto(link)
    found += describe("sign-in link", severe_violations(page))
    page.get_by_role("button", name="Continue").click()
    page.get_by_role("link", name="Back to app.example.com").wait_for()
    found += describe("panel after a link", severe_violations(page))
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.goto(link)
    found += describe("used link", severe_violations(page))
    context.close()
    fail_on(found)
