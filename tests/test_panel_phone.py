"""Every page of the panel at phone width (390 px) and at desktop width: the page never scrolls
sideways, every control is inside the viewport (or inside a table that scrolls on its own), every
action of the page is visible and clickable, and no cron expression is broken across lines."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser_support import PageErrors, log_in
from tests.panel_pages import ADMIN, LONG_EMAIL, NO_TENANT, WIDTHS, DemoPages, demo_pages

# One test process for the file (pytest -n): its module fixtures are set up once.
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("panel-phone")]

# The controls outside the viewport's width, the page's own horizontal overflow excepted: a
# control inside a region that scrolls sideways on its own (a wide table) is reached by
# scrolling that region, so it only has to be inside it.
CONTROLS_OUTSIDE = """() => {
  const width = document.documentElement.clientWidth;
  const inScroller = (element) => {
    for (let up = element.parentElement; up; up = up.parentElement) {
      const overflow = getComputedStyle(up).overflowX;
      if ((overflow === 'auto' || overflow === 'scroll') && up.scrollWidth > up.clientWidth) {
        return true;
      }
    }
    return false;
  };
  const outside = [];
  const controls = 'a[href], button, input:not([type=hidden]), select, textarea, [tabindex]';
  for (const element of document.querySelectorAll(controls)) {
    const box = element.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) continue;  // not rendered (a datalist's option)
    if (inScroller(element)) continue;
    if (box.left < 0 || box.right > width + 0.5) {
      const name = (element.innerText || element.name || element.id || '').trim();
      outside.push(`${element.tagName.toLowerCase()} "${name}" at ${box.left}..${box.right}`);
    }
  }
  return outside;
}"""

# A cron expression is an inline <code class="cron">: more than one client rectangle means a line
# break inside it.
BROKEN_CRON = """() => Array.from(document.querySelectorAll('code.cron'))
  .filter((code) => code.getClientRects().length > 1).map((code) => code.textContent)"""


@pytest.fixture(scope="module")
def demo(sqlite_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoPages]:
    with demo_pages(sqlite_template, str(tmp_path_factory.mktemp("phone"))) as pages:
        yield pages


@pytest.fixture(params=list(WIDTHS))
def page(request: pytest.FixtureRequest, chromium: Any, demo: DemoPages) -> Iterator[Any]:
    """A logged-in admin's page at the parameter's width, failing on any JavaScript error."""
    context = chromium.new_context(viewport=WIDTHS[request.param])
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors = PageErrors()
    errors.watch(page)
    page.on("dialog", lambda dialog: dialog.dismiss())
    log_in(page, demo.server, ADMIN)
    yield page
    context.close()
    # Chromium logs the status of the error pages that the tests open on purpose.
    expected = ("/schedules/999999", "/runs?before=x")
    assert [m for m in errors.messages if not any(url in m for url in expected)] == []


NAVIGATION = ("Schedules", "Next runs", "Run history", "Audit log")
# A sheet over the whole page, as a misplaced sticky element or an open overlay would be.
COVER = """() => {
  const sheet = document.createElement('div');
  sheet.style = 'position: fixed; inset: 0; z-index: 9999; background: transparent';
  document.body.append(sheet);
}"""


def check_layout(page: Any, where: str) -> None:
    page.wait_for_load_state("networkidle")
    width = page.evaluate("document.documentElement.clientWidth")
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, f"{where}: the page is {scroll_width} px wide in {width} px"
    assert page.evaluate(CONTROLS_OUTSIDE) == [], where
    assert page.evaluate(BROKEN_CRON) == [], where


def check_reachable(page: Any, locator: Any, where: str) -> None:
    """Visible, clickable (nothing covers it) and wholly inside the viewport's width."""
    locator.scroll_into_view_if_needed()
    if locator.is_enabled():
        locator.click(trial=True)  # checks that nothing covers it
    else:  # "Resume and catch up" when nothing was missed
        assert locator.is_visible(), where
    box = locator.bounding_box()
    width = page.evaluate("document.documentElement.clientWidth")
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, where


