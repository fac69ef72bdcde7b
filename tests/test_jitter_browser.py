"""The schedule form's live preview in headless Chromium: typing a jitter says how late each run
may start, and an out-of-bounds value shows the rule before saving."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors, log_in

pytestmark = pytest.mark.browser


def test_the_preview_follows_the_typed_jitter(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.goto(live_panel.url + "/schedules/new")
    page.get_by_label("Cron expression").fill("*/5 * * * *")
    preview = page.locator("#cron-preview")
    page.get_by_label("Jitter (seconds)").fill("90")
    preview.get_by_text(
        "Each run starts up to 90 s after its fire time (spread per fire)"
    ).wait_for()
    page.get_by_label("Jitter (seconds)").fill("200")
    preview.get_by_text("must be 0 to 150 s for this schedule", exact=False).wait_for()
    assert preview.locator(".fires li").count() == 5  # the fire times stay in view
    # The cron field sends the jitter too: a slower cadence allows the same value.
    page.get_by_label("Cron expression").fill("0 * * * *")
    preview.get_by_text(
        "Each run starts up to 200 s after its fire time (spread per fire)"
    ).wait_for()
    assert errors.messages == []
