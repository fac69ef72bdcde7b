"""The panel inside another site's page: a host application on another origin (localhost, while
the panel is 127.0.0.1: another site, so the panel's cookies are third-party there) frames it,
signs its customer in by a one-time link, and the customer creates a schedule and runs it. Without
SCHEDULER_FRAME_ANCESTORS the browser refuses to show the panel in the frame."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask, redirect
from werkzeug.serving import make_server
from werkzeug.wrappers import Response

from tests.browser_support import (
    LiveServer,
    PageErrors,
    live_server,
    require_chromium,
    worker_process,
)
from webapp.database import utcnow
from webapp.extensions import db
from webapp.services.accounts import create_tenant
from webapp.services.audit import Actor
from webapp.services.tokens import create_operator_token

pytestmark = pytest.mark.browser

HOST_PAGE = """<!doctype html>
<html lang="en"><head><title>Acme</title><link rel="icon" href="data:,"></head>
<body><h1>Acme</h1>
<iframe src="/schedules" title="Schedules" width="1280" height="900"></iframe></body>
</html>"""

ACCOUNT_PAGE = """<!doctype html>
<html lang="en"><head><title>Acme account</title><link rel="icon" href="data:,"></head>
<body><h1>Your Acme account</h1></body></html>"""


@contextmanager
def host_application(link: Callable[[], str]) -> Iterator[str]:
    """The host's site on localhost and a free port: its page frames its own /schedules, which
    redirects to a new sign-in link (`link()`), as docs/how-to/embed.md's integration does."""
    host = Flask("host")

    @host.get("/")
    def home() -> str:
        return HOST_PAGE

    @host.get("/schedules")
    def schedules() -> Response:
        return redirect(link(), 303)

    @host.get("/account")
    def account() -> str:
        return ACCOUNT_PAGE

    server = make_server("localhost", 0, host, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


class Links:
    """The host's back end: asks the panel's operator API for a sign-in link."""

    def __init__(self) -> None:
        self.panel: LiveServer | None = None
        self.secret = ""
        self.host = ""

    def __call__(self) -> str:
        assert self.panel is not None
        asked = {
            "tenant": "acme",
            "email": "carol@acme.example",
            "role": "admin",
            "return_url": f"{self.host}/account",
        }
        made = requests.post(
            f"{self.panel.url}/api/v1/admin/sign-in-links",
            json=asked,
            headers={"Authorization": f"Bearer {self.secret}"},
            timeout=10,
        )
        made.raise_for_status()
        url: str = made.json()["url"]
        return url


@contextmanager
def framed_panel(
    sqlite_template: str, directory: Path, **config: Any
) -> Iterator[tuple[str, LiveServer]]:
    """The host's page and the panel, with tenant acme. `config` over the panel's settings; a
    callable value gets the host's origin."""
    require_chromium()
    links = Links()
    with host_application(links) as host:
        links.host = host
        chosen = {name: value(host) if callable(value) else value for name, value in config.items()}
        with live_server(sqlite_template, str(directory), **chosen) as panel:
            links.panel = panel
            with panel.app.app_context():
                create_tenant("acme", "Acme Customer 42", "UTC")
                _, links.secret = create_operator_token("acme host", None, Actor.cli(), utcnow())
                db.session.remove()
            yield host, panel


def test_the_host_frames_the_panel_signs_in_by_link_and_runs_a_schedule(
    new_page: Any, sqlite_template: str, tmp_path: Path, errors: PageErrors
) -> None:
    with (
        framed_panel(
            sqlite_template,
            tmp_path,
            SCHEDULER_FRAME_ANCESTORS=lambda host: [host],
            SCHEDULER_RETURN_URL_HOSTS=["localhost"],
        ) as (host, panel),
        worker_process(panel),
    ):
        page = new_page
        page.goto(host + "/")
        frame = page.frame_locator("iframe")
        frame.get_by_role("heading", name="Sign in to Acme Customer 42").wait_for()
        frame.get_by_role("button", name="Continue").click()
        frame.get_by_role("link", name="New schedule").click()
        frame.get_by_label("Name").fill("Framed echo")
        frame.get_by_label("Message").fill("hello from the frame")
        frame.get_by_label("Cron expression").fill("*/7 * * * *")
        frame.locator("#cron-preview").get_by_text("Every 7 minutes").wait_for()
        frame.get_by_role("button", name="Save").click()
        frame.get_by_text("Schedule “Framed echo” created.").wait_for()
        frame.get_by_role("button", name="Run now").first.click()
        frame.locator(".badge-succeeded").first.wait_for(timeout=30_000)
        assert page.url == host + "/"  # all of it inside the frame
        cookies = {c["name"]: c for c in page.context.cookies(panel.url)}
        assert cookies["session"]["sameSite"] == "None" and cookies["session"]["secure"]
        host_name = host.removeprefix("http://")
        frame.get_by_role("link", name=f"Back to {host_name}").click()
        page.get_by_role("heading", name="Your Acme account").wait_for()
        assert page.url == host + "/account"  # the whole window, not the frame
        assert errors.messages == []


def test_without_frame_ancestors_the_framed_panel_is_refused(
    new_page: Any, sqlite_template: str, tmp_path: Path
) -> None:
    with framed_panel(sqlite_template, tmp_path, SCHEDULER_RETURN_URL_HOSTS=["localhost"]) as (
        host,
        _panel,
    ):
        page = new_page
        with page.expect_console_message(lambda m: "frame-ancestors 'none'" in m.text):
            page.goto(host + "/")
        assert page.frame_locator("iframe").get_by_role("button", name="Continue").count() == 0
