"""`flask demo`: the demo tenant that `make run` shows."""

from __future__ import annotations

import click
from sqlalchemy import select

from webapp import accounts
from webapp.cli import reports_errors
from webapp.extensions import db
from webapp.models import Tenant

DEMO_TENANT = "demo"
DEMO_ADMIN = "admin@demo.example"
DEMO_VIEWER = "viewer@demo.example"
DEMO_PASSWORD = "demo-password"


def seed_demo() -> None:
    """Creates the demo tenant and its users; running it again changes nothing."""
    if db.session.scalar(select(Tenant.id).where(Tenant.slug == DEMO_TENANT)) is None:
        accounts.create_tenant(DEMO_TENANT, "Demo Company", "Europe/Berlin")
    for email, role in ((DEMO_ADMIN, "admin"), (DEMO_VIEWER, "viewer")):
        accounts.add_user(email, DEMO_TENANT, role, DEMO_PASSWORD)


@click.command("demo")
@reports_errors
def demo_command() -> None:
    """Create the demo tenant with an admin and a viewer (idempotent)."""
    seed_demo()
    click.echo(f"demo tenant '{DEMO_TENANT}': log in as {DEMO_ADMIN} / {DEMO_PASSWORD}")
    click.echo(f"read-only viewer: {DEMO_VIEWER} / {DEMO_PASSWORD}")
