"""The schedule form's Calendar and "When the calendar is closed" selects in headless Chromium
(with and without JavaScript): chosen, saved, shown on the schedule's page and again in its
edit form."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors, open_new_schedule

pytestmark = pytest.mark.browser


def test_the_calendar_selects_save_and_show(
    page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    from webapp.api.openapi import EXAMPLE_CALENDAR
    from webapp.database import utcnow
    from webapp.extensions import db
    from webapp.services.accounts import find_tenant
    from webapp.services.audit import Actor
    from webapp.services.calendars import create_calendar

    with live_panel.app.app_context():
        create_calendar(find_tenant("alpha"), EXAMPLE_CALENDAR, Actor.cli(), utcnow())
        db.session.remove()
    open_new_schedule(page, live_panel, "Month end")
    page.get_by_label("Calendar", exact=True).select_option("us-business")
    page.get_by_label("When the calendar is closed").select_option("previous_business_day")
    page.get_by_role("button", name="Save").click()
    page.get_by_text("Schedule “Month end” created.").wait_for()
    shown = page.locator("dd[id$='-calendar']")
    assert shown.inner_text() == "us-business: run on the previous business day when it is closed"
    page.get_by_role("link", name="Edit").first.click()
    assert page.get_by_label("Calendar", exact=True).input_value() == "us-business"
    assert page.get_by_label("When the calendar is closed").input_value() == (
        "previous_business_day"
    )
    page.get_by_label("Calendar", exact=True).select_option("")
    page.get_by_role("button", name="Save").click()
    page.locator("dd[id$='-calendar']").get_by_text("none").wait_for()
    assert errors.messages == []
