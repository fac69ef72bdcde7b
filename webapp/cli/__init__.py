"""The operator's command line: `flask --app webapp ...`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, NoReturn, Protocol, TypeVar

import click
from flask import Flask
from sqlalchemy.exc import OperationalError

from webapp.services.accounts import AccountError

F = TypeVar("F", bound=Callable[..., Any])


def reports_errors(command: F) -> F:
    """Turns expected failures into one line on stderr and exit code 1, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (AccountError, ValueError) as error:
            raise click.ClickException(str(error)) from None
        except OperationalError as error:
            reason = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
            raise click.ClickException(f"cannot use the database: {reason}") from None

    return wrapper  # type: ignore[return-value]


class Imported(Protocol):
    """What an import wrote (services.transfer's ImportResult, calendar_files' CalendarImport)."""

    @property
    def created(self) -> int: ...
    @property
    def updated(self) -> int: ...
    @property
    def unchanged(self) -> int: ...


def report_import(tenant_slug: str, result: Imported) -> None:
    """The one line of an import that was written."""
    click.echo(
        f"imported into {tenant_slug}: {result.created} created, {result.updated} updated, "
        f"{result.unchanged} unchanged"
    )


def refuse_import(problems: Iterable[str]) -> NoReturn:
    """An import refused whole: a line on stderr per problem, then that nothing was written, and
    exit code 1."""
    for line in problems:
        click.echo(line, err=True)
    click.echo("nothing was imported", err=True)
    raise click.exceptions.Exit(1)


def our_commands() -> dict[str, click.Command]:
    """The app's commands by the name `flask --app webapp NAME` runs them (docs/reference/cli.md
    is built from these)."""
    from webapp.cli.accounts import tenant_cli, user_cli
    from webapp.cli.calendars import calendar_cli
    from webapp.cli.catalog import catalog_cli
    from webapp.cli.cron import cron_cli
    from webapp.cli.demo import demo_command
    from webapp.cli.scheduler import scheduler_cli, worker_command
    from webapp.cli.schedules import schedule_cli
    from webapp.cli.serve import serve_command
    from webapp.cli.tokens import token_cli

    return {
        "tenant": tenant_cli,
        "user": user_cli,
        "demo": demo_command,
        "scheduler": scheduler_cli,
        # The product brief's name for the worker: the same command object, so the same options.
        "scheduler-worker": worker_command,
        "serve": serve_command,
        "schedule": schedule_cli,
        "catalog": catalog_cli,
        "cron": cron_cli,
        "token": token_cli,
        "calendar": calendar_cli,
    }


def register_commands(app: Flask) -> None:
    for name, command in our_commands().items():
        app.cli.add_command(command, name)
