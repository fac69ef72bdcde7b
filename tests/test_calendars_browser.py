"""The Calendars page in headless Chromium at phone (390 px) and desktop (1280 px) width: an
admin creates a calendar, adds closed days and a window, imports an .ics file, reads the year
and deletes the calendar with the keyboard alone; a viewer reads it without a form."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors, log_in
from tests.panel_pages import WIDTHS
from tests.test_calendars import ICS

pytestmark = pytest.mark.browser


@pytest.fixture(params=list(WIDTHS))
def page(request: pytest.FixtureRequest, chromium: Any, errors: PageErrors) -> Iterator[Any]:
    context = chromium.new_context(viewport=WIDTHS[request.param])
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors.watch(page)
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm of Delete
    yield page
    context.close()


def fits(page: Any) -> None:
    width = page.evaluate("document.documentElement.clientWidth")
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def type_into(page: Any, label: str, text: str) -> None:
    """Tab to the field named `label` (it must be reachable by keyboard), then type."""
    field = page.get_by_label(label, exact=True)
    for _ in range(80):
        page.keyboard.press("Tab")
        if field.evaluate("element => element === document.activeElement"):
            break
    else:
        pytest.fail(f"{label} is not reachable with Tab")
    page.keyboard.type(text)


def test_an_admin_manages_a_calendar_with_the_keyboard(
    page: Any, live_panel: LiveServer, errors: PageErrors, tmp_path: Path
) -> None:
    log_in(page, live_panel, "alice@example.com")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Calendars").click()
    page.get_by_role("heading", name="No calendars yet").wait_for()
    fits(page)
    type_into(page, "Key", "us-business")
    type_into(page, "Name", "US business days")
    type_into(page, "Country of the public holidays", "XX")
    page.keyboard.press("Enter")
    page.locator("#country-error").get_by_text("is not a country the holidays package").wait_for()
    assert page.get_by_label("Country of the public holidays").get_attribute("aria-invalid")
    page.get_by_label("Country of the public holidays").fill("US")
    page.get_by_label("Subdivision").fill("CA")
    page.get_by_role("button", name="Create calendar").click()
    page.get_by_role("heading", name="US business days").wait_for()
    page.get_by_text("Calendar us-business created.").wait_for()

    page.get_by_label("Date, or first day").fill("2027-12-24")
    page.get_by_label("Last day (for a range)").fill("2027-12-31")
    page.get_by_label("Label", exact=True).first.fill("Winter break")
    page.get_by_role("button", name="Add closed days").click()
    page.get_by_text("Closed days added.").wait_for()
    page.get_by_label("Starts").fill("2027-01-12T01:00")
    page.get_by_label("Ends").fill("2027-01-12T00:30")
    page.get_by_role("button", name="Add window").click()
    page.locator("#window_to-error").get_by_text("the window ends").wait_for()
    page.get_by_label("Ends").fill("2027-01-12T05:00")
    page.get_by_role("button", name="Add window").click()
    page.get_by_text("Maintenance window added.").wait_for()
    ics = tmp_path / "acme.ics"
    ics.write_bytes(ICS)
    page.get_by_label("iCalendar file").set_input_files(str(ics))
    page.get_by_role("button", name="Import events").click()
    page.get_by_text("3 added from acme.ics.").wait_for()
    fits(page)

    page.goto(page.url.split("?")[0] + "?year=2027")
    year = page.locator("#calendar-year")
    year.get_by_role(
        "cell", name="Christmas Day (US-CA holidays); Winter break; Saturday"
    ).wait_for()
    year.get_by_text("Maintenance window, 2027-01-12 01:00 to 05:00").wait_for()
    year.get_by_role("link", name="2028 →").click()  # htmx swaps the year alone
    page.get_by_role("heading", name="Closed in 2028").wait_for()
    assert page.url.endswith("?year=2028")
    fits(page)

    row = page.locator("#calendar-entries tr", has_text="Founders day")
    row.get_by_role("button", name="Remove").focus()
    page.keyboard.press("Enter")
    page.get_by_text("Removed.").wait_for()
    assert page.locator("#calendar-entries tr", has_text="Founders day").count() == 0

    page.get_by_role("button", name="Delete calendar").click()
    page.wait_for_url(live_panel.url + "/calendars")
    page.get_by_text("Calendar us-business deleted.").wait_for()
    assert errors.messages == []


def test_a_viewer_reads_a_calendar_without_forms(page: Any, live_panel: LiveServer) -> None:
    from webapp.api.openapi import EXAMPLE_CALENDAR
    from webapp.database import utcnow
    from webapp.extensions import db
    from webapp.services.accounts import find_tenant
    from webapp.services.audit import Actor
    from webapp.services.calendars import create_calendar

    with live_panel.app.app_context():
        calendar = create_calendar(find_tenant("alpha"), EXAMPLE_CALENDAR, Actor.cli(), utcnow())
        calendar_id = calendar.id
        db.session.remove()
    log_in(page, live_panel, "bob@example.com")
    page.get_by_role("link", name="Calendars").click()
    page.get_by_role("link", name="us-business").click()
    page.get_by_role("heading", name="US business days").wait_for()
    assert page.url == f"{live_panel.url}/calendars/{calendar_id}"
    assert page.get_by_role("button").filter(has_text="Delete calendar").count() == 0
    assert page.get_by_label("Key").count() == 0
    page.locator("#calendar-entries").get_by_text("Winter break").wait_for()
    fits(page)
