"""Plain English in the schedule form, in headless Chromium: a phrase typed in "Describe it"
(or in the cron field itself) shows its cron and words in the preview before anything is
saved, live with JavaScript and by "Show cron" without; saving stores the cron."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors, open_new_schedule
from webapp.extensions import db
from webapp.models import Schedule

pytestmark = pytest.mark.browser


def stored_cron(live_panel: LiveServer, name: str) -> str | None:
    with live_panel.app.app_context():
        schedule = db.session.query(Schedule).filter_by(name=name).one_or_none()
        cron = schedule.cron if schedule else None
        db.session.remove()
    return cron


def test_a_described_schedule_previews_its_cron_and_words_and_saves_the_cron(
    page: Any, live_panel: LiveServer, errors: PageErrors, js: bool
) -> None:
    open_new_schedule(page, live_panel, "Standup")
    preview = page.locator("#cron-preview")
    described = page.get_by_label("Describe it")
    described.fill("every blue moon")
    if not js:
        page.get_by_role("button", name="Show cron").click()
    page.get_by_text("did not understand “blue” in “every blue moon”").first.wait_for()
    described.fill("every weekday at 9:30")
    if not js:  # a round trip: the form comes back with the cron filled in
        page.get_by_role("button", name="Show cron").click()
    preview.get_by_text("Cron expression: 30 9 * * 1-5").wait_for()
    preview.get_by_text("At 09:30, Monday through Friday").wait_for()
    assert preview.locator(".fires li").count() == 5
    # The cron field now holds it (filled live, or by the round trip).
    page.locator("#cron[value='30 9 * * 1-5']").wait_for()
    assert stored_cron(live_panel, "Standup") is None  # nothing saved yet
    if js:  # emptied, the box leaves the preview to the cron field it filled
        described.fill("")
        preview.get_by_text("Cron expression:").wait_for(state="detached")
        preview.get_by_text("At 09:30, Monday through Friday").wait_for()
    page.get_by_role("button", name="Save").click()
    page.get_by_text("Schedule “Standup” created.").wait_for()
    assert stored_cron(live_panel, "Standup") == "30 9 * * 1-5"
    page.get_by_text("At 09:30, Monday through Friday").first.wait_for()
    assert errors.messages == []


def test_a_phrase_in_the_cron_field_previews_and_saves_as_cron(
    page: Any, live_panel: LiveServer, errors: PageErrors, js: bool
) -> None:
    open_new_schedule(page, live_panel, "Month end")
    page.get_by_label("Cron expression").fill("the last Friday of the month at 17:30")
    preview = page.locator("#cron-preview")
    if js:
        preview.get_by_text("Cron expression: 30 17 * * 5#L").wait_for()
        preview.get_by_text("At 17:30, on the last Friday of the month").wait_for()
    # Show cron puts the cron in the field, saving nothing (htmx posts the button's name too).
    page.get_by_role("button", name="Show cron").click()
    page.locator("#cron[value='30 17 * * 5#L']").wait_for()
    preview.get_by_text("At 17:30, on the last Friday of the month").wait_for()
    assert stored_cron(live_panel, "Month end") is None
    page.get_by_role("button", name="Save").click()
    page.get_by_text("Schedule “Month end” created.").wait_for()
    assert stored_cron(live_panel, "Month end") == "30 17 * * 5#L"
    assert errors.messages == []
