"""Takes the panel screenshots in docs/ with Playwright and Debian's Chromium, at desktop width
and at phone width (390 px, the files ending in -phone.png), and the operator area's
(docs/operating-*.png, desktop width).

    .venv/bin/python docs/take_screenshots.py
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.browser_support import CHROMIUM, CHROMIUM_ARGS, live_server  # noqa: E402
from tests.conftest import run_migrations  # noqa: E402
from webapp.extensions import db  # noqa: E402
from webapp.models import Run, RunRollup, Schedule, User, Worker  # noqa: E402
from webapp.services.accounts import add_user, create_tenant, set_operator  # noqa: E402
from webapp.services.audit import Actor  # noqa: E402
from webapp.services.demo import seed_demo_schedules  # noqa: E402

PASSWORD = "demo-password"
# File name suffix and viewport: desktop, then a phone (390 px wide, as the browser tests check).
WIDTHS = (("", {"width": 1320, "height": 820}), ("-phone", {"width": 390, "height": 844}))


def take(page: Any, url: str, suffix: str) -> None:
    """Logs in and takes the schedules, new schedule and history screenshots."""
    page.goto(url + "/login")
    page.get_by_label("Email").fill("admin@demo.example")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(url + "/")
    page.screenshot(path=str(ROOT / f"docs/panel-schedules{suffix}.png"), full_page=True)
    page.goto(url + "/schedules/new")
    page.get_by_label("Name").fill("Weekly digest")
    page.get_by_label("Message").fill("Here is your week")
    page.get_by_label("Repeat", exact=True).select_option("weekly")  # Monday, by default
    page.get_by_label("At (times of day)").fill("8:00")
    page.locator("#cron[value='0 8 * * 1']").wait_for()
    page.locator("#cron-preview").get_by_text("At 08:00").wait_for()
    page.screenshot(path=str(ROOT / f"docs/panel-new-schedule{suffix}.png"), full_page=True)
    page.goto(url + "/runs")
    page.screenshot(path=str(ROOT / f"docs/panel-history{suffix}.png"), full_page=False)


def log_in(page: Any, url: str, email: str) -> None:
    page.goto(url + "/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


def take_operating(page: Any, url: str) -> None:
    """The operator area (tenants, workers, fires ahead) and a schedule's last 30 days."""
    log_in(page, url, "operator@demo.example")
    for name, path in (
        ("tenants", "/operator"),
        ("workers", "/operator/workers"),
        ("fires", "/operator/fires"),
    ):
        page.goto(url + path)
        page.screenshot(path=str(ROOT / f"docs/operating-{name}.png"), full_page=True)
    log_in(page, url, "admin@demo.example")
    page.goto(url + "/")
    page.get_by_role("link", name="Slow report").first.click()
    page.get_by_text("Last 30 days").first.scroll_into_view_if_needed()
    page.screenshot(path=str(ROOT / "docs/operating-schedule-charts.png"), full_page=True)


def add_rollups(now: datetime) -> None:
    """Four weeks of daily roll-ups before the demo's own history, as the retention job leaves
    them, so that the schedule page's charts show a month."""
    schedule = db.session.scalar(db.select(Schedule).where(Schedule.name == "Slow report"))
    assert schedule is not None and schedule.tenant_id is not None
    for days_ago in range(29, 2, -1):
        failed = 1 if days_ago in (17, 16, 9) else 0
        db.session.add(
            RunRollup(
                tenant_id=schedule.tenant_id,
                schedule_id=schedule.id,
                job=schedule.job,
                day=(now - timedelta(days=days_ago)).date(),
                runs=24,
                succeeded=24 - failed,
                failed=failed,
                skipped=0,
                duration_p50_seconds=1.8 + (days_ago % 5) * 0.15,
                duration_p95_seconds=2.6 + (days_ago % 4) * 0.2,
                lag_mean_seconds=0.4 + (1.3 if days_ago in (17, 16) else 0.0),
                lag_max_seconds=2.1,
            )
        )
    db.session.commit()


def add_workers(now: datetime) -> None:
    """A live thread worker holding a run and a stale process worker whose lease has expired, for
    the workers page."""
    live = Worker(hostname="worker-a", pid=4121, kind="thread", concurrency=4, version="0.1.0")
    stale = Worker(hostname="worker-b", pid=977, kind="process", concurrency=4, version="0.1.0")
    live.started_at = stale.started_at = now - timedelta(hours=3)
    live.last_heartbeat_at = now
    stale.last_heartbeat_at = now - timedelta(minutes=9)
    db.session.add_all([live, stale])
    db.session.flush()
    queued = db.session.scalars(db.select(Run).order_by(Run.id.desc()).limit(2)).all()
    for run, worker, until in zip(
        queued,
        (live, stale),
        (now + timedelta(seconds=50), now - timedelta(minutes=8)),
        strict=False,
    ):
        run.status, run.worker_id, run.locked_until = "running", worker.id, until
        run.attempt, run.started_at, run.finished_at = 1, now - timedelta(seconds=20), None
    db.session.commit()


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        template = f"{directory}/template.db"
        run_migrations(f"sqlite:///{template}")
        with live_server(template, directory) as server, server.app.app_context():
            tenant = create_tenant("demo", "Demo Company", "Europe/Berlin")
            add_user("admin@demo.example", "demo", "admin", PASSWORD)
            admin = db.session.scalar(db.select(User).where(User.email == "admin@demo.example"))
            assert admin is not None
            seed_demo_schedules(tenant, admin, datetime.now(UTC))
            add_user("operator@demo.example", "demo", "viewer", PASSWORD)
            set_operator("operator@demo.example", True, Actor.cli())
            add_workers(datetime.now(UTC))
            add_rollups(datetime.now(UTC))
            db.session.remove()
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
                )
                for suffix, viewport in WIDTHS:
                    context = browser.new_context(viewport=viewport)
                    take(context.new_page(), server.url, suffix)
                    context.close()
                context = browser.new_context(viewport=WIDTHS[0][1])
                take_operating(context.new_page(), server.url)
                context.close()
                browser.close()
            db.session.remove()
            db.engine.dispose()


if __name__ == "__main__":
    main()
