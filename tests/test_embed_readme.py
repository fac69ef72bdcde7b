"""The integration code of docs/how-to/embed.md ("Embed it in your product"), run as written
against a live panel: it
provisions a tenant for a new customer, and its "Schedules" view redirects to a sign-in link
that a browser (here `requests`) opens, continues and lands in the customer's panel."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests

from tests.browser_support import LiveServer, live_server
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Membership, Tenant, User
from webapp.services import tokens
from webapp.services.audit import Actor

PAGE = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "embed.md"


def page_integration() -> str:
    """The first Python block of the page "Embed it in your product"."""
    found = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert found, "no Python block on the page"
    return found.group(1)


@pytest.fixture
def panel(sqlite_template: str, tmp_path: Path) -> Iterator[LiveServer]:
    with live_server(
        sqlite_template, str(tmp_path), SCHEDULER_RETURN_URL_HOSTS=["app.example.com"]
    ) as live:
        yield live


@pytest.fixture
def host_code(panel: LiveServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The page's block, executed with its environment: the panel's URL and an operator
    token made as the page says."""
    with panel.app.app_context():
        _, secret = tokens.create_operator_token("host-app", None, Actor.cli(), utcnow())
        db.session.remove()
    monkeypatch.setenv("SCHEDULER_URL", panel.url)
    monkeypatch.setenv("SCHEDULER_OPERATOR_TOKEN", secret)
    namespace: dict[str, Any] = {"__name__": "host"}
    exec(compile(page_integration(), str(PAGE), "exec"), namespace)
    return namespace


def csrf_of(page: str) -> str:
    found = re.search(r'<meta name="csrf-token" content="([^"]+)"', page)
    assert found
    return found.group(1)


def test_the_embed_page_integration_runs_as_written(
    panel: LiveServer, host_code: dict[str, Any]
) -> None:
    customer = SimpleNamespace(slug="acme", name="Acme Inc.", time_zone="America/Chicago")
    user = SimpleNamespace(email="pat@acme.example")
    sign_up: Callable[[Any], None] = host_code["on_customer_sign_up"]
    sign_up(customer)
    with panel.app.app_context():
        tenant = db.session.query(Tenant).filter_by(slug="acme").one()
        assert (tenant.name, tenant.time_zone) == ("Acme Inc.", "America/Chicago")
        db.session.remove()
    redirect = host_code["schedules"](customer, user)
    assert redirect.status_code == 302
    link = redirect.headers["Location"]
    assert link.startswith(panel.url + "/sign-in/acme/")
    browser = requests.Session()
    page = browser.get(link, timeout=10)
    assert page.status_code == 200 and "Sign in to Acme Inc." in page.text
    landed = browser.post(link, data={"csrf_token": csrf_of(page.text)}, timeout=10)
    assert landed.status_code == 200 and landed.url == panel.url + "/"
    assert "pat@acme.example" in landed.text and "Acme Inc." in landed.text
    assert "Back to app.example.com" in landed.text
    assert browser.get(link, timeout=10).status_code == 410  # used
    with panel.app.app_context():
        member = db.session.query(Membership).join(User).filter(User.email == user.email).one()
        assert member.role == "admin" and member.tenant.slug == "acme"
        db.session.remove()
