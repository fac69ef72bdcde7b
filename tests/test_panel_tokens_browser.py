"""The API tokens page in headless Chromium, with JavaScript (htmx, hx-confirm) and without:
an admin creates a token, sees its secret once, uses it, revokes it; the API docs page too."""

from __future__ import annotations

import re
from typing import Any
from urllib.request import Request, urlopen

import pytest

from tests import test_panel_actions_browser as actions_browser
from tests import test_panel_browser as panel_browser
from tests.browser_support import LiveServer, PageErrors, log_in

pytestmark = pytest.mark.browser

server = panel_browser.server
chromium = panel_browser.chromium
errors = panel_browser.errors


# With JavaScript and without, dialogs (hx-confirm of Revoke) accepted.
js = actions_browser.js
page = actions_browser.page


def api_status(server: LiveServer, secret: str) -> int:
    request = Request(server.url + "/api/v1/schedules")
    request.add_header("Authorization", f"Bearer {secret}")
    try:
        with urlopen(request, timeout=10) as response:
            return int(response.status)
    except Exception as error:  # HTTPError carries the status
        return int(getattr(error, "code", 0))


def test_an_admin_creates_uses_and_revokes_a_token(
    page: Any, server: LiveServer, errors: PageErrors, js: bool
) -> None:
    log_in(page, server, "alice@example.com")
    page.get_by_role("link", name="API tokens").click()
    page.get_by_label("Name").fill("Deploy pipeline")
    page.get_by_label("Scope").select_option("write")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#token-secret").inner_text()
    assert re.fullmatch(r"sch_[0-9a-f]{8}_\S+", secret)
    assert api_status(server, secret) == 200
    page.goto(server.url + "/tokens")
    assert page.locator("#token-secret").count() == 0  # shown once
    row = page.locator("tr", has_text="Deploy pipeline")
    assert "active" in row.inner_text()
    row.get_by_role("button", name="Revoke").click()
    page.wait_for_url(server.url + "/tokens")
    page.locator("tr", has_text="revoked").wait_for()
    assert api_status(server, secret) == 401
    page.goto(server.url + "/api/docs")
    # Swagger UI's operation with JavaScript (tests/test_api_docs_browser.py), the server's without.
    page.locator(
        "#operations-schedules-create_schedule" if js else "#op-create_schedule"
    ).wait_for()
    assert errors.messages == []


def test_a_viewer_has_no_tokens_page(page: Any, server: LiveServer) -> None:
    log_in(page, server, "bob@example.com")
    assert page.get_by_role("link", name="API tokens").count() == 0
    assert page.goto(server.url + "/tokens").status == 403
