"""`cron preview`: an expression's description and next fire times, DST rules marked;
`cron parse`: a plain-English schedule as cron.

A plain click group (no app context needed); the app registers it as `flask cron`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice

import click

from webapp import cron
from webapp.cron import CronError, CronSpec, describe, validate, wall_time_to_utc

MAX_COUNT = 1000


@click.group("cron")
def cron_cli() -> None:
    """Cron expression tools."""


def _count(_ctx: click.Context, _param: click.Parameter, value: str) -> int:
    # Checked here rather than by click.IntRange so that bad input gives one line and exit 1.
    if not value.isdigit() or not 1 <= int(value) <= MAX_COUNT:
        raise click.ClickException(f"--count must be a whole number from 1 to {MAX_COUNT}")
    return int(value)


@cron_cli.command("preview")
@click.argument("expression", nargs=-1, required=True)
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone of the schedule.")
@click.option(
    "--after",
    default=None,
    help="Wall-clock time in --tz, ISO 8601 (e.g. 2026-03-08T00:00); default: now.",
)
@click.option(
    "--count", default="5", show_default=True, callback=_count, help="How many fire times."
)
@click.option(
    "--clock-changes",
    is_flag=True,
    help="Then say what the schedule does at the zone's next two clock changes.",
)
def preview(
    expression: tuple[str, ...], tz: str, after: str | None, count: int, clock_changes: bool
) -> None:
    """Describe EXPRESSION and list its next fire times (UTC, then local time).

    Quote the expression ("30 2 * * *") or pass its fields as separate arguments.
    """
    try:
        tz = cron.check_time_zone(tz)  # as the zone is named (`europe/berlin`: Europe/Berlin)
        spec = validate(" ".join(expression), tz)
        start = datetime.now(UTC) if after is None else wall_time_to_utc(_parse_after(after), tz)
        # All lines first: an error half-way must not leave a partial listing behind.
        lines = [format_fire(spec, fire) for fire in islice(spec.iter_fire_times(start), count)]
        if clock_changes:
            changes = cron.clock_changes(spec, start)
            lines += [f"# {change}" for change in changes] or [f"# {cron.no_clock_changes(tz)}"]
    except (CronError, OverflowError) as error:
        message = str(error) if isinstance(error, CronError) else "fire times beyond year 9999"
        raise click.ClickException(message) from None
    warning = cron.zone_warning(tz)
    if warning:
        click.echo(f"warning: {warning}", err=True)
    click.echo(describe(spec))
    for line in lines:
        click.echo(line)


@cron_cli.command("parse")
@click.argument("text", nargs=-1, required=True)
def parse(text: tuple[str, ...]) -> None:
    """Print the cron expression of a plain-English TEXT, e.g. "every weekday at 9:30".

    The expression alone on stdout; exit 1 and one line on stderr when TEXT is not understood
    (what was not, and three phrases that are). Cron passes through, checked.
    """
    try:
        expression = cron.cron_from_input(" ".join(text))
        validate(expression, "UTC")
    except CronError as error:
        raise click.ClickException(str(error)) from None
    click.echo(expression)


def _parse_after(text: str) -> datetime:
    try:
        return cron.parse_typed_time(text)  # the one reading of a typed time
    except CronError as error:
        raise CronError(f"--after: {error}") from None


def format_fire(spec: CronSpec, fire: datetime) -> str:
    """One preview line: `2026-03-08T07:00:00Z  2026-03-08 03:00 EDT (-04:00)`, plus a DST note."""
    local = fire.astimezone(spec.zone)
    line = f"{fire:%Y-%m-%dT%H:%M:%SZ}  {local:%Y-%m-%d %H:%M %Z} ({_offset(local)})"
    note = spec.dst_note(fire)
    return f"{line}  # {note}" if note else line


def _offset(local: datetime) -> str:
    offset = local.utcoffset() or timedelta(0)
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(offset) // timedelta(minutes=1)
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
