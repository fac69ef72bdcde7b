"""The API tokens page in headless Chromium, with JavaScript (htmx, hx-confirm) and without:
an admin creates a token, sees its secret once, uses it, revokes it; the API docs page too."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors, api_status, log_in

pytestmark = pytest.mark.browser

# `page` (tests/conftest.py): with JavaScript and without, dialogs (hx-confirm of Revoke) accepted.


def test_an_admin_creates_uses_and_revokes_a_token(
    page: Any, live_panel: LiveServer, errors: PageErrors, js: bool
) -> None:
    log_in(page, live_panel, "alice@example.com")
    page.get_by_role("link", name="API tokens").click()
    page.get_by_label("Name").fill("Deploy pipeline")
    page.get_by_label("Scope").select_option("write")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#token-secret").inner_text()
    assert re.fullmatch(r"sch_[0-9a-f]{8}_\S+", secret)
    assert api_status(live_panel, "/api/v1/schedules", secret) == 200
    page.goto(live_panel.url + "/tokens")
    assert page.locator("#token-secret").count() == 0  # shown once
    row = page.locator("tr", has_text="Deploy pipeline")
    assert "active" in row.inner_text()
    row.get_by_role("button", name="Revoke").click()
    page.wait_for_url(live_panel.url + "/tokens")
    page.locator("tr", has_text="revoked").wait_for()
    assert api_status(live_panel, "/api/v1/schedules", secret) == 401
    page.goto(live_panel.url + "/api/docs")
    # Swagger UI's operation with JavaScript (tests/test_api_docs_browser.py), the server's without.
    page.locator(
        "#operations-schedules-create_schedule" if js else "#op-create_schedule"
    ).wait_for()
    assert errors.messages == []


def test_a_viewer_has_no_tokens_page(page: Any, live_panel: LiveServer) -> None:
    log_in(page, live_panel, "bob@example.com")
    assert page.get_by_role("link", name="API tokens").count() == 0
    assert page.goto(live_panel.url + "/tokens").status == 403
