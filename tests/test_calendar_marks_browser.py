"""The form's live preview marks what the chosen business calendar does to each fire, in headless
Chromium at desktop and phone widths: choosing the calendar marks the skipped fires with the
reason, choosing a policy turns them into moved ones, and the marks wrap inside the screen."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors, log_in

pytestmark = pytest.mark.browser

WIDTHS = {"desktop": 1280, "phone": 390}


@pytest.fixture(params=list(WIDTHS))
def sized_page(request: pytest.FixtureRequest, chromium: Any, errors: PageErrors) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": WIDTHS[request.param], "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)  # a loaded CI machine
    errors.watch(page)
    yield page
    context.close()


def test_the_preview_marks_skipped_and_moved_fires(
    sized_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    from webapp.database import utcnow
    from webapp.extensions import db
    from webapp.services.accounts import find_tenant
    from webapp.services.audit import Actor
    from webapp.services.calendars import create_calendar

    with live_panel.app.app_context():
        calendar = {"key": "us", "name": "US business days", "country": "US"}
        create_calendar(find_tenant("alpha"), calendar, Actor.cli(), utcnow())
        db.session.remove()
    page = sized_page
    log_in(page, live_panel, "alice@example.com")
    page.goto(live_panel.url + "/schedules/new")
    page.get_by_label("Time zone").fill("America/New_York")
    page.get_by_label("Preview from").fill("2027-01-01")
    page.get_by_label("Cron expression").fill("0 9 1 1 *")
    preview = page.locator("#cron-preview")
    first = preview.locator(".fires li").first
    first.get_by_text("2027-01-01 09:00 EST").wait_for()
    assert preview.locator(".calendar-mark").count() == 0
    page.get_by_label("Calendar", exact=True).select_option("us")
    first.get_by_text("skipped: New Year's Day (US holidays)").wait_for()
    page.get_by_label("When the calendar is closed").select_option("next_business_day")
    mark = first.get_by_text("moved to Mon 4 Jan 09:00: New Year's Day (US holidays)")
    mark.wait_for()
    assert preview.locator(".fires li").count() == 5
    # Inside the screen at either width: the mark wraps rather than push the page sideways.
    width = page.evaluate("document.documentElement.clientWidth")
    box = mark.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert errors.messages == []