# The controls given that are not reachable: each scrolled into view (its own scrolling region
# too), then outside the width, not rendered, or covered at its centre (where a click lands).
# One call for a page's header, instead of a trial click each (a third of the walk's time).
UNREACHABLE = """(controls) => {
  const width = document.documentElement.clientWidth;
  return controls.filter((control) => {
    control.scrollIntoView({block: 'nearest', inline: 'nearest'});
    const box = control.getBoundingClientRect();
    const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
    const inside = box.width > 0 && box.left >= 0 && box.right <= width + 0.5;
    return !(inside && hit !== null && control.contains(hit));
  }).map((control) => control.outerHTML.slice(0, 120));
}"""


def test_every_page_fits_the_width_and_keeps_its_controls_inside(
    page: Any, demo: DemoPages
) -> None:
    navigation = page.get_by_role("navigation", name="Main")
    header = [
        page.get_by_label("Tenant", exact=True),
        page.get_by_role("button", name="Switch"),
        *(navigation.get_by_role("link", name=link) for link in NAVIGATION),
        page.get_by_role("button", name="Log out"),  # in sight
    ]
    controls = header[0]
    for other in header[1:]:
        controls = controls.or_(other)
    for name, path in demo.logged_in().items():
        page.goto(demo.server.url + path)
        check_layout(page, name)
        assert controls.count() == len(header), name
        assert controls.evaluate_all(UNREACHABLE) == [], name


def test_the_header_check_finds_a_covered_control(page: Any, demo: DemoPages) -> None:
    page.goto(demo.server.url + "/")
    log_out = page.get_by_role("button", name="Log out")
    assert log_out.evaluate_all(UNREACHABLE) == []
    page.evaluate(COVER)
    assert len(log_out.evaluate_all(UNREACHABLE)) == 1


def test_the_login_and_the_no_tenant_pages_fit(chromium: Any, demo: DemoPages) -> None:
    for viewport in WIDTHS.values():
        context = chromium.new_context(viewport=viewport)
        page = context.new_page()
        page.goto(demo.server.url + "/login")
        check_layout(page, f"login at {viewport['width']}")
        check_reachable(page, page.get_by_role("button", name="Log in"), "login")
        log_in(page, demo.server, NO_TENANT)
        page.get_by_text("No tenant yet").wait_for()
        check_layout(page, f"no tenant at {viewport['width']}")
        check_reachable(page, page.get_by_role("button", name="Log out"), "no tenant")
        context.close()


def test_every_action_of_the_schedule_list_is_reachable(page: Any, demo: DemoPages) -> None:
    page.goto(demo.server.url + "/")
    check_reachable(page, page.get_by_role("link", name="New schedule"), "new")
    for label in ("Search by name", "Job", "State"):
        check_reachable(page, page.get_by_label(label, exact=True), label)
    # The list updates as the filters change: no Filter button once JavaScript runs.
    assert page.get_by_role("button", name="Filter").is_hidden()
    active = page.locator(f"#schedule-{demo.schedule}")
    paused = page.locator(f"#schedule-{demo.paused}")
    for row, toggle in ((active, "button"), (paused, "link")):
        check_reachable(page, row.get_by_role("link").first, "name link")
        check_reachable(page, row.get_by_role("button", name="Run now"), "run now")
        pause_or_resume = row.get_by_role(toggle, name="Pause" if toggle == "button" else "Resume")
        check_reachable(page, pause_or_resume, "pause or resume")
        check_reachable(page, row.get_by_role("link", name="Edit"), "edit")
        check_reachable(page, row.get_by_role("button", name="Delete"), "delete")
        for what in ("Next run", "Last run"):  # the cells the phone layout used to hide
            assert row.locator(f'[data-label="{what}"]').is_visible(), what
    check_reachable(page, page.get_by_role("link", name="Load more schedules"), "more")
    # The resume question opens inside the row: its buttons fit too.
    paused.get_by_role("link", name="Resume").click()
    check_reachable(page, page.get_by_role("button", name="Resume, skip missed"), "skip")
    check_reachable(page, page.get_by_role("button", name="Resume and catch up"), "catch up")
    check_layout(page, "resume in the list")
    page.get_by_role("link", name="Load more schedules").click()
    page.locator(f"#schedule-{demo.schedule}").wait_for()
    check_layout(page, "second page of schedules")


