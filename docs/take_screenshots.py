"""Takes the panel screenshots in docs/ with Playwright and Debian's Chromium, at desktop width
and at phone width (390 px, the files ending in -phone.png).

    .venv/bin/python docs/take_screenshots.py
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.browser_support import CHROMIUM, CHROMIUM_ARGS, live_server  # noqa: E402
from tests.conftest import run_migrations  # noqa: E402
from webapp.extensions import db  # noqa: E402
from webapp.models import User  # noqa: E402
from webapp.services.accounts import add_user, create_tenant  # noqa: E402
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
    page.get_by_label("Cron expression").fill("0 8 * * 1")
    page.locator("#cron-preview").get_by_text("At 08:00").wait_for()
    page.screenshot(path=str(ROOT / f"docs/panel-new-schedule{suffix}.png"), full_page=True)
    page.goto(url + "/runs")
    page.screenshot(path=str(ROOT / f"docs/panel-history{suffix}.png"), full_page=False)


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
            db.session.remove()
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
                )
                for suffix, viewport in WIDTHS:
                    context = browser.new_context(viewport=viewport)
                    take(context.new_page(), server.url, suffix)
                    context.close()
                browser.close()
            db.session.remove()
            db.engine.dispose()


if __name__ == "__main__":
    main()
