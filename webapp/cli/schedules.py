"""`flask schedule ...`: schedules as data (import, export), one-off runs and backfills."""

from __future__ import annotations

from datetime import datetime
from typing import IO
from zoneinfo import ZoneInfo

import click
from flask.cli import AppGroup

from webapp.cli import refuse_import, report_import, reports_errors
from webapp.database import utcnow
from webapp.services import accounts
from webapp.services.audit import Actor
from webapp.services.backfill import PAUSED_LABEL, backfill, parse_moment, plan_backfill
from webapp.services.cancellation import cancel_run, find_run
from webapp.services.schedules import find_schedule, run_now
from webapp.services.schema import ScheduleError
from webapp.services.transfer import ImportProblems, export_schedules, import_schedules

schedule_cli = AppGroup("schedule", help="Import, export, run and backfill schedules.")


@schedule_cli.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@reports_errors
def import_command(file: IO[str], tenant_slug: str) -> None:
    """Create or update (by key) the schedules of a JSON file; all or nothing."""
    tenant = accounts.find_tenant(tenant_slug)
    try:
        result = import_schedules(tenant, file.read(), Actor.cli(), utcnow())
    except ImportProblems as problems:
        refuse_import(problems.problems)
    report_import(tenant.slug, result)
    if result.calendars is not None:
        click.echo(
            f"calendars: {result.calendars.created} created, {result.calendars.updated} "
            f"updated, {result.calendars.unchanged} unchanged"
        )
    for line in result.warnings:
        click.echo(f"warning: {line}", err=True)


@schedule_cli.command("export")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@click.option(
    "--with-calendars",
    is_flag=True,
    help='An object {"calendars": [...], "schedules": [...]}: the business calendars too.',
)
@reports_errors
def export_command(tenant_slug: str, with_calendars: bool) -> None:
    """Write the tenant's schedules as JSON to stdout (the import format)."""
    tenant = accounts.find_tenant(tenant_slug)
    click.echo(export_schedules(tenant, with_calendars), nl=False)


@schedule_cli.command("run")
@click.argument("key")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@click.option("--at", "at_text", help="When to start: ISO 8601; without an offset, schedule time.")
@reports_errors
def run_command(key: str, tenant_slug: str, at_text: str | None) -> None:
    """Queue a run of a schedule now, or once at a given time."""
    tenant = accounts.find_tenant(tenant_slug)
    schedule = find_schedule(tenant, key)
    at = parse_at(at_text, schedule.time_zone) if at_text else None
    run = run_now(schedule, Actor.cli(), utcnow(), at)
    click.echo(f"run {run.id} {run.status} for {run.scheduled_for:%Y-%m-%dT%H:%M:%SZ}")


@schedule_cli.command("cancel-run")
@click.argument("run_id", type=click.IntRange(min=1))
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@reports_errors
def cancel_run_command(run_id: int, tenant_slug: str) -> None:
    """Cancel a queued run, or ask a running one to stop."""
    run = find_run(accounts.find_tenant(tenant_slug), run_id)
    cancelled = cancel_run(run, Actor.cli(), utcnow())
    if cancelled.outcome == "cancelled":
        click.echo(f"run {run_id} cancelled")
    else:
        click.echo(f"run {run_id} asked to stop")


def parse_at(text: str, time_zone: str) -> datetime:
    """An ISO 8601 time; without an offset, a wall-clock time in the schedule's zone."""
    try:
        return parse_moment(text, time_zone, "at")
    except ScheduleError as error:
        raise click.BadParameter(error.errors["at"], param_hint="--at") from None


@schedule_cli.command("backfill")
@click.argument("key")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@click.option("--from", "start", required=True, help="ISO 8601; without an offset, schedule time.")
@click.option("--to", "end", required=True, help="ISO 8601, not in the future; both ends included.")
@click.option("--dry-run", is_flag=True, help="Print what would be queued; queue nothing.")
@reports_errors
def backfill_command(key: str, tenant_slug: str, start: str, end: str, dry_run: bool) -> None:
    """Queue one run per past fire time of a window (at most 1,000); fire times that already
    have a run are skipped."""
    tenant = accounts.find_tenant(tenant_slug)
    schedule = find_schedule(tenant, key)
    now = utcnow()
    if dry_run:
        plan = plan_backfill(schedule, start, end, now)
    else:
        result = backfill(schedule, start, end, Actor.cli(), now)
        plan = result.plan
    zone = ZoneInfo(plan.time_zone)
    plural = "s" if plan.count != 1 else ""
    click.echo(f"{schedule.key}: {plan.count} fire time{plural} in the window")
    for label, fire in (("first", plan.first), ("last", plan.last)):
        if fire is not None:
            click.echo(f"{label}: {fire.astimezone(zone).isoformat()} ({fire:%Y-%m-%dT%H:%M:%SZ})")
    if plan.paused:
        click.echo(PAUSED_LABEL)
    if dry_run:
        click.echo(f"dry run: would queue {plan.new}, skip {plan.existing} (already have a run)")
    else:
        click.echo(f"queued {result.queued}, skipped {result.skipped} (already had a run)")
