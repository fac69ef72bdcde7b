"""The schedule builder in headless Chromium, at desktop and phone width, with JavaScript and
without: Repeat and its fields chosen with the keyboard write the cron expression and preview
it (live, or by "Update cron"), and saving stores that cron."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors, open_new_schedule
from tests.panel_pages import WIDTHS
from tests.test_panel_phrases_browser import stored_cron

pytestmark = pytest.mark.browser


@pytest.fixture(params=list(WIDTHS))
def width(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def choose(page: Any, label: str, option: str, js: bool) -> None:
    """Picks `option` of the select labelled `label` with the arrow keys, as a keyboard user
    does; without JavaScript, then "Update cron" (reached by Tab and pressed with Enter) shows
    the fields of the choice."""
    select = page.get_by_label(label, exact=True)
    select.focus()
    options = select.locator("option").all_inner_texts()
    for _ in range(len(options)):
        current = select.evaluate("s => s.options[s.selectedIndex].text")
        if current == option:
            break
        forward = options.index(option) > options.index(current)
        page.keyboard.press("ArrowDown" if forward else "ArrowUp")
    assert select.evaluate("s => s.options[s.selectedIndex].text") == option
    if not js:
        update_cron(page)


def update_cron(page: Any) -> None:
    page.get_by_role("button", name="Update cron").focus()
    page.keyboard.press("Enter")
    page.wait_for_load_state()


def test_a_schedule_built_with_the_keyboard_previews_and_saves_its_cron(
    page: Any, live_panel: LiveServer, errors: PageErrors, js: bool, width: str
) -> None:
    page.set_viewport_size(WIDTHS[width])
    open_new_schedule(page, live_panel, "Month end")
    preview = page.locator("#cron-preview")
    choose(page, "Repeat", "Every month", js)
    choose(page, "On", "The last …", js)
    choose(page, "Day of the week", "Friday", js)
    page.get_by_label("At (times of day)").fill("17:30")
    if not js:
        update_cron(page)
    page.locator("#cron[value='30 17 * * 5#L']").wait_for()
    preview.get_by_text("At 17:30, on the last Friday of the month").wait_for()
    assert preview.locator(".fires li").count() == 5
    assert stored_cron(live_panel, "Month end") is None  # nothing saved yet
    # On a phone nothing of the builder is wider than the screen.
    builder_right = page.locator("#schedule-builder").evaluate(
        "b => Math.max(...[...b.querySelectorAll('input, select, button')].map("
        "e => e.getBoundingClientRect().right))"
    )
    assert builder_right <= WIDTHS[width]["width"]
    # A mistake is told: in the preview live, beside the field on a round trip.
    page.get_by_label("At (times of day)").fill("17:30, 25:00")
    if not js:
        update_cron(page)
    page.get_by_text("“25:00” is not a time of day").first.wait_for()
    page.get_by_label("At (times of day)").fill("17:30")
    if not js:
        update_cron(page)
    preview.get_by_text("At 17:30, on the last Friday of the month").wait_for()
    page.get_by_role("button", name="Save").click()
    page.get_by_text("Schedule “Month end” created.").wait_for()
    assert stored_cron(live_panel, "Month end") == "30 17 * * 5#L"
    # Its edit form opens in the same shape.
    page.get_by_role("link", name="Edit").first.click()
    page.get_by_label("Day of the week").wait_for()
    assert page.get_by_label("Repeat", exact=True).input_value() == "monthly"
    assert page.get_by_label("Day of the week").input_value() == "5"
    assert errors.messages == []


def test_days_of_the_week_are_checked_with_the_keyboard(
    page: Any, live_panel: LiveServer, errors: PageErrors, js: bool
) -> None:
    open_new_schedule(page, live_panel, "Twice a week")
    choose(page, "Repeat", "On chosen days of the week", js)
    page.get_by_label("Monday").wait_for()
    page.get_by_label("Thursday").focus()
    page.keyboard.press("Space")
    page.get_by_label("At (times of day)").fill("8:00")
    if not js:
        update_cron(page)
    page.locator("#cron[value='0 8 * * 1,4']").wait_for()
    page.locator("#cron-preview").get_by_text("At 08:00, only on Monday and Thursday").wait_for()
    page.get_by_role("button", name="Save").click()
    page.get_by_text("Schedule “Twice a week” created.").wait_for()
    assert stored_cron(live_panel, "Twice a week") == "0 8 * * 1,4"
    assert errors.messages == []


def test_the_builder_opens_the_shape_of_a_typed_cron_or_phrase(
    page: Any, live_panel: LiveServer, errors: PageErrors, js: bool
) -> None:
    open_new_schedule(page, live_panel, "Typed")
    repeat = page.get_by_label("Repeat", exact=True)
    page.get_by_label("Cron expression").fill("0 8 * * 1,4")
    if not js:
        page.get_by_role("button", name="Show cron").click()
    page.get_by_label("Thursday").wait_for()
    assert repeat.input_value() == "weekly"
    assert page.get_by_label("Thursday").is_checked()
    assert not page.get_by_label("Friday").is_checked()
    page.get_by_label("Describe it").fill("the last day of the month at 23:00")
    if not js:
        page.get_by_role("button", name="Show cron").click()
    page.locator("#cron[value='0 23 L * *']").wait_for()
    page.get_by_label("On", exact=True).wait_for()
    assert repeat.input_value() == "monthly"
    assert page.get_by_label("On", exact=True).input_value() == "L"
    page.get_by_role("button", name="Save").click()
    page.get_by_text("Schedule “Typed” created.").wait_for()
    assert stored_cron(live_panel, "Typed") == "0 23 L * *"
    assert errors.messages == []
