"""`flask schedule ...`, `flask catalog list` and `flask tenant set`: schedules as data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import IO
from zoneinfo import ZoneInfo

import click
from flask import current_app
from flask.cli import AppGroup

from webapp import accounts
from webapp.cli import reports_errors
from webapp.cli.accounts import tenant_cli
from webapp.config import args_limits
from webapp.database import utcnow
from webapp.scheduler import cron
from webapp.services.audit import Actor
from webapp.services.catalog import current_catalog
from webapp.services.schedules import find_schedule, run_now
from webapp.services.transfer import ImportProblems, export_schedules, import_schedules

schedule_cli = AppGroup("schedule", help="Import, export and run schedules.")
catalog_cli = AppGroup("catalog", help="The jobs that schedules may use.")


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


@catalog_cli.command("list")
@reports_errors
def list_catalog() -> None:
    """List the jobs with their scope and parameters."""
    max_arg, max_args = args_limits(current_app.config)
    click.echo(
        f"Arguments: each text at most {max_arg} bytes (UTF-8), all of a schedule's together at "
        f"most {max_args} bytes as JSON (SCHEDULER_MAX_ARG_BYTES, SCHEDULER_MAX_ARGS_BYTES)."
    )
    for spec in current_catalog().jobs():
        click.echo(f"{spec.name}  [{spec.scope}]  {spec.title}")
        for field in spec.form_fields(current_app.config):
            required = "required" if field.required else f"default {field.default!r}"
            choices = f", one of {', '.join(field.choices)}" if field.choices else ""
            bounds = "".join(
                f", {label} {value:g}"
                for label, value in (
                    ("min", field.min),
                    ("max", field.max),
                    ("max length", field.max_length),
                )
                if value is not None
            )
            click.echo(
                f"    {field.name} ({field.kind}, {required}{choices}{bounds}): {field.help}"
            )


@tenant_cli.command("set")
@click.argument("slug")
@click.option("--max-schedules", help="Most schedules the tenant may have; 'default' to clear.")
@click.option("--min-interval", help="Fewest seconds between fires; 'default' to clear.")
@reports_errors
def set_tenant(slug: str, max_schedules: str | None, min_interval: str | None) -> None:
    """Set a tenant's quotas (unset options keep their value)."""
    tenant = accounts.find_tenant(slug)
    limits = {
        "--max-schedules": tenant.max_schedules,
        "--min-interval": tenant.min_interval_seconds,
    }
    for label, given in (("--max-schedules", max_schedules), ("--min-interval", min_interval)):
        if given is None:
            continue
        if given == "default":
            limits[label] = None
        elif given.isascii() and given.isdigit() and int(given) <= accounts.MAX_INTEGER:
            limits[label] = int(given)
        else:
            message = f"{given!r} is not a whole number up to {accounts.MAX_INTEGER} or 'default'"
            raise click.BadParameter(message, param_hint=label)
    tenant = accounts.set_limits(slug, limits["--max-schedules"], limits["--min-interval"])
    shown = {k: "default" if v is None else v for k, v in limits.items()}
    click.echo(
        f"tenant {tenant.slug}: max schedules {shown['--max-schedules']}, "
        f"min interval {shown['--min-interval']}"
    )
