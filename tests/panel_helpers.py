"""Helpers for the panel's view, crawl and browser tests: the CSRF token of a page, logging in,
a logged-in client and seeded data."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import event
from werkzeug.test import TestResponse

from tests.conftest import PASSWORD, World, make_run, make_schedule
from webapp.config import settings
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Run, Schedule, User
from webapp.services import sessions
from webapp.services.audit import Actor
from webapp.services.schedules import pause_schedule

# Where a page carries its CSRF token: the hidden field of its forms (the login form), or the
# <meta> that htmx sends back as the X-CSRFToken header.
CSRF_TOKEN = {
    "form": re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"'),
    "meta": re.compile(r'<meta name="csrf-token" content="([^"]+)"'),
}
# Words that only alpha's data contains: none may ever appear in a page that charlie sees.
ALPHA_SECRETS = (
    "Alpha nightly report",
    "alpha-secret-message",
    "Alpha paused cleanup",
    "alpha-output-line",
    "alpha-error-text",
    "Alpha Corp",
    "alice@example.com",
    "bob@example.com",
)


def token_in(page: str | TestResponse, where: Literal["form", "meta"] = "form") -> str:
    """The CSRF token in a page's form (or in its <meta>)."""
    text = page if isinstance(page, str) else page.get_data(as_text=True)
    found = CSRF_TOKEN[where].search(text)
    assert found, f"no csrf token in the page's {where}"
    return found.group(1)


def csrf_token(
    client: FlaskClient, url: str = "/login", where: Literal["form", "meta"] = "form"
) -> str:
    """The CSRF token that the page at `url` gives this client: its form's (or its <meta>)."""
    return token_in(client.get(url), where)


def log_in(
    client: FlaskClient, email: str, password: str = PASSWORD, next_url: str = ""
) -> TestResponse:
    """Posts the login form as a browser does, with the form's CSRF token and an optional next."""
    return client.post(
        "/login" + (f"?next={next_url}" if next_url else ""),
        data={"email": email, "password": password, "csrf_token": csrf_token(client)},
    )


class Panel:
    """A test client logged in as one user, sending the CSRF token as htmx does."""

    def __init__(self, app: Flask, user: User) -> None:
        self.client = app.test_client()
        holder = sessions.start(user, utcnow(), sessions.Lifetimes.of(settings(app)))
        db.session.commit()
        with self.client.session_transaction() as session:
            session["_user_id"] = holder.get_id()
            session["_fresh"] = True
        self._token: str | None = None

    def token(self) -> str:
        if self._token is None:
            self._token = csrf_token(self.client, "/login", "meta")
        return self._token

    def get(self, url: str, htmx: bool = False, **kwargs: Any) -> TestResponse:
        headers = {"HX-Request": "true"} if htmx else {}
        return self.client.get(url, headers=headers, **kwargs)

    def post(
        self, url: str, data: dict[str, Any] | None = None, htmx: bool = True, csrf: bool = True
    ) -> TestResponse:
        headers = {}
        if htmx:
            headers["HX-Request"] = "true"
        if csrf:
            headers["X-CSRFToken"] = self.token()
        return self.client.post(url, data=data or {}, headers=headers)


@dataclass
class Seeded:
    report: Schedule  # alpha, active, demo.echo
    paused: Schedule  # alpha, paused
    succeeded: Run
    failed: Run
    queued: Run
    beta_schedule: Schedule
    beta_run: Run


def seed(world: World) -> Seeded:
    """Alpha: two schedules (one paused) with three runs; beta: one schedule with a run."""
    report = make_schedule(
        world.alpha,
        "Alpha nightly report",
        args={"message": "alpha-secret-message"},
        cron="0 2 * * *",
        by=world.alice,
        time_zone="Europe/Berlin",
    )
    paused = make_schedule(
        world.alpha,
        "Alpha paused cleanup",
        job="demo.sleep",
        args={"seconds": 1},
        cron="*/30 * * * *",
        by=world.alice,
        time_zone="Europe/Berlin",
    )
    pause_schedule(paused, Actor.for_user(world.alice))
    beta_schedule = make_schedule(
        world.beta,
        "Beta hourly ping",
        by=world.charlie,
        args={"message": "beta-message"},
        time_zone="America/New_York",
    )
    succeeded = make_run(report, "succeeded", 90, output="alpha-output-line <script>x</script>")
    failed = make_run(report, "failed", 60, error="alpha-error-text <b>bold</b>")
    queued = make_run(report, "queued", 1, trigger="manual")
    beta_run = make_run(beta_schedule, "succeeded", 30, output="beta-output")
    db.session.commit()
    return Seeded(report, paused, succeeded, failed, queued, beta_schedule, beta_run)


@contextmanager
def counted_statements() -> Iterator[list[str]]:
    """The SQL statements sent while the block runs (SQLite's BEGIN included)."""
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(db.engine, "before_cursor_execute", count)


def schedule_form(**changes: str) -> dict[str, str]:
    """The schedule form as posted, with `changes` (None leaves a field out)."""
    values = {
        "name": "Every seven",
        "job": "demo.echo",
        "args.message": "hello <world>",
        "cron": "*/7 * * * *",
        "time_zone": "Europe/Berlin",
        "misfire_policy": "fire_once",
        "overlap_policy": "allow",
        "active": "on",
    }
    values.update(changes)
    return {key: value for key, value in values.items() if value is not None}
