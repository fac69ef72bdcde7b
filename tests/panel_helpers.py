"""Helpers for the panel's view, crawl and browser tests: a logged-in client and seeded data."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Flask
from werkzeug.test import TestResponse

from tests.conftest import World
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Run, Schedule, Tenant, User
from webapp.services import sessions
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleInput, create_schedule, pause_schedule

CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)"')
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


class Panel:
    """A test client logged in as one user, sending the CSRF token as htmx does."""

    def __init__(self, app: Flask, user: User) -> None:
        self.client = app.test_client()
        holder = sessions.start(user, utcnow(), sessions.Lifetimes.of(app.config))
        db.session.commit()
        with self.client.session_transaction() as session:
            session["_user_id"] = holder.get_id()
            session["_fresh"] = True
        self._token: str | None = None

    def token(self) -> str:
        if self._token is None:
            page = self.client.get("/login").get_data(as_text=True)
            found = CSRF_META.search(page)
            assert found, "no csrf-token meta on the page"
            self._token = found.group(1)
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


NOW = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)


def make_run(schedule: Schedule, status: str, minutes_ago: int, **fields: Any) -> Run:
    scheduled = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    finished = status in ("succeeded", "failed")
    run = Run(
        tenant_id=schedule.tenant_id,
        schedule_id=schedule.id,
        job=schedule.job,
        args=schedule.args,
        trigger=fields.pop("trigger", "schedule"),
        scheduled_for=scheduled,
        idempotency_key=f"{schedule.id}:{scheduled.isoformat()}:{status}",
        status=status,
        attempt=1 if status != "queued" else 0,
        queued_at=scheduled,
        available_at=scheduled,
        started_at=scheduled + timedelta(seconds=2) if status != "queued" else None,
        finished_at=scheduled + timedelta(seconds=5) if finished else None,
        **fields,
    )
    db.session.add(run)
    return run


def echo_schedule(tenant: Tenant, user: User, name: str, cron: str) -> Schedule:
    """A `demo.echo` schedule in UTC, created by `user` through the service as the panel does."""
    return create_schedule(
        tenant,
        ScheduleInput(
            name=name, job="demo.echo", args={"message": "m"}, cron=cron, time_zone="UTC"
        ),
        Actor.for_user(user),
        datetime.now(UTC),
    )


def seed(world: World) -> Seeded:
    """Alpha: two schedules (one paused) with three runs; beta: one schedule with a run."""
    alice, charlie = Actor.for_user(world.alice), Actor.for_user(world.charlie)
    now = datetime.now(UTC)
    report = create_schedule(
        world.alpha,
        ScheduleInput(
            name="Alpha nightly report",
            job="demo.echo",
            args={"message": "alpha-secret-message"},
            cron="0 2 * * *",
            time_zone="Europe/Berlin",
        ),
        alice,
        now,
    )
    paused = create_schedule(
        world.alpha,
        ScheduleInput(
            name="Alpha paused cleanup",
            job="demo.sleep",
            args={"seconds": 1},
            cron="*/30 * * * *",
            time_zone="Europe/Berlin",
        ),
        alice,
        now,
    )
    pause_schedule(paused, alice)
    beta_schedule = create_schedule(
        world.beta,
        ScheduleInput(
            name="Beta hourly ping",
            job="demo.echo",
            args={"message": "beta-message"},
            cron="0 * * * *",
            time_zone="America/New_York",
        ),
        charlie,
        now,
    )
    succeeded = make_run(report, "succeeded", 90, output="alpha-output-line <script>x</script>")
    failed = make_run(report, "failed", 60, error="alpha-error-text <b>bold</b>")
    queued = make_run(report, "queued", 1, trigger="manual")
    beta_run = make_run(beta_schedule, "succeeded", 30, output="beta-output")
    db.session.commit()
    return Seeded(report, paused, succeeded, failed, queued, beta_schedule, beta_run)
