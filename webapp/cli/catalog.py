"""`flask catalog list`: the jobs that schedules may use, with their parameters."""

from __future__ import annotations

import click
from flask.cli import AppGroup

from webapp.catalog.current import current_catalog
from webapp.cli import reports_errors
from webapp.config import settings

catalog_cli = AppGroup("catalog", help="The jobs that schedules may use.")


@catalog_cli.command("list")
@reports_errors
def list_catalog() -> None:
    """List the jobs with their scope and parameters."""
    max_arg, max_args = settings().args_limits
    click.echo(
        f"Arguments: each text at most {max_arg} bytes (UTF-8), all of a schedule's together at "
        f"most {max_args} bytes as JSON (SCHEDULER_MAX_ARG_BYTES, SCHEDULER_MAX_ARGS_BYTES)."
    )
    for spec in current_catalog().jobs():
        click.echo(f"{spec.name}  [{spec.scope}]  {spec.title}")
        for field in spec.form_fields(settings().job_settings()):
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
