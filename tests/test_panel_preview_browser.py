"""The panel in headless Chromium, for the cron preview and the times: the zone's next clock
changes and "Preview from" in the form; UTC revealed by keyboard focus or a tap."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Route

from tests.browser_support import LiveServer, PageErrors, log_in
from tests.conftest import make_schedule
from webapp.extensions import db
from webapp.services.accounts import find_tenant
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleInput, create_schedule

pytestmark = pytest.mark.browser


def test_the_preview_shows_clock_changes_and_a_chosen_day_changes_the_fire_times(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.goto(live_panel.url + "/schedules/new")
    page.get_by_label("Time zone").fill("America/New_York")
    page.get_by_label("Cron expression").fill("30 2 * * *")
    preview = page.locator("#cron-preview")
    preview.get_by_text("02:30 does not exist; runs at 03:00 EDT").wait_for()
    preview.get_by_text("clocks go forward 1 hour at 02:00 (EST to EDT)").wait_for()
    first = preview.locator(".fires li").first
    assert "2027-03-14" not in first.inner_text()
    page.get_by_label("Preview from").fill("2027-03-14")
    preview.locator(".fires li").first.get_by_text("2027-03-14 03:00 EDT").wait_for()
    assert preview.locator(".fires li").count() == 5
    # The chosen day stays when the expression changes.
    page.get_by_label("Cron expression").fill("30 1 * * *")
    preview.locator(".fires li").first.get_by_text("2027-03-14 01:30 EST").wait_for()
    preview.get_by_text("01:30 happens twice; runs once, at 01:30 EDT").wait_for()
    assert errors.messages == []


def test_the_keyboard_reaches_the_utc_times(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    with live_panel.app.app_context():
        create_schedule(
            find_tenant("alpha"),
            ScheduleInput(
                name="Timed",
                job="demo.echo",
                args={"message": "m"},
                cron="@daily",
                time_zone="Europe/Berlin",
            ),
            Actor.cli(),
            datetime.now(UTC),
        )
        db.session.remove()
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.goto(live_panel.url + "/audit")
    when = page.locator("#audit-log time").first
    assert when.inner_text().split(" ")[2] in ("CET", "CEST")
    # From the address, the account menu's summary, last in the header (no mouse, no hover):
    # Enter opens the menu, Tab goes on to the UTC button, Enter presses it.
    page.get_by_title("alice@example.com").focus()
    page.keyboard.press("Enter")
    for _ in range(4):
        if page.evaluate("document.activeElement.textContent.trim()") == "UTC":
            break
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == "UTC"
    page.keyboard.press("Enter")
    page.get_by_text("who did what, in UTC").wait_for()
    utc = page.get_by_role("button", name="UTC", include_hidden=True)  # in the closed menu
    assert utc.get_attribute("aria-pressed") == "true"
    assert when.inner_text().split(" ")[2] == "UTC"
    page.goto(live_panel.url + "/upcoming")
    page.get_by_role("columnheader", name="When (UTC)").first.wait_for()
    assert errors.messages == []


def test_the_preview_refuses_what_the_tenants_minimum_interval_would_refuse_on_save(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    with live_panel.app.app_context():
        find_tenant("alpha").min_interval_seconds = 300
        db.session.commit()
        db.session.remove()
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.goto(live_panel.url + "/schedules/new")
    preview = page.locator("#cron-preview")
    page.get_by_label("Cron expression").fill("*/2 * * * *")
    refusal = preview.locator(".preview-error[data-field=cron]")
    refusal.wait_for()
    assert refusal.inner_text() == (
        "Saving is refused: fires as often as every 120 s; this tenant allows at most one fire "
        "every 300 s."
    )
    page.get_by_label("Cron expression").fill("*/5 * * * *")
    preview.get_by_text("Every 5 minutes").wait_for()
    assert refusal.count() == 0
    assert errors.messages == []


def test_the_form_warns_of_a_shared_name_and_a_legacy_zone_and_the_list_shows_the_keys(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    make_schedule(find_tenant("alpha"), "After delete", by=Actor.cli(), cron="*/10 * * * *")
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.goto(live_panel.url + "/schedules/new")
    page.get_by_label("Message").fill("hello")
    page.get_by_label("Name").fill("After delete")
    warning = page.locator("#name-warning")
    warning.get_by_text("another schedule is named “After delete” (key after-delete)").wait_for()
    assert "this one gets the key after-delete-2" in warning.inner_text()
    page.get_by_label("Time zone").fill("EST")
    page.get_by_label("Cron expression").fill("0 9 * * *")
    zone = page.locator("#cron-preview .preview-warning[data-field=time_zone]")
    zone.wait_for()
    assert "EST is a legacy fixed offset, UTC-05:00 all year" in zone.inner_text()
    page.get_by_label("Name").fill("After delete, again")
    warning.get_by_text("another schedule").wait_for(state="detached")
    page.get_by_label("Name").fill("After delete")
    warning.get_by_text("another schedule").wait_for()
    page.get_by_role("button", name="Save").click()
    flash = page.locator(".flash").first
    flash.get_by_text("Schedule “After delete” created. Its key is after-delete-2").wait_for()
    assert "another schedule is named “After delete” (key after-delete)" in flash.inner_text()
    assert "Note: EST is a legacy fixed offset" in flash.inner_text()
    page.goto(live_panel.url + "/")
    keys = page.locator("#schedule-list code:not(.cron)")
    assert keys.all_inner_texts() == ["after-delete", "after-delete-2"]
    assert errors.messages == []


def test_a_preview_asked_for_later_is_the_one_shown_when_the_answers_come_in_order(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    """Two preview requests in flight at once (the jitter typed, then the cron while the first
    is still on its way), answered in the order they were sent: the later one is what the
    preview shows. Before, each answer replaced the preview it had been asked from: the second
    landed in the preview the first had already replaced, and 09:00 stayed on screen."""
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.goto(live_panel.url + "/schedules/new")
    first_fire = page.locator("#cron-preview .fires li").first
    page.get_by_label("Cron expression").fill("0 9 * * *")
    first_fire.get_by_text("09:00").wait_for()
    held: list[Route] = []

    def hold(route: Route) -> None:  # answered below, in the order they were sent
        held.append(route)

    page.route("**/schedules/form/preview*", hold)

    def wait_for_requests(count: int) -> None:
        for _ in range(100):
            if len(held) >= count:
                return
            page.wait_for_timeout(100)
        raise AssertionError(f"{len(held)} preview requests, not {count}")

    page.get_by_label("Jitter").fill("60")
    wait_for_requests(1)
    page.get_by_label("Cron expression").fill("0 18 * * *")
    wait_for_requests(2)
    assert "cron=0+18" in held[-1].request.url
    for route in held:
        try:
            route.continue_()
        except PlaywrightError:  # the browser gave it up when the later request replaced it
            pass
    first_fire.get_by_text("18:00").wait_for()
    page.wait_for_timeout(1000)  # room for any other answer to land
    assert "18:00" in first_fire.inner_text()
