"""The panel in headless Chromium: log in, create a schedule through the generated form with its
live preview and live errors, run it now and watch the badge update itself; a viewer sees no
action controls; no page has a JavaScript error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from tests.browser_support import (
    LiveServer,
    PageErrors,
    log_in,
    worker_process,
)
from tests.conftest import make_run
from webapp.extensions import db
from webapp.models import Run
from webapp.services.accounts import find_tenant
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleInput, create_schedule

pytestmark = pytest.mark.browser


def create_echo_schedule(page: Any, live_panel: LiveServer, name: str) -> int:
    """Fills the generated form, checking the live preview and a live error on the way."""
    page.get_by_role("link", name="New schedule").click()
    page.get_by_label("Name").fill(name)
    page.get_by_label("Job").select_option("demo.sleep")
    page.locator("#arg-seconds").wait_for()  # the job's fields were swapped in
    page.get_by_label("Job").select_option("demo.echo")
    page.get_by_label("Message").fill("hello from the browser")
    cron = page.get_by_label("Cron expression")
    cron.fill("0 0 30 2 *")
    page.locator("#cron-preview .preview-error").get_by_text("would never fire").wait_for()
    cron.fill("*/7 * * * *")
    page.locator("#cron-preview").get_by_text("Every 7 minutes").wait_for()
    assert page.locator("#cron-preview li").count() == 5
    page.get_by_role("button", name="Save").click()
    page.wait_for_url(live_panel.url + "/schedules/*")
    page.get_by_text(f"Schedule “{name}” created.").wait_for()
    return int(page.url.rsplit("/", 1)[1])


def test_an_admin_creates_a_schedule_and_sees_a_live_error_first(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.get_by_role("link", name="New schedule").click()
    page.get_by_label("Name").fill("Broken")
    page.get_by_label("Message").fill("")
    page.get_by_role("button", name="Save").click()
    page.locator("#args-message-error").get_by_text("Field required").wait_for()
    assert page.get_by_label("Name").input_value() == "Broken"  # values kept
    page.goto(live_panel.url + "/")
    schedule_id = create_echo_schedule(page, live_panel, "Browser echo")
    page.goto(live_panel.url + "/")
    row = page.locator(f"#schedule-{schedule_id}")
    row.get_by_text("Every 7 minutes").wait_for()
    row.get_by_role("button", name="Pause").click()
    row.get_by_role("link", name="Resume").wait_for()
    row.get_by_role("link", name="Resume").click()
    page.get_by_role("button", name="Resume, skip missed").click()
    row.get_by_role("button", name="Pause").wait_for()
    assert errors.messages == []


def test_run_now_badge_updates_itself_without_a_reload(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    """The badge polls while the run is queued or running; here the test plays the worker."""
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    schedule_id = create_echo_schedule(page, live_panel, "Polled echo")
    page.goto(live_panel.url + "/")
    page.evaluate("window.notReloaded = true")
    row = page.locator(f"#schedule-{schedule_id}")
    row.get_by_role("button", name="Run now").click()
    row.get_by_text("queued").wait_for()
    with live_panel.app.app_context():
        run = db.session.scalar(select(Run).where(Run.schedule_id == schedule_id))
        assert run is not None
        run.status, run.started_at = "succeeded", datetime.now(UTC)
        run.finished_at = run.started_at + timedelta(seconds=1.5)
        run.attempt = 1
        db.session.commit()
        db.session.remove()
    row.get_by_text("succeeded").wait_for()
    row.get_by_text("1.5 s").wait_for()
    assert page.evaluate("window.notReloaded") is True
    badge = row.locator(".run-status")
    assert badge.get_attribute("hx-trigger") is None  # polling stopped
    assert errors.messages == []


def test_run_now_succeeds_with_a_real_worker_process(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    with worker_process(live_panel):
        page = new_page
        log_in(page, live_panel, "alice@example.com")
        schedule_id = create_echo_schedule(page, live_panel, "Worker echo")
        page.goto(live_panel.url + "/")
        page.evaluate("window.notReloaded = true")
        row = page.locator(f"#schedule-{schedule_id}")
        row.get_by_role("button", name="Run now").click()
        row.locator(".badge-succeeded").wait_for(timeout=30_000)
        assert page.evaluate("window.notReloaded") is True
        row.locator(".badge-succeeded").click()
        page.locator("pre.log").get_by_text("hello from the browser").wait_for()
        assert errors.messages == []


def test_a_viewer_sees_no_action_buttons(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    with live_panel.app.app_context():
        schedule = create_schedule(
            find_tenant("alpha"),
            ScheduleInput(
                name="Viewed",
                job="demo.echo",
                args={"message": "m"},
                cron="@daily",
                time_zone="UTC",
            ),
            Actor.cli(),
            datetime.now(UTC),
        )
        make_run(schedule, "failed", 5, error="boom <b>")
        db.session.commit()
        schedule_id = schedule.id
        db.session.remove()
    page = new_page
    log_in(page, live_panel, "bob@example.com")
    for path in ("/", f"/schedules/{schedule_id}", "/runs", "/upcoming", "/audit"):
        page.goto(live_panel.url + path)
        assert page.get_by_role("button", name="Run now").count() == 0, path
        assert page.get_by_role("button", name="Delete").count() == 0, path
        assert page.get_by_role("button", name="Pause").count() == 0, path
        assert page.get_by_role("link", name="Edit").count() == 0, path
        assert page.get_by_role("link", name="New schedule").count() == 0, path
    page.goto(live_panel.url + "/runs")
    page.get_by_role("link", name="failed").first.click()
    page.get_by_text("boom <b>").wait_for()  # escaped, shown as text
    assert errors.messages == []


def test_no_page_has_a_javascript_error(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    page = new_page
    page.goto(live_panel.url + "/login")
    log_in(page, live_panel, "alice@example.com")
    schedule_id = create_echo_schedule(page, live_panel, "Visited")
    for path in (
        "/",
        "/schedules/new",
        f"/schedules/{schedule_id}",
        f"/schedules/{schedule_id}/edit",
        "/upcoming",
        "/runs",
        "/audit",
    ):
        page.goto(live_panel.url + path)
        page.wait_for_load_state("networkidle")
    page.goto(live_panel.url + "/")
    page.get_by_label("Search by name").fill("nothing-matches")
    page.get_by_text("No schedule matches").wait_for()
    assert errors.messages == []
