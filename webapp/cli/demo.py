"""`flask demo`: the demo tenant that `make run` shows."""

from __future__ import annotations

import click
from sqlalchemy import select

from webapp.cli import reports_errors
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Tenant
from webapp.services import accounts
from webapp.services.defaults import sync_defaults
from webapp.services.demo import seed_demo_schedules

DEMO_TENANT = "demo"
DEMO_ADMIN = "admin@demo.example"
DEMO_VIEWER = "viewer@demo.example"
# Sees the operator area (every tenant, the workers, fires ahead); a viewer of the demo tenant.
DEMO_OPERATOR = "operator@demo.example"
DEMO_PASSWORD = "demo-password"


def seed_demo() -> None:
    """Creates the demo tenant, its users, schedules and history; running it again adds nothing."""
    if db.session.scalar(select(Tenant.id).where(Tenant.slug == DEMO_TENANT)) is None:
        accounts.create_tenant(DEMO_TENANT, "Demo Company", "Europe/Berlin")
    admin = accounts.add_user(DEMO_ADMIN, DEMO_TENANT, "admin", DEMO_PASSWORD).user
    accounts.add_user(DEMO_VIEWER, DEMO_TENANT, "viewer", DEMO_PASSWORD)
    accounts.add_user(DEMO_OPERATOR, DEMO_TENANT, "viewer", DEMO_PASSWORD, operator=True)
    now = utcnow()
    # Tenant creation makes the default schedules; syncing also brings a demo database made
    # before a default was added up to date, as `flask scheduler sync` would.
    sync_defaults(now)
    seed_demo_schedules(accounts.find_tenant(DEMO_TENANT), admin, now)


@click.command("demo")
@reports_errors
def demo_command() -> None:
    """Create the demo tenant with an admin, a viewer, schedules and history (idempotent)."""
    seed_demo()
    click.echo(f"demo tenant '{DEMO_TENANT}': log in as {DEMO_ADMIN} / {DEMO_PASSWORD}")
    click.echo(f"read-only viewer: {DEMO_VIEWER} / {DEMO_PASSWORD}")
    click.echo(f"operator (every tenant, workers): {DEMO_OPERATOR} / {DEMO_PASSWORD}")
