"""The browser tests' server and Chromium: the real app on a free port, Debian's Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from werkzeug.serving import make_server

from tests.conftest import IN_CI, PASSWORD, migrated_app

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def require_chromium() -> None:
    if not os.path.exists(CHROMIUM):
        if IN_CI:
            pytest.fail(f"CI=true needs Chromium at {CHROMIUM}")
        pytest.skip(f"Chromium is not installed at {CHROMIUM}")


@dataclass
class LiveServer:
    app: Flask
    url: str
    database_url: str
    database_path: str


def log_in(page: Any, server: LiveServer, email: str) -> None:
    """Logs in through the login form, as a person does, and waits for the landing page."""
    page.goto(server.url + "/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(server.url + "/")


def open_new_schedule(page: Any, server: LiveServer, name: str) -> None:
    """Logged in as alice, the new schedule form with a name and the demo job's message."""
    log_in(page, server, "alice@example.com")
    page.goto(server.url + "/schedules/new")
    page.get_by_label("Name").fill(name)
    page.get_by_label("Message").fill("hello")


def open_account_menu(page: Any) -> None:
    """Opens the header's account menu (the times toggle), as a click does."""
    page.locator("header details.account > summary").click()
    page.get_by_role("button", name="UTC").wait_for()


def log_out(page: Any) -> None:
    """Log out is in the header, in sight (not in the account menu)."""
    page.get_by_role("button", name="Log out").click()


@contextmanager
def live_server(sqlite_template: str, directory: str, **config: object) -> Iterator[LiveServer]:
    """The app (with `config`) served by werkzeug in a thread, on a copy of the migrated SQLite
    template."""
    path = os.path.join(directory, "browser.db")
    shutil.copyfile(sqlite_template, path)
    database_url = f"sqlite:///{path}"
    app = migrated_app(database_url, **config)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield LiveServer(app, f"http://127.0.0.1:{server.server_port}", database_url, path)
    finally:
        server.shutdown()
        thread.join(timeout=10)


PROJECT = Path(__file__).resolve().parent.parent


@contextmanager
def worker_process(server: LiveServer) -> Iterator[subprocess.Popen[bytes]]:
    """A real `flask scheduler worker` on the live server's database, polling every 0.2 s."""
    environment = {
        **os.environ,
        "DATABASE_URL": server.database_url,
        "SECRET_KEY": "test-secret",
        "SCHEDULER_DEMO_JOBS": "1",
        "SCHEDULER_POLL_INTERVAL": "0.2",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "webapp", "scheduler", "worker"],
        cwd=PROJECT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield worker
    finally:
        worker.terminate()
        worker.wait(timeout=30)


@contextmanager
def chromium_browser() -> Iterator[Any]:
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


# Chromium logs every 4xx fetch; a 422 is how the forms answer invalid input, on purpose.
EXPECTED_CONSOLE_ERRORS = ("the server responded with a status of 422",)


@dataclass
class PageErrors:
    """JavaScript errors and console errors (CSP violations among them) seen by a page."""

    messages: list[str] = field(default_factory=list)

    def watch(self, page: Any) -> None:
        page.on("pageerror", lambda error: self.messages.append(f"pageerror: {error}"))
        page.on("console", self.on_console)

    def on_console(self, message: Any) -> None:
        # htmx warns (not errs) when a target matches no element: the request's answer is lost.
        unmatched = message.type == "warning" and "did not match" in message.text
        if message.type != "error" and not unmatched:
            return
        if any(expected in message.text for expected in EXPECTED_CONSOLE_ERRORS):
            return
        self.messages.append(f"console: {message.text} at {message.location.get('url')}")