def test_every_action_of_a_schedule_and_its_resume_page_is_reachable(
    page: Any, demo: DemoPages
) -> None:
    page.goto(demo.server.url + f"/schedules/{demo.schedule}")
    for role, name in (
        ("button", "Run now"),
        ("button", "Pause"),
        ("link", "Edit"),
        ("button", "Delete"),
        ("link", "All runs of this schedule →"),
    ):
        check_reachable(page, page.get_by_role(role, name=name), name)
    page.goto(demo.server.url + f"/schedules/{demo.paused}")
    check_reachable(page, page.get_by_role("link", name="Resume"), "resume")
    page.goto(demo.server.url + f"/schedules/{demo.paused}/resume")
    for name in ("Resume, skip missed", "Resume and catch up"):
        check_reachable(page, page.get_by_role("button", name=name), name)
    check_reachable(page, page.get_by_role("link", name="Cancel"), "cancel")


def test_the_form_its_preview_and_its_errors_fit(page: Any, demo: DemoPages) -> None:
    page.goto(demo.server.url + "/schedules/new")
    page.get_by_label("Cron expression").fill("30 2 * * *")
    page.locator("#cron-preview li").first.wait_for()
    check_layout(page, "form with a preview")
    page.get_by_label("Name").fill("")
    page.get_by_role("button", name="Save").click()
    page.get_by_text("Please fix the fields marked below.").wait_for()
    check_layout(page, "form with errors")
    check_reachable(page, page.get_by_role("button", name="Save"), "save")
    check_reachable(page, page.get_by_role("link", name="Cancel"), "cancel")


def load_older(page: Any, name: str) -> None:
    """Clicks the link and waits until the page it loaded replaced it (the new page may end
    with a link of the same name to the page after)."""
    link = page.get_by_role("link", name=name)
    href = link.get_attribute("href")
    link.click()
    page.locator(f'a[href="{href}"]').wait_for(state="detached")


def test_the_history_and_the_audit_log_load_older_rows_within_the_width(
    page: Any, demo: DemoPages
) -> None:
    page.goto(demo.server.url + "/runs")
    for label in (
        "Find a schedule",
        "Schedule",
        "Status",
        "Trigger",
        "Scheduled from",
        "Scheduled until",
    ):
        check_reachable(page, page.get_by_label(label, exact=True), label)
    check_reachable(page, page.get_by_role("button", name="Filter"), "filter")
    check_reachable(page, page.get_by_role("link", name="Load older runs"), "older runs")
    load_older(page, "Load older runs")
    check_layout(page, "second page of runs")
    page.goto(demo.server.url + "/audit")
    check_reachable(page, page.get_by_role("link", name="Load older events"), "older events")
    load_older(page, "Load older events")
    check_layout(page, "second page of the audit log")


# The distinct rows of the header: its items' tops, a few pixels apart at most within a row.
HEADER_ROWS = """() => {
  const tops = [];
  for (const item of document.querySelector('header.topbar').children) {
    const top = item.getBoundingClientRect().top;
    if (!tops.some((seen) => Math.abs(seen - top) < 12)) tops.push(top);
  }
  return tops.length;
}"""


def header_height(page: Any) -> float:
    box = page.locator("header.topbar").bounding_box()
    assert box is not None
    return float(box["height"])


@pytest.mark.parametrize(
    ("width", "rows", "most"),
    [("desktop", 1, 56), ("phone", 2, 90)],
)
def test_the_header_takes_one_row_at_desktop_width_and_two_on_a_phone(
    chromium: Any, demo: DemoPages, width: str, rows: int, most: float
) -> None:
    """The demo's two tenants and its address, then a 40-character address with the operator's
    link too: one row of 51 px at 1280 px (was two, 85 px), two of 81 px on a phone (was four,
    177 px; 204 px with the long address). The address is cut on one line, whole in its title and
    in the account menu, which holds the times toggle; Log out stays in sight beside it."""
    for email in (ADMIN, LONG_EMAIL):
        context = chromium.new_context(viewport=WIDTHS[width])
        page = context.new_page()
        log_in(page, demo.server, email)
        page.goto(demo.server.url + "/settings/notifications")  # the last link of the navigation
        where = f"{email} at {width} width"
        assert page.evaluate(HEADER_ROWS) == rows, where
        assert header_height(page) < most, where
        navigation = page.get_by_role("navigation", name="Main")
        current = navigation.get_by_role("link", name="Notifications")
        box = current.bounding_box()  # in view without scrolling, on a phone too
        assert box and 0 <= box["x"] and box["x"] + box["width"] <= WIDTHS[width]["width"], where
        summary = page.get_by_title(email)
        line = summary.bounding_box()
        assert line and line["height"] < 40, where  # the address on one line
        if email == LONG_EMAIL:  # cut, with an ellipsis
            assert summary.locator(".who").evaluate("who => who.scrollWidth > who.clientWidth")
        # Log out is one click, not in the menu.
        assert page.get_by_role("button", name="Log out").is_visible(), where
        # By keyboard: Enter opens the menu, Tab reaches its buttons, Escape closes it.
        summary.focus()
        page.keyboard.press("Enter")
        menu = page.locator("header .account-menu")
        assert email in menu.inner_text(), where
        for name in ("Local", "UTC"):
            page.keyboard.press("Tab")
            focused = page.evaluate("document.activeElement.textContent.trim()")
            assert focused == name, where
        check_layout(page, f"the account menu of {where}")  # the open menu fits
        page.keyboard.press("Escape")
        assert menu.is_hidden(), where
        assert page.evaluate("document.activeElement.title") == email, where
        summary.click()  # and a click elsewhere closes it
        page.mouse.click(2, WIDTHS[width]["height"] - 2)
        assert menu.is_hidden(), where
        context.close()


