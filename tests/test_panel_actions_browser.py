"""Every schedule action from every place it appears (a row of the list, the schedule's page, the
resume page), in headless Chromium with JavaScript (htmx, no console error or unmatched target)
and without it (plain form posts and redirects); the new run of "Run now" on a schedule's page
heads its history and updates itself; "Load older runs" rows line up with the table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import select

from tests.browser_support import LiveServer, PageErrors, log_in, worker_process
from tests.conftest import make_run, make_schedule
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Run, Schedule
from webapp.services.accounts import find_tenant
from webapp.services.audit import Actor
from webapp.services.schedules import run_now

pytestmark = pytest.mark.browser


def miss_fire_times(live_panel: LiveServer, schedule_id: int) -> None:
    """As if the schedule had been paused for an hour: six fire times passed."""
    with live_panel.app.app_context():
        schedule = db.session.get(Schedule, schedule_id)
        assert schedule is not None and not schedule.active
        schedule.next_run_at = datetime.now(UTC) - timedelta(hours=1)
        db.session.commit()
        db.session.remove()


def flash(page: Any, text: str) -> None:
    page.locator("#flashes").get_by_text(text).wait_for()


def resume_return(url: str) -> str | None:
    """Where a resume page returns to (its `next`), or None for another page."""
    parts = urlsplit(url)
    if not parts.path.endswith("/resume"):
        return None
    return parse_qs(parts.query).get("next", [""])[0]


def still_here(page: Any, js: bool) -> None:
    """With JavaScript the actions swap parts of the page: it was never reloaded."""
    if js:
        assert page.evaluate("window.notReloaded") is True


def test_every_action_works_from_a_row_of_the_list(
    page: Any, live_panel: LiveServer, errors: PageErrors, js: bool
) -> None:
    schedule_id = make_schedule(
        find_tenant("alpha"), "Listed", by=Actor.cli(), cron="*/10 * * * *"
    ).id
    log_in(page, live_panel, "alice@example.com")
    if js:
        page.evaluate("window.notReloaded = true")
    row = page.locator(f"#schedule-{schedule_id}")

    row.get_by_role("button", name="Run now").click()
    flash(page, "of “Listed” queued.")
    row.locator(".badge-queued").wait_for()
    assert page.url == live_panel.url + "/"

    row.get_by_role("button", name="Pause").click()
    flash(page, "Schedule “Listed” paused.")
    row.get_by_text("paused", exact=True).first.wait_for()
    assert page.url == live_panel.url + "/"
    still_here(page, js)

    for button, how in (
        ("Resume and catch up", "missed fire times will run"),
        ("Resume, skip missed", "missed fire times skipped"),
    ):
        miss_fire_times(live_panel, schedule_id)
        if not js:  # the question has a page of its own, which comes back here
            page.reload()
        row.get_by_role("link", name="Resume").click()
        if not js:
            page.wait_for_url(lambda url: resume_return(url) == "/")
        page.get_by_role("button", name=button).click()
        flash(page, f"Schedule “Listed” resumed ({how}).")
        row.get_by_role("button", name="Pause").wait_for()
        assert page.url == live_panel.url + "/"
        still_here(page, js)
        if button == "Resume and catch up":
            row.get_by_role("button", name="Pause").click()
            row.get_by_role("link", name="Resume").wait_for()

    row.get_by_role("button", name="Delete").click()
    flash(page, "Schedule “Listed” deleted.")
    row.wait_for(state="detached")
    assert page.url == live_panel.url + "/"
    still_here(page, js)
    assert errors.messages == []


def test_edit_from_the_list_and_from_the_schedule_page_saves_to_its_page(
    page: Any, live_panel: LiveServer, errors: PageErrors, js: bool
) -> None:
    schedule_id = make_schedule(
        find_tenant("alpha"), "Edited", by=Actor.cli(), cron="*/10 * * * *"
    ).id
    log_in(page, live_panel, "alice@example.com")
    for start, name in (("/", "Edited in the list"), (f"/schedules/{schedule_id}", "Edited here")):
        page.goto(live_panel.url + start)
        where = page.locator(f"#schedule-{schedule_id}") if start == "/" else page
        where.get_by_role("link", name="Edit", exact=True).click()
        page.wait_for_url(f"{live_panel.url}/schedules/{schedule_id}/edit")
        page.get_by_label("Name").fill(name)
        page.get_by_role("button", name="Save").click()
        flash(page, f"Schedule “{name}” saved.")
        page.get_by_role("heading", name=name).wait_for()
        assert page.url == f"{live_panel.url}/schedules/{schedule_id}"
    assert errors.messages == []


def test_every_action_works_from_the_schedule_page(
    page: Any, live_panel: LiveServer, errors: PageErrors, js: bool
) -> None:
    schedule_id = make_schedule(
        find_tenant("alpha"), "Detailed", by=Actor.cli(), cron="*/10 * * * *"
    ).id
    here = f"{live_panel.url}/schedules/{schedule_id}"
    log_in(page, live_panel, "alice@example.com")
    page.goto(here)
    heading = page.get_by_role("heading", name="Detailed")
    page.get_by_text("No runs yet.").wait_for()

    page.get_by_role("button", name="Run now").click()
    flash(page, "of “Detailed” queued.")
    # The new run heads the history and its badge is live (item 6 watches it finish).
    first = page.locator("#run-rows tr").first
    first.locator(".badge-queued").wait_for()
    assert page.get_by_text("No runs yet.").count() == 0
    assert page.url == here
    if js:  # the page's content was swapped; the keyboard focus stays on the button
        assert page.evaluate("document.activeElement.id") == f"schedule-{schedule_id}-run-now"

    page.get_by_role("button", name="Pause").click()
    flash(page, "Schedule “Detailed” paused.")
    heading.locator(".badge-paused").wait_for()
    assert page.url == here

    for button, how in (
        ("Resume and catch up", "missed fire times will run"),
        ("Resume, skip missed", "missed fire times skipped"),
    ):
        miss_fire_times(live_panel, schedule_id)
        page.get_by_role("link", name="Resume").click()
        page.wait_for_url(lambda url: resume_return(url) == f"/schedules/{schedule_id}")
        page.get_by_text("6 fire times passed while it was paused.").wait_for()
        page.get_by_role("button", name=button).click()
        flash(page, f"Schedule “Detailed” resumed ({how}).")  # back where it started
        heading.locator(".badge-active").wait_for()
        assert page.url == here
        if button == "Resume and catch up":
            page.get_by_role("button", name="Pause").click()
            page.get_by_role("link", name="Resume").wait_for()

    page.get_by_role("button", name="Delete").click()
    page.wait_for_url(live_panel.url + "/")  # not the deleted schedule's page
    flash(page, "Schedule “Detailed” deleted.")
    page.get_by_role("heading", name="No schedules yet").wait_for()  # it was the only one
    assert errors.messages == []


def test_the_resume_page_opened_directly_returns_to_the_schedule(
    page: Any, live_panel: LiveServer, errors: PageErrors, js: bool
) -> None:
    schedule_id = make_schedule(
        find_tenant("alpha"), "Opened", by=Actor.cli(), cron="*/10 * * * *"
    ).id
    here = f"{live_panel.url}/schedules/{schedule_id}"
    log_in(page, live_panel, "alice@example.com")
    page.goto(here)
    page.get_by_role("button", name="Pause").click()
    page.get_by_role("link", name="Resume").wait_for()
    page.goto(f"{here}/resume")
    page.get_by_role("link", name="Cancel").click()
    page.wait_for_url(here)
    page.goto(f"{here}/resume")
    page.get_by_role("button", name="Resume, skip missed").click()
    flash(page, "Schedule “Opened” resumed (missed fire times skipped).")
    assert page.url == here
    assert errors.messages == []


def row_cells(row: Any) -> dict[str, str]:
    """A history row's cells by their column's label (data-label), as a person reads them."""
    cells: dict[str, str] = row.evaluate(
        "tr => Object.fromEntries([...tr.cells].filter(td => td.dataset.label)"
        ".map(td => [td.dataset.label, td.innerText.trim()]))"
    )
    return cells


def test_run_now_on_the_schedule_page_shows_the_run_in_its_history_until_it_succeeds(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    schedule_id = make_schedule(
        find_tenant("alpha"), "Watched", by=Actor.cli(), cron="*/10 * * * *"
    ).id
    with live_panel.app.app_context():  # a one-off for later, listed apart from the history
        schedule = db.session.get(Schedule, schedule_id)
        assert schedule is not None
        later = (utcnow() + timedelta(hours=3)).replace(second=0, microsecond=0)
        planned = run_now(schedule, Actor.cli(), utcnow(), later).id
        db.session.remove()
    page = new_page
    with worker_process(live_panel):
        log_in(page, live_panel, "alice@example.com")
        page.goto(f"{live_panel.url}/schedules/{schedule_id}")
        page.get_by_text("No runs yet.").wait_for()
        page.evaluate("window.notReloaded = true")
        page.get_by_role("button", name="Run now").click()
        history = page.locator("#run-rows tr").first
        history.wait_for()
        with live_panel.app.app_context():
            # The manual run: the schedule's own fire may land in the same minute (*/10).
            run_id = db.session.scalar(
                select(Run.id).where(
                    Run.schedule_id == schedule_id, Run.trigger == "manual", Run.id != planned
                )
            )
            db.session.remove()
        assert history.get_attribute("id") == f"run-{run_id}"
        # Queued now, not planned for later: never under "Queued one-off runs" (it was, with a
        # Cancel button, until a reload).
        assert page.locator(f"#run-{run_id}-one-off").count() == 0
        assert page.locator(f"#run-{planned}-one-off").count() == 1
        history.locator(".badge-succeeded").wait_for(timeout=30_000)
        # The whole row updates with its badge (it kept Started -, Duration -, Lag -, Attempt 0).
        page.wait_for_function(
            "id => document.getElementById(id).querySelector('[data-label=Attempt]')"
            ".innerText.trim() === '1'",
            arg=f"run-{run_id}",
        )
        cells = row_cells(history)
        assert cells["Started"] != "-" and cells["Duration"] != "-" and cells["Lag"] != "-"
        page.locator(f"#schedule-{schedule_id}-last-run .badge-succeeded").wait_for()
        assert page.evaluate("window.notReloaded") is True
        assert errors.messages == []


def test_older_runs_line_up_with_the_columns_of_the_history(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    schedule_id = make_schedule(
        find_tenant("alpha"), "Paged", by=Actor.cli(), cron="*/10 * * * *"
    ).id
    with live_panel.app.app_context():
        schedule = db.session.get(Schedule, schedule_id)
        assert schedule is not None
        for minute in range(60):
            make_run(schedule, "failed" if minute % 7 == 0 else "succeeded", 10 + minute)
        db.session.commit()
        db.session.remove()
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    for url in ("/runs", f"/runs?schedule={schedule_id}"):
        page.goto(live_panel.url + url)
        page.get_by_role("link", name="Load older runs").click()
        page.locator("#run-rows tr").nth(59).wait_for()
        assert page.locator("#runs-more").count() == 0
        # Every row has the header's cells, and each column starts where its header does.
        slipped = page.evaluate(
            """() => {
              const heads = [...document.querySelectorAll('table.runs thead th')];
              const lefts = heads.map(th => Math.round(th.getBoundingClientRect().left));
              return [...document.querySelectorAll('#run-rows tr')].filter(tr =>
                tr.cells.length !== heads.length ||
                [...tr.cells].some((td, i) =>
                  Math.round(td.getBoundingClientRect().left) !== lefts[i])
              ).map(tr => tr.id);
            }"""
        )
        assert slipped == [], url
    assert errors.messages == []


def test_an_action_on_a_schedule_deleted_meanwhile_says_so_and_leaves_the_page(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    """Another tab deleted it: htmx must not paste the 404 page into the row or the page."""
    listed, detailed = (
        make_schedule(
            find_tenant("alpha"), "Gone in the list", by=Actor.cli(), cron="*/10 * * * *"
        ).id,
        make_schedule(find_tenant("alpha"), "Gone here", by=Actor.cli(), cron="*/10 * * * *").id,
    )
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    other = page.context.new_page()  # another tab of the same session
    other.on("dialog", lambda dialog: dialog.accept())
    for schedule_id, start in ((listed, "/"), (detailed, f"/schedules/{detailed}")):
        page.goto(live_panel.url + start)
        other.goto(f"{live_panel.url}/schedules/{schedule_id}")
        other.get_by_role("button", name="Delete").click()
        other.wait_for_url(live_panel.url + "/")
        where = page.locator(f"#schedule-{schedule_id}") if start == "/" else page
        where.get_by_role("button", name="Pause").click()
        flash(page, "There is nothing here, or it belongs to another tenant.")
        assert page.locator("header.topbar").count() == 1  # no page pasted into the page
        where.get_by_role("button", name="Pause").wait_for()  # left as it was
        assert page.url == live_panel.url + start
    # Chromium logs the 404 of each failed fetch; nothing else may be logged.
    assert [m for m in errors.messages if "status of 404" not in m] == []
