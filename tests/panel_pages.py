"""Every page of the panel with the demo's content, for the phone-width and axe-core browser
tests: one live server and one Chromium per test module, a logged-in context per width."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select

from tests.browser_support import LiveServer, live_server
from tests.conftest import PASSWORD, make_run, make_schedule
from webapp.api.openapi import EXAMPLE_CALENDAR
from webapp.extensions import db
from webapp.models import Membership, Schedule, User
from webapp.services.accounts import add_user, create_tenant
from webapp.services.audit import Actor
from webapp.services.calendars import create_calendar
from webapp.services.demo import seed_demo_schedules
from webapp.services.tokens import create_operator_token

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
WIDTHS = {"phone": PHONE, "desktop": DESKTOP}
ADMIN = "admin@demo.example"
NO_TENANT = "newcomer@demo.example"  # a user in no tenant: the "No tenant yet" page
# A realistic long address (40 characters), in both tenants and an operator: the fullest header.
LONG_EMAIL = "jacqueline.fitzgerald@ops.acmeco.example"


@dataclass
class DemoPages:
    """The paths of every kind of page, on a tenant seeded like `make run`'s demo."""

    server: LiveServer
    schedule: int  # active, with runs and an audit trail
    paused: int
    failed_run: int
    calendar: int  # holidays, closed days, a window

    def logged_in(self) -> dict[str, str]:
        """Name -> path of the pages an admin sees."""
        return {
            "schedules": "/",
            "new schedule": "/schedules/new",
            "edit schedule": f"/schedules/{self.schedule}/edit",
            "schedule": f"/schedules/{self.schedule}",
            "paused schedule": f"/schedules/{self.paused}",
            "resume": f"/schedules/{self.paused}/resume",
            "backfill": f"/schedules/{self.paused}/backfill"  # with its preview
            "?from=2026-01-05T06:00&to=2026-01-05T11:00",
            "next runs": "/upcoming",
            "run history": "/runs",
            "run": f"/runs/{self.failed_run}",
            "audit log": "/audit",
            "api tokens": "/tokens",
            "calendars": "/calendars",
            "calendar": f"/calendars/{self.calendar}?year=2027",
            "api reference": "/api/docs",
            "two-factor login": "/account/two-factor",
            # The pages behind htmx's fragments, for a browser without JavaScript.
            "run status": f"/runs/{self.failed_run}/status",
            "schedule filter": "/runs/schedule-options?schedule_q=zz",
            "job parameters": "/schedules/form/params?job=demo.echo",
            "cron preview": "/schedules/form/preview?cron=30+2+*+*+*&time_zone=America/New_York",
            # Fridays under the calendar: one moved past the winter break, one skipped with it.
            "calendar preview": "/schedules/form/preview?cron=0+9+*+*+5"
            "&time_zone=America/Los_Angeles&calendar=us-business"
            "&calendar_policy=next_business_day&preview_from=2027-12-20",
            "name check": "/schedules/form/name?name=Morning+hello",
            "not found": "/schedules/999999",
            "bad request": "/runs?before=x",
        }


@contextmanager
def demo_pages(sqlite_template: str, directory: str) -> Iterator[DemoPages]:
    """A live server with the demo's content."""
    with live_server(sqlite_template, directory) as server:
        yield seed_demo_pages(server)
        with server.app.app_context():
            db.engine.dispose()


def seed_demo_pages(server: LiveServer) -> DemoPages:
    """The demo tenant, plus enough schedules, runs and audit events that every list pages."""
    now = datetime.now(UTC)
    with server.app.app_context():
        tenant = create_tenant("demo", "Demo Company", "Europe/Berlin")
        add_user(ADMIN, "demo", "admin", PASSWORD)
        # A second tenant, so that the header shows the switcher ("Demo" sorts first: current).
        create_tenant("other", "Zenith Holdings, a Tenant With A Long Name", "UTC")
        add_user(ADMIN, "other", "viewer", None)
        add_user(LONG_EMAIL, "demo", "admin", PASSWORD, operator=True)
        add_user(LONG_EMAIL, "other", "viewer", None)
        admin = db.session.scalar(select(User).where(User.email == ADMIN))
        assert admin is not None
        add_user(NO_TENANT, "demo", "viewer", PASSWORD)
        newcomer = select(User.id).where(User.email == NO_TENANT).scalar_subquery()
        db.session.execute(delete(Membership).where(Membership.user_id == newcomer))
        seed_demo_schedules(tenant, admin, now)
        # Weekly, three days from now (0 = Sunday): never within Next runs' 24 hours, which 50
        # fires at one time would fill (at "0 9 * * 1", every Sunday 14:00 to Monday 14:00 UTC).
        weekday = (now + timedelta(days=3)).isoweekday() % 7
        for number in range(50):  # a second page of schedules and of audit events
            make_schedule(
                tenant,
                f"Zz extra {number:02}",
                by=admin,
                now=now,
                args={"message": "extra"},
                cron=f"0 9 * * {weekday}",
                time_zone="America/New_York",
            )
        mine = select(Schedule).where(Schedule.tenant_id == tenant.id).order_by(Schedule.id)
        schedules = list(db.session.scalars(mine))
        active = next(s for s in schedules if s.active and s.name == "Morning hello")
        paused = next(s for s in schedules if not s.active)
        for minutes in range(60):  # a second page of runs
            make_run(active, "succeeded", 30 + minutes)
        failed = make_run(
            active,
            "failed",
            20,
            trigger="manual",
            error="Traceback (most recent call last):\n"
            + "  a frame of the job\n" * 40
            + "RuntimeError: upstream returned 503 "
            + "x" * 200,
            output="a long line of output " * 30,
        )
        db.session.commit()
        calendar = create_calendar(tenant, EXAMPLE_CALENDAR, Actor.for_user(admin), now)
        create_operator_token("Host backend", 90, Actor.cli(), now)  # the operator area's list
        pages = DemoPages(server, active.id, paused.id, failed.id, calendar.id)
        db.session.remove()
    return pages
