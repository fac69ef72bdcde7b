"""`flask schedule ...`: schedules as data (import, export) and one-off runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import IO
from zoneinfo import ZoneInfo

import click
from flask.cli import AppGroup

from webapp import cron
from webapp.cli import reports_errors
from webapp.database import utcnow
from webapp.services import accounts
from webapp.services.audit import Actor
from webapp.services.schedules import find_schedule, run_now
from webapp.services.transfer import ImportProblems, export_schedules, import_schedules

schedule_cli = AppGroup("schedule", help="Import, export and run schedules.")


@schedule_cli.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--tenant", "tenant_slug", required=True)
@reports_errors
def import_command(file: IO[str], tenant_slug: str) -> None:
    """Create or update (by key) the schedules of a JSON file; all or nothing."""
    tenant = accounts.find_tenant(tenant_slug)
    try:
        result = import_schedules(tenant, file.read(), Actor.cli(), utcnow())
    except ImportProblems as problems:
        for line in problems.problems:
            click.echo(line, err=True)
        click.echo("nothing was imported", err=True)
        raise click.exceptions.Exit(1) from None
    click.echo(
        f"imported into {tenant.slug}: {result.created} created, {result.updated} updated, "
        f"{result.unchanged} unchanged"
    )


@schedule_cli.command("export")
@click.option("--tenant", "tenant_slug", required=True)
@reports_errors
def export_command(tenant_slug: str) -> None:
    """Write the tenant's schedules as JSON to stdout (the import format)."""
    click.echo(export_schedules(accounts.find_tenant(tenant_slug)), nl=False)


@schedule_cli.command("run")
@click.argument("key")
@click.option("--tenant", "tenant_slug", required=True)
@click.option("--at", "at_text", help="When to start: ISO 8601; without an offset, schedule time.")
@reports_errors
def run_command(key: str, tenant_slug: str, at_text: str | None) -> None:
    """Queue a run of a schedule now, or once at a given time."""
    tenant = accounts.find_tenant(tenant_slug)
    schedule = find_schedule(tenant, key)
    at = parse_at(at_text, schedule.time_zone) if at_text else None
    run = run_now(schedule, Actor.cli(), utcnow(), at)
    click.echo(f"run {run.id} {run.status} for {run.scheduled_for:%Y-%m-%dT%H:%M:%SZ}")


def parse_at(text: str, time_zone: str) -> datetime:
    """An ISO 8601 time; without an offset, a wall-clock time in the schedule's zone.

    As for fixed-time fires: a wall time skipped by a DST change means the first instant after
    the gap, one that happens twice means its first occurrence.
    """
    try:
        moment = datetime.fromisoformat(text)
        if not 1970 <= moment.year <= 2999:
            raise OverflowError
        if moment.tzinfo is not None:
            return moment.astimezone(UTC)
        utc = cron.wall_time_to_utc(moment, time_zone)
        if utc.astimezone(ZoneInfo(time_zone)).replace(tzinfo=None) != moment:
            utc += timedelta(microseconds=1)  # the last instant before the gap, plus one
        return utc
    except ValueError:
        message = f"{text!r} is not an ISO 8601 date and time"
    except OverflowError:
        message = f"{text!r} is outside the years 1970 to 2999"
    raise click.BadParameter(message, param_hint="--at")