def test_the_schedule_list_gives_names_room_and_filters_without_javascript(
    chromium: Any, demo: DemoPages
) -> None:
    context = chromium.new_context(viewport=WIDTHS["desktop"])
    page = context.new_page()
    log_in(page, demo.server, ADMIN)
    page.goto(demo.server.url + "/")
    name = page.get_by_role("link", name="Every seven minutes", exact=True)
    assert name.evaluate("link => link.getClientRects().length") == 1  # was 3 lines
    search = page.get_by_label("Search by name").bounding_box()
    form = page.get_by_role("search").bounding_box()
    assert search and form and search["width"] <= 0.35 * form["width"]  # was 55 %
    context.close()
    # Without JavaScript the button stays, and filters.
    context = chromium.new_context(viewport=WIDTHS["desktop"], java_script_enabled=False)
    page = context.new_page()
    log_in(page, demo.server, ADMIN)
    page.get_by_label("Search by name").fill("seven")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/?q=seven**")
    rows = page.locator("#schedule-rows > tr")
    assert rows.count() == 1 and "Every seven minutes" in rows.inner_text()
    context.close()


def upcoming_names(page: Any) -> list[str]:
    """The schedule of each row of Next runs, in order."""
    return page.locator("#upcoming tbody tr td:nth-child(2) > a").all_inner_texts()


def test_next_runs_fold_a_frequent_schedule_and_filter_to_one(page: Any, demo: DemoPages) -> None:
    """`*/7` would fill the page (4,585 px at 1280, 10,684 px on a phone): its fires in a row
    fold under the first, which links to that schedule's own list."""
    page.goto(demo.server.url + "/upcoming")
    viewport = page.viewport_size
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 2.6 * viewport["height"], f"{height} px"
    names = upcoming_names(page)
    # Three in a row fold (FOLD_FROM); two may stay, as at the page's end when it cuts a run.
    assert all(not a == b == c for a, b, c in zip(names, names[1:], names[2:], strict=False)), names
    folded = page.get_by_role("link", name=re.compile(r"^every 4\u20137 min, \d+ more$")).first
    folded.click()
    page.wait_for_url(re.compile(r"/upcoming\?schedule=\d+$"))
    assert page.get_by_label("Schedule").locator("option:checked").inner_text() == (
        "Every seven minutes"
    )
    assert upcoming_names(page) == ["Every seven minutes"] * 50  # unfolded, paged
    check_layout(page, "next runs of one schedule")
    page.get_by_label("Schedule").select_option(label="All active schedules")  # htmx: no button
    page.wait_for_url(demo.server.url + "/upcoming?schedule=")
    page.get_by_role("link", name="Slow report").first.wait_for()
    assert page.get_by_role("button", name="Filter").is_hidden()


def test_next_runs_filter_to_a_schedule_without_javascript(chromium: Any, demo: DemoPages) -> None:
    context = chromium.new_context(viewport=WIDTHS["phone"], java_script_enabled=False)
    page = context.new_page()
    log_in(page, demo.server, ADMIN)
    page.goto(demo.server.url + "/upcoming")
    page.get_by_label("Schedule").select_option(label="Slow report")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"/upcoming\?schedule=\d+&filter="))
    assert set(upcoming_names(page)) == {"Slow report"}
    context.close()
