"""The operator area in headless Chromium: an operator without a tenant logs in and lands on the
tenants page, views a tenant read-only, then releases a stale worker's lease on the workers page;
revokes an operator token."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors, api_status
from tests.conftest import PASSWORD, make_run, make_schedule
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Run, User, Worker
from webapp.services.accounts import find_tenant, hash_password
from webapp.services.audit import Actor
from webapp.services.tokens import create_operator_token

pytestmark = pytest.mark.browser
ADMIN_TENANTS = "/api/v1/admin/tenants"


@pytest.fixture
def olga(live_panel: LiveServer) -> None:
    """Olga, an operator who is a member of no tenant."""
    with live_panel.app.app_context():
        db.session.add(
            User(email="olga@example.com", password_hash=hash_password(PASSWORD), is_operator=True)
        )
        db.session.commit()
        db.session.remove()


def stale_worker_with_a_run(live_panel: LiveServer) -> tuple[int, int]:
    with live_panel.app.app_context():
        now = datetime.now(UTC)
        schedule = make_schedule(
            find_tenant("alpha"), "Alpha nightly report", by=Actor.cli(), cron="0 2 * * *"
        )
        worker = Worker(hostname="host-b", pid=202, last_heartbeat_at=now - timedelta(minutes=10))
        db.session.add(worker)
        db.session.flush()
        run = make_run(
            schedule, "running", 12, worker_id=worker.id, locked_until=now - timedelta(minutes=9)
        )
        db.session.commit()
        ids = worker.id, run.id
        db.session.remove()
        return ids


def run_state(live_panel: LiveServer, run_id: int) -> tuple[str, int | None, int]:
    with live_panel.app.app_context():
        run = db.session.get(Run, run_id)
        assert run is not None
        state = run.status, run.worker_id, run.attempt
        db.session.remove()
        return state


@pytest.mark.usefixtures("olga")
def test_an_operator_views_a_tenant_and_releases_a_stale_lease(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    worker_id, run_id = stale_worker_with_a_run(live_panel)
    page = new_page
    page.goto(live_panel.url + "/login")
    page.get_by_label("Email").fill("olga@example.com")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(live_panel.url + "/operator")  # no tenant of her own: the operator area
    page.get_by_role("heading", name="Tenants").wait_for()
    row = page.get_by_role("row", name="Alpha Corp")
    assert row.locator('[data-count="schedules"]').inner_text() == "1"

    row.get_by_role("button", name="View Alpha Corp").click()
    page.wait_for_url(live_panel.url + "/")
    banner = page.locator("#operator-banner")
    banner.get_by_text("Operator view of Alpha Corp (read-only)").wait_for()
    page.get_by_role("link", name="Alpha nightly report").wait_for()
    assert page.get_by_role("link", name="New schedule").count() == 0  # read-only

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Operator").click()
    page.get_by_role("navigation", name="Operator").get_by_role("link", name="Workers").click()
    page.wait_for_url(live_panel.url + "/operator/workers")
    worker = page.locator(f"#worker-{worker_id}")
    worker.get_by_text("stale", exact=True).wait_for()
    worker.get_by_role("button", name=f"Release run {run_id}").click()  # hx-confirm accepted
    page.get_by_text(f"Run {run_id} released from worker {worker_id} on host-b").wait_for()
    page.locator(f"#worker-{worker_id}").get_by_text("Holds no run.").wait_for()
    assert run_state(live_panel, run_id) == ("queued", None, 0)
    assert errors.messages == []


@pytest.mark.usefixtures("olga")
def test_a_tenants_card_on_a_phone_says_what_each_figure_is(
    live_panel: LiveServer, new_page: Any, errors: PageErrors
) -> None:
    page = new_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(live_panel.url + "/login")
    page.get_by_label("Email").fill("olga@example.com")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(live_panel.url + "/operator")
    row = page.get_by_role("row", name="Alpha Corp")
    labels = row.evaluate(
        "row => Array.from(row.querySelectorAll('td.num'))"
        ".map(cell => getComputedStyle(cell, '::before').content)"
    )
    assert labels == [
        '"Schedules: "',
        '"Failed runs (24 h): "',
        '"Overdue schedules: "',
        '"Overdue queued runs: "',
        '"Running / cap: "',
    ]
    assert errors.messages == []


@pytest.mark.usefixtures("olga")
def test_an_operator_revokes_an_operator_token_from_the_operator_area(
    page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    with live_panel.app.app_context():
        _token, secret = create_operator_token("Host backend", None, Actor.cli(), utcnow())
        db.session.remove()
    assert api_status(live_panel, ADMIN_TENANTS, secret) == 200
    page.goto(live_panel.url + "/login")
    page.get_by_label("Email").fill("olga@example.com")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("link", name="Operator tokens").click()
    row = page.locator("tr", has_text="Host backend")
    assert "active" in row.inner_text()
    row.get_by_role("button", name="Revoke").click()  # hx-confirm accepted (`page`)
    page.wait_for_url(live_panel.url + "/operator/tokens")
    page.locator("tr", has_text="revoked").wait_for()
    assert api_status(live_panel, ADMIN_TENANTS, secret) == 401
    assert errors.messages == []
