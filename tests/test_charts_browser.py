"""The charts in headless Chromium, under the app's real CSP: a schedule's "Last 30 days" and the
operator's fires per minute are visible, have accessible names, and log no error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from tests.browser_support import (
    LiveServer,
    PageErrors,
    log_in,
)
from tests.conftest import make_run, make_schedule
from webapp.extensions import db
from webapp.models import User
from webapp.rollup_models import RunRollup
from webapp.services.accounts import find_tenant
from webapp.services.audit import Actor

pytestmark = pytest.mark.browser


@pytest.fixture
def charted(live_panel: LiveServer) -> int:
    """Alice, also an operator, with a schedule that has a month of history: its id."""
    with live_panel.app.app_context():
        alice = db.session.scalars(select(User).where(User.email == "alice@example.com")).one()
        alice.is_operator = True
        schedule = make_schedule(find_tenant("alpha"), "Charted", by=alice, cron="0 0 * * *")
        today = datetime.now(UTC).date()
        for days_ago in range(3, 20):
            db.session.add(
                RunRollup(
                    tenant_id=schedule.tenant_id,
                    schedule_id=schedule.id,
                    job=schedule.job,
                    day=today - timedelta(days=days_ago),
                    runs=1,
                    succeeded=0 if days_ago % 5 == 0 else 1,
                    failed=1 if days_ago % 5 == 0 else 0,
                    skipped=0,
                    duration_p50_seconds=days_ago * 1.5,
                    lag_mean_seconds=days_ago % 4,
                )
            )
        make_run(schedule, "succeeded", 60)
        make_run(schedule, "failed", 60 * 25)
        db.session.commit()
        charted_id = schedule.id
        db.session.remove()
        return charted_id


def test_the_schedule_page_draws_its_last_30_days_visibly_and_by_name(
    live_panel: LiveServer, charted: int, new_page: Any, errors: PageErrors
) -> None:
    browser_page = new_page
    log_in(browser_page, live_panel, "alice@example.com")
    browser_page.goto(f"{live_panel.url}/schedules/{charted}")
    for name in ("Daily outcomes", "Median duration and mean lag per day"):
        chart = browser_page.get_by_role("img", name=name)
        chart.wait_for()
        assert chart.is_visible()
        box = chart.bounding_box()
        assert box and box["width"] > 200 and box["height"] > 20
    strip = browser_page.get_by_role("img", name="Daily outcomes")
    description = strip.evaluate(
        "svg => document.getElementById(svg.getAttribute('aria-describedby')).textContent"
    )
    assert "days with failures" in description
    browser_page.get_by_text("The figures per day").click()
    browser_page.get_by_role("table", name="Runs per UTC day").wait_for()
    assert errors.messages == []


def test_the_fires_page_draws_the_next_24_hours_for_an_operator(
    live_panel: LiveServer, charted: int, new_page: Any, errors: PageErrors
) -> None:
    browser_page = new_page
    log_in(browser_page, live_panel, "alice@example.com")
    browser_page.goto(f"{live_panel.url}/operator/fires")
    chart = browser_page.get_by_role("img", name="Fires per minute over the next 24 hours, UTC")
    chart.wait_for()
    assert chart.is_visible()
    box = chart.bounding_box()
    assert box and box["width"] > 400
    assert browser_page.locator("#busiest-minutes").get_by_text("00:00 UTC").is_visible()
    assert errors.messages == []


# What a pseudo-element ::before shows before each cell of a row: a card's labels at phone width.
LABELS_BEFORE = """row => Array.from(row.querySelectorAll('td'))
  .map(cell => getComputedStyle(cell, '::before').content)"""


def test_the_fires_labels_never_overlap_and_stay_legible_on_a_phone(
    live_panel: LiveServer, charted: int, new_page: Any, errors: PageErrors
) -> None:
    """Equal minutes (a `*/5` schedule) are labelled from the left: each label has room of its
    own. On a phone the chart keeps a legible size and scrolls in its own box; the busiest
    minutes' cards say what each figure is."""
    with live_panel.app.app_context():
        make_schedule(find_tenant("alpha"), "Every five", by=Actor.cli(), cron="*/5 * * * *")
        db.session.remove()
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.goto(f"{live_panel.url}/operator/fires")
    labels = page.locator("#fires-per-minute .chart-peaks text")
    boxes = [labels.nth(n).bounding_box() for n in range(labels.count())]
    assert len(boxes) == 3
    for n, one in enumerate(boxes):
        for other in boxes[n + 1 :]:
            assert one and other
            apart = one["x"] + one["width"] <= other["x"] or other["x"] + other["width"] <= one["x"]
            assert apart, f"labels overlap: {one} and {other}"

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    chart = page.get_by_role("img", name="Fires per minute over the next 24 hours, UTC")
    tick = page.locator("#fires-per-minute .chart-tick-labels text").first
    tick_box, chart_box = tick.bounding_box(), chart.bounding_box()
    assert tick_box and tick_box["height"] >= 9  # was 4 px: the chart shrank to the width
    assert chart_box and chart_box["width"] >= 800
    width = page.evaluate("document.documentElement.clientWidth")
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # the page does not
    first = page.locator("#busiest-minutes tbody tr").first
    assert first.evaluate(LABELS_BEFORE) == ['"Minute: "', '"Fires: "']
    assert errors.messages == []
