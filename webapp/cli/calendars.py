"""`flask calendar ...`: a tenant's business calendars: create, add dates, ranges and windows,
list, show a year's closed days, delete, .ics import, JSON import and export."""

from __future__ import annotations

from typing import IO

import click
from flask.cli import AppGroup
from pydantic import ValidationError

from webapp.cli import refuse_import, report_import, reports_errors
from webapp.cron import FIRST_YEAR, LAST_YEAR
from webapp.cron.business_days import DEFAULT_CLOSED_WEEKDAYS
from webapp.database import utcnow
from webapp.services import accounts
from webapp.services import calendar_files as files
from webapp.services import calendars as service
from webapp.services.audit import Actor
from webapp.services.calendar_schema import CalendarProblems, DayOffIn, WindowIn
from webapp.services.schema import field_errors

calendar_cli = AppGroup("calendar", help="Business calendars: holidays, closed days, windows.")


@calendar_cli.command("create")
@click.argument("key")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@click.option("--name", required=True, help="The calendar's name, as the panel shows it.")
@click.option("--country", help="ISO 3166 code of the public holidays (US, DE, GB...).")
@click.option("--subdivision", help="A subdivision of the country (CA, BY...).")
@click.option(
    "--closed-weekdays",
    default=DEFAULT_CLOSED_WEEKDAYS,
    show_default=True,
    help='Closed days of the week, comma-separated; "" for none.',
)
@reports_errors
def create_command(
    key: str,
    tenant_slug: str,
    name: str,
    country: str | None,
    subdivision: str | None,
    closed_weekdays: str,
) -> None:
    """Create a calendar."""
    tenant = accounts.find_tenant(tenant_slug)
    data = {
        "key": key,
        "name": name,
        "country": country,
        "subdivision": subdivision,
        "closed_weekdays": closed_weekdays,
    }
    calendar = service.create_calendar(tenant, data, Actor.cli(), utcnow())
    click.echo(f"created calendar {calendar.key} for {tenant.slug}")


def parse_span(span: str, label: str) -> DayOffIn | WindowIn:
    """DATE, FROM..TO (dates: closed days) or FROM..TO (local date-times: a window)."""
    first, dots, last = span.partition("..")
    timed = "T" in first or " " in first.strip()
    data = {"from": first.strip(), "to": last.strip() if dots else first.strip(), "label": label}
    model: type[DayOffIn | WindowIn] = WindowIn if timed else DayOffIn
    if timed and not dots:
        raise click.ClickException(f"{span}: a window needs an end, FROM..TO")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        message = "; ".join(dict.fromkeys(field_errors(error, model).values()))
        raise click.ClickException(
            f"{span}: {message} (write 2027-12-24, 2027-12-24..2027-12-31 or "
            "2027-01-10T01:00..2027-01-10T05:00)"
        ) from None


@calendar_cli.command("add")
@click.argument("key")
@click.argument("span", metavar="DATE|FROM..TO")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@click.option("--label", default="", help="Why it is closed (shown with the day).")
@reports_errors
def add_command(key: str, span: str, tenant_slug: str, label: str) -> None:
    """Add a closed date, a range of dates, or a maintenance window (local date-times)."""
    calendar = service.find_calendar(accounts.find_tenant(tenant_slug), key)
    entry = parse_span(span, label)
    added = service.add_entries(calendar, [entry], Actor.cli(), utcnow())
    click.echo(f"{calendar.key}: added {span}" if added else f"{calendar.key}: {span} is there")


@calendar_cli.command("list")
@click.option("--tenant", "tenant_slug", help="Only this tenant's (default: every tenant's).")
@reports_errors
def list_command(tenant_slug: str | None) -> None:
    """List calendars, one per line: tenant, key, name, holidays, closed weekdays, entries
    (tab-separated)."""
    tenant_id = accounts.find_tenant(tenant_slug).id if tenant_slug else None
    for slug, calendar in service.listed_calendars(tenant_id):
        region = "-".join(filter(None, [calendar.country, calendar.subdivision])) or "none"
        fields = [
            slug,
            calendar.key,
            calendar.name,
            region,
            calendar.closed_weekdays or "none",
            str(len(calendar.entries)),
        ]
        click.echo("\t".join(fields))


@calendar_cli.command("show")
@click.argument("key")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@click.option(
    "--year",
    type=click.IntRange(FIRST_YEAR, LAST_YEAR),
    default=None,
    help="The year to show (default: this year in the tenant's zone).",
)
@reports_errors
def show_command(key: str, tenant_slug: str, year: int | None) -> None:
    """A year's closed days with their reasons, then its maintenance windows (default: this
    year in the tenant's zone)."""
    tenant = accounts.find_tenant(tenant_slug)
    calendar = service.find_calendar(tenant, key)
    view = service.year_view(calendar, year or service.this_year(tenant.time_zone, utcnow()))
    for closed in view.days:
        click.echo(f"{closed.day.isoformat()}\t{closed.weekday[:3]}\t{'; '.join(closed.reasons)}")
    for window in view.windows:
        click.echo(f"window\t{window.describe()}")
    click.echo(f"{len(view.days)} closed days in {view.year}", err=True)


@calendar_cli.command("delete")
@click.argument("key")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@reports_errors
def delete_command(key: str, tenant_slug: str) -> None:
    """Delete a calendar (refused while schedules use it)."""
    calendar = service.find_calendar(accounts.find_tenant(tenant_slug), key)
    service.delete_calendar(calendar, Actor.cli())
    click.echo(f"deleted calendar {key}")


@calendar_cli.command("import-ics")
@click.argument("key")
@click.argument("file", type=click.File("rb"))
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@reports_errors
def import_ics_command(key: str, file: IO[bytes], tenant_slug: str) -> None:
    """Add an .ics file's events: all-day ones as closed days, timed ones as windows."""
    calendar = service.find_calendar(accounts.find_tenant(tenant_slug), key)
    data = file.read(files.MAX_ICS_BYTES + 1)
    added = files.import_ics(calendar, data, Actor.cli(), utcnow())
    click.echo(f"{calendar.key}: {added} added from {file.name}")


@calendar_cli.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@reports_errors
def import_command(file: IO[str], tenant_slug: str) -> None:
    """Create or replace (by key) the calendars of a JSON file; all or nothing."""
    tenant = accounts.find_tenant(tenant_slug)
    try:
        result = files.import_calendars(tenant, file.read(), Actor.cli(), utcnow())
    except CalendarProblems as problems:
        refuse_import(f"{field}: {message}" for field, message in problems.errors.items())
    report_import(tenant.slug, result)


@calendar_cli.command("export")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@reports_errors
def export_command(tenant_slug: str) -> None:
    """Write the tenant's calendars as JSON to stdout (the import format)."""
    click.echo(files.export_calendars(accounts.find_tenant(tenant_slug)), nl=False)
