"""Single sign-on in a real browser, with and without JavaScript, against a real OpenID Connect
provider on another origin: the login page's button, the provider's form, back to the page the
login was asked for; the clear page of a sign-in that is refused; axe-core on both pages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser_support import LiveServer, PageErrors
from tests.conftest import alpha_panel
from tests.oidc_support import Provider, oidc_provider
from tests.panel_pages import WIDTHS
from tests.test_panel_axe import describe, fail_on, new_context, severe_violations

pytestmark = pytest.mark.browser


@pytest.fixture
def sso_panel(sqlite_template: str, tmp_path: Path) -> Iterator[tuple[LiveServer, Provider]]:
    """The panel on 127.0.0.1, signing in through a provider on localhost (another site)."""
    with oidc_provider(require_client_registration=False) as provider:
        settings = {
            "SCHEDULER_OIDC_ISSUER": provider.url,
            "SCHEDULER_OIDC_CLIENT_ID": "scheduler",
            "SCHEDULER_OIDC_CLIENT_SECRET": "browser-test-secret",
            "SCHEDULER_OIDC_NAME": "Example ID",
        }
        with alpha_panel(sqlite_template, tmp_path, **settings) as live:
            yield live, provider


def sign_in_at_provider(
    page: Any, panel: tuple[LiveServer, Provider], sub: str, verified: bool
) -> LiveServer:
    """From the login page (asked for /runs) to the provider's form, submitted for `sub`, whose
    email alice@example.com the provider has `verified` or not."""
    live, provider = panel
    provider.user(sub, email="alice@example.com", email_verified=verified)
    # The provider's page styles itself from a CDN, out of reach here: an empty sheet instead.
    page.route("https://cdn.jsdelivr.net/**", lambda route: route.fulfill(body="", status=200))
    page.goto(live.url + "/login?next=/runs")
    page.get_by_role("link", name="Sign in with Example ID").click()
    page.get_by_placeholder("sub").fill(sub)
    page.get_by_role("button", name="Authorize").click()
    return live


def test_sign_in_with_the_identity_provider(
    page: Any, sso_panel: tuple[LiveServer, Provider], errors: PageErrors
) -> None:
    live = sign_in_at_provider(page, sso_panel, "alice-at-idp", verified=True)
    page.wait_for_url(live.url + "/runs")
    page.get_by_text("alice@example.com").first.wait_for()
    assert errors.messages == []


def test_an_unverified_email_gets_a_clear_page(
    page: Any, sso_panel: tuple[LiveServer, Provider], errors: PageErrors
) -> None:
    live = sign_in_at_provider(page, sso_panel, "mallory", verified=False)
    page.get_by_role("heading", name="Sign-in with Example ID failed").wait_for()
    assert "has not verified the email address alice@example.com" in page.content()
    page.get_by_role("link", name="Back to log in").click()
    page.wait_for_url(live.url + "/login")
    refused = "the server responded with a status of 403"
    assert [message for message in errors.messages if refused not in message] == []


@pytest.mark.parametrize("width", list(WIDTHS))
def test_the_sso_pages_have_no_serious_or_critical_violation(
    chromium: Any, sso_panel: tuple[LiveServer, Provider], width: str
) -> None:
    live, _provider = sso_panel
    context = new_context(chromium, width)
    page = context.new_page()
    page.goto(live.url + "/login")
    found = describe(f"login with its button at {width}", severe_violations(page))
    page.goto(live.url + "/login/sso/callback?state=forged&code=forged")
    page.get_by_role("heading", name="Sign-in with Example ID failed").wait_for()
    found += describe(f"a refused sign-in at {width}", severe_violations(page))
    context.close()
    fail_on(found)
