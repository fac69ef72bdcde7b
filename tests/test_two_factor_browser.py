"""Two-factor login in a real browser, with and without JavaScript: the account menu's link, the
QR code drawn by the server (an SVG image the page's CSP allows), a code computed from the
secret shown, the recovery codes, then a login with its second step."""

from __future__ import annotations

import time
from typing import Any

import pyotp
import pytest

from tests.browser_support import LiveServer, PageErrors, log_in, log_out, open_account_menu
from tests.conftest import PASSWORD

pytestmark = pytest.mark.browser


def test_enrol_then_log_in_with_a_code(
    page: Any, live_panel: LiveServer, errors: PageErrors, js: bool
) -> None:
    log_in(page, live_panel, "alice@example.com")
    if js:
        open_account_menu(page)
        page.get_by_role("link", name="Two-factor login").click()
    else:
        page.goto(live_panel.url + "/account/two-factor")
    page.get_by_role("button", name="Set up two-factor login").click()
    qr = page.get_by_role("img", name="QR code of your two-factor secret")
    qr.wait_for()
    assert qr.get_attribute("src").startswith("data:image/svg+xml")
    box = qr.bounding_box()
    assert box is not None and box["width"] > 100 and box["height"] > 100
    if js:  # the image was drawn, not refused by the CSP
        assert qr.evaluate("image => image.complete && image.naturalWidth > 0")
    secret = page.locator("#totp-secret").inner_text().strip()
    page.get_by_label("Code from the app").fill(pyotp.TOTP(secret).now())
    page.get_by_role("button", name="Turn on two-factor login").click()
    page.get_by_role("heading", name="Your recovery codes").wait_for()
    assert page.locator(".recovery-codes li").count() == 10
    page.get_by_role("link", name="I have saved them").click()
    page.locator("#two-factor-status").get_by_text("on", exact=True).wait_for()
    log_out(page)
    page.wait_for_url(live_panel.url + "/login")

    page.get_by_label("Email").fill("alice@example.com")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(live_panel.url + "/login/two-factor")
    assert errors.messages == []
    page.get_by_label("Code").fill("000000")
    page.get_by_role("button", name="Verify").click()
    page.get_by_text("Wrong or already used code.").wait_for()
    wrong_code = "the server responded with a status of 401"  # the answer to the wrong code
    assert [message for message in errors.messages if wrong_code not in message] == []
    errors.messages.clear()
    # The next step's code: this step's was used to turn it on, and no code works twice.
    code = pyotp.TOTP(secret).at(int(time.time()), counter_offset=1)
    page.get_by_label("Code").fill(code)
    page.get_by_role("button", name="Verify").click()
    page.wait_for_url(live_panel.url + "/")
    page.get_by_role("heading", name="Schedules in Alpha Corp").wait_for()
    assert errors.messages == []
