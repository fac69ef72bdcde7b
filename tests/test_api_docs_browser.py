"""The API reference page (/api/docs) in headless Chromium under the app's real CSP: with
JavaScript, the vendored Swagger UI renders the OpenAPI document in place of the server-rendered
reference, with no console error and no CSP violation; without, the server's reference stays."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors, log_in

pytestmark = pytest.mark.browser

# Registered before any of the page's scripts run (through the DevTools protocol, which the CSP
# does not govern): every `securitypolicyviolation` event of the page, refused or reported.
RECORD_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.cspViolations.push(
    `${event.violatedDirective} blocked ${event.blockedURI || "inline"} ` +
    `at ${event.sourceFile}:${event.lineNumber}: ${event.sample}`
  );
});
"""


def open_docs(chromium: Any, live_panel: LiveServer, js: bool) -> tuple[Any, Any, PageErrors]:
    context = chromium.new_context(java_script_enabled=js)
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors = PageErrors()
    errors.watch(page)
    page.add_init_script(RECORD_VIOLATIONS)
    response = page.goto(live_panel.url + "/api/docs")
    assert response is not None and response.status == 200
    assert "script-src 'self'" in response.headers["content-security-policy"]
    return context, page, errors


def test_swagger_ui_renders_the_operations_under_the_csp(
    chromium: Any, live_panel: LiveServer
) -> None:
    context, page, errors = open_docs(chromium, live_panel, js=True)
    renderer = page.locator(".api-renderer .swagger-ui")
    create = renderer.locator("#operations-schedules-create_schedule")
    create.wait_for()
    assert "POST" in create.inner_text() and "/api/v1/schedules" in create.inner_text()
    assert "A new schedule, checked by ScheduleIn" in create.inner_text()
    assert renderer.get_by_text("/api/v1/schedules/{schedule_id}/pause").count() >= 1
    # The renderer replaced the server's reference; the problem types (targets of the problem
    # documents' `type` links) stay.
    assert page.locator("#api-reference").count() == 0
    page.locator("#problem-validation").wait_for()
    # An operation opens with its parameters and responses, and the models render.
    create.locator(".opblock-summary").click()
    create.get_by_text("Request body").first.wait_for()
    renderer.get_by_text("ScheduleIn").first.wait_for()
    page.wait_for_load_state("networkidle")
    violations = page.evaluate("window.cspViolations")
    context.close()
    assert violations == []
    assert errors.messages == []


def test_summaries_show_no_markdown_backticks_and_code_spans_render_as_code(
    chromium: Any, live_panel: LiveServer
) -> None:
    context, page, errors = open_docs(chromium, live_panel, js=True)
    summaries = page.locator(".api-renderer .opblock-summary-description")
    summaries.first.wait_for()
    texts = summaries.all_inner_texts()
    assert "Run now, or at at: queues a manual run; 201 with the run's Location." in texts
    assert not [text for text in texts if "`" in text]
    context.close()
    context, page, errors = open_docs(chromium, live_panel, js=False)
    reference = page.locator("#api-reference")
    assert "`" not in reference.inner_text()
    assert page.locator("#schema-RunOut > p code").all_inner_texts() == ["time_zone"]
    context.close()
    assert errors.messages == []


def test_the_panel_links_to_the_api_reference_from_every_page_and_the_tokens_page(
    new_page: Any, live_panel: LiveServer, errors: PageErrors
) -> None:
    page = new_page
    log_in(page, live_panel, "alice@example.com")
    page.get_by_role("link", name="API tokens").click()
    page.locator("#api-reference-link").get_by_role("link", name="API reference").click()
    page.wait_for_url(live_panel.url + "/api/docs")
    page.context.clear_cookies()
    log_in(page, live_panel, "bob@example.com")  # a viewer: no tokens page, the footer's link
    page.goto(live_panel.url + "/runs")
    page.locator("footer").get_by_role("link", name="API reference").click()
    page.wait_for_url(live_panel.url + "/api/docs")
    assert errors.messages == []


def test_without_javascript_the_server_reference_stays(
    chromium: Any, live_panel: LiveServer
) -> None:
    context, page, errors = open_docs(chromium, live_panel, js=False)
    page.locator("#op-create_schedule").wait_for()
    assert page.locator(".api-renderer").count() == 0
    assert page.locator("#schema-ScheduleIn").is_visible()
    context.close()
    assert errors.messages == []


def test_a_problem_type_link_lands_on_its_entry_after_the_renderer_ran(
    chromium: Any, live_panel: LiveServer
) -> None:
    context, page, errors = open_docs(chromium, live_panel, js=True)
    page.goto(live_panel.url + "/api/docs#problem-rate-limited")
    page.locator(".api-renderer .opblock").first.wait_for()
    entry = page.locator("#problem-rate-limited")
    page.wait_for_function(
        "() => { const r = document.getElementById('problem-rate-limited')"
        ".getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }"
    )
    assert entry.is_visible()
    context.close()
    assert errors.messages == []
