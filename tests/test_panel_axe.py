"""axe-core, an independent accessibility checker, on every page of the panel at phone and at
desktop width: no violation of impact serious or critical (contrast, names, roles, keyboard
reachable scrolling regions, ...). axe-core is vendored for the tests only, in tests/vendor/axe-core
(see its README); the app never serves it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyotp
import pytest

from tests.browser_support import log_in, log_out, open_account_menu
from tests.conftest import PASSWORD
from tests.panel_pages import ADMIN, LONG_EMAIL, NO_TENANT, WIDTHS, DemoPages, demo_pages
from webapp.extensions import db
from webapp.services.accounts import add_user

# One test process for the file (pytest -n): its module fixtures are set up once.
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("panel-axe")]

AXE = Path(__file__).resolve().parent / "vendor/axe-core/axe.min.js"
SEVERE = ("serious", "critical")


@pytest.fixture(scope="module")
def demo(sqlite_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoPages]:
    with demo_pages(sqlite_template, str(tmp_path_factory.mktemp("axe"))) as pages:
        yield pages


def new_context(chromium: Any, width: str) -> Any:
    # Playwright injects axe as an inline <script>, which the app's CSP (script-src 'self')
    # refuses: this test alone bypasses the CSP. The other browser tests keep it and fail on any
    # CSP violation, so the app's own pages are still checked under the real policy.
    return chromium.new_context(viewport=WIDTHS[width], bypass_csp=True)


def severe_violations(page: Any) -> list[dict[str, Any]]:
    page.wait_for_load_state("networkidle")
    page.add_script_tag(path=str(AXE))
    results = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
    return [v for v in results["violations"] if v["impact"] in SEVERE]


def describe(where: str, violations: list[dict[str, Any]]) -> list[str]:
    """One line per violation and element: what, where, and axe's summary of how to fix it."""
    lines = []
    for violation in violations:
        for node in violation["nodes"]:
            summary = " ".join(node.get("failureSummary", "").split())
            lines.append(
                f"{where}: {violation['id']} ({violation['impact']}) {violation['help']} at "
                f"{' '.join(map(str, node['target']))}: {summary}"
            )
    return lines


def fail_on(found: list[str]) -> None:
    if found:
        pytest.fail(f"{len(found)} serious or critical violations:\n" + "\n".join(found), False)


@pytest.fixture(params=list(WIDTHS))
def width(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_checker_reports_a_serious_violation(chromium: Any, width: str) -> None:
    context = new_context(chromium, width)
    page = context.new_page()
    page.set_content('<html lang="en"><title>t</title><p style="color:#aaa">faint</p></html>')
    found = severe_violations(page)
    context.close()
    assert [v["id"] for v in found] == ["color-contrast"]


def test_no_page_has_a_serious_or_critical_violation(
    chromium: Any, demo: DemoPages, width: str
) -> None:
    context = new_context(chromium, width)
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.goto(demo.server.url + "/login")
    found = describe("login", severe_violations(page))
    log_in(page, demo.server, NO_TENANT)
    page.get_by_text("No tenant yet").wait_for()
    found += describe("no tenant", severe_violations(page))
    log_out(page)
    log_in(page, demo.server, ADMIN)
    for name, path in demo.logged_in().items():
        page.goto(demo.server.url + path)
        found += describe(name, severe_violations(page))
    # The states that htmx swaps in: the resume question in a list row, the live preview and
    # the form's errors; and the header's account menu, open.
    page.goto(demo.server.url + "/")
    open_account_menu(page)
    found += describe("account menu", severe_violations(page))
    page.locator(f"#schedule-{demo.paused}").get_by_role("link", name="Resume").click()
    page.get_by_role("button", name="Resume, skip missed").wait_for()
    found += describe("resume in the list", severe_violations(page))
    page.goto(demo.server.url + "/schedules/new")
    page.get_by_label("Cron expression").fill("30 2 * * *")
    page.locator("#cron-preview li").first.wait_for()
    page.get_by_role("button", name="Save").click()
    page.get_by_text("Please fix the fields marked below.").wait_for()
    found += describe("form with a preview and errors", severe_violations(page))
    # The schedule builder: the days of the week with an error beside them, a monthly shape.
    page.get_by_label("Repeat", exact=True).select_option("weekly")
    page.get_by_label("Monday").uncheck()
    page.get_by_role("button", name="Update cron").click()
    page.locator("#repeat_days-error").wait_for()
    found += describe("builder: days of the week, an error", severe_violations(page))
    page.get_by_label("Repeat", exact=True).select_option("monthly")
    page.get_by_label("On", exact=True).select_option("last")
    page.get_by_label("Day of the week").wait_for()
    found += describe("builder: the last Friday of the month", severe_violations(page))
    # The Calendars page's forms with their errors, and the year that the year links swap in.
    page.goto(demo.server.url + "/calendars")
    page.get_by_label("Country of the public holidays").fill("XX")
    page.get_by_role("button", name="Create calendar").click()
    page.locator("#country-error").wait_for()
    found += describe("new calendar with errors", severe_violations(page))
    page.goto(demo.server.url + f"/calendars/{demo.calendar}")
    page.get_by_label("Date, or first day").fill("2027-12-31")
    page.get_by_label("Last day (for a range)").fill("2027-12-24")
    page.get_by_role("button", name="Add closed days").click()
    page.locator("#day_to-error").wait_for()
    page.locator("#calendar-year").get_by_role("link").last.click()
    page.wait_for_url("**?year=*")
    found += describe("calendar with errors and the next year", severe_violations(page))
    context.close()
    fail_on(found)


def test_the_two_factor_pages_have_no_serious_or_critical_violation(
    chromium: Any, demo: DemoPages, width: str
) -> None:
    """Setting it up (the QR code, a wrong code), the recovery codes, the login's second step
    with its error, the operator's reset with its error; and the operator tokens (a neighbour
    in the operator area)."""
    email = f"two-factor-{width}@demo.example"
    with demo.server.app.app_context():
        add_user(email, "demo", "viewer", PASSWORD)
        db.session.remove()
    context = new_context(chromium, width)
    page = context.new_page()
    page.set_default_timeout(10_000)
    log_in(page, demo.server, email)
    page.goto(demo.server.url + "/account/two-factor")
    page.get_by_role("button", name="Set up two-factor login").click()
    found = describe("two-factor setup", severe_violations(page))
    page.get_by_label("Code from the app").fill("000000")
    page.get_by_role("button", name="Turn on two-factor login").click()
    page.get_by_text("That code is not the current one").wait_for()
    found += describe("two-factor setup with an error", severe_violations(page))
    secret = page.locator("#totp-secret").inner_text().strip()
    page.get_by_label("Code from the app").fill(pyotp.TOTP(secret).now())
    page.get_by_role("button", name="Turn on two-factor login").click()
    page.get_by_role("heading", name="Your recovery codes").wait_for()
    found += describe("recovery codes", severe_violations(page))
    page.goto(demo.server.url + "/account/two-factor")
    found += describe("two-factor on", severe_violations(page))
    log_out(page)
    page.goto(demo.server.url + "/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("button", name="Verify").click()
    page.get_by_text("Enter a code.").wait_for()
    found += describe("second step with an error", severe_violations(page))
    context.close()
    context = new_context(chromium, width)
    page = context.new_page()
    log_in(page, demo.server, LONG_EMAIL)
    page.goto(demo.server.url + "/operator/two-factor")
    page.get_by_label("User's email").fill("nobody@demo.example")
    page.get_by_role("button", name="Reset two-factor login").click()
    page.get_by_text("No user").wait_for()
    found += describe("operator's reset with an error", severe_violations(page))
    page.goto(demo.server.url + "/operator/tokens")
    page.get_by_role("button", name="Revoke").wait_for()
    found += describe("operator tokens", severe_violations(page))
    context.close()
    fail_on(found)
