"""`flask scheduler ...`: the worker and its steps."""

from __future__ import annotations

import click
from flask import current_app
from flask.cli import AppGroup

from webapp.cli import reports_errors

scheduler_cli = AppGroup("scheduler", help="Run the scheduler worker.")


@scheduler_cli.command("worker")
@click.option("--concurrency", type=click.IntRange(1, 256), default=None, help="Jobs run at once.")
@click.option("--burst", is_flag=True, help="Exit once nothing is due or queued.")
@click.option(
    "--pool",
    type=click.Choice(["thread", "process"]),
    default="thread",
    show_default=True,
    help="Where jobs run: worker threads (cooperative timeouts), or child processes (killed at "
    "their timeout).",
)
@reports_errors
def worker_command(concurrency: int | None, burst: bool, pool: str) -> None:
    """Run a worker until SIGTERM/SIGINT."""
    from webapp.scheduler.logs import configure_worker_logging
    from webapp.scheduler.worker import WorkerProcess

    configure_worker_logging()
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    WorkerProcess(app, concurrency or app.config["SCHEDULER_CONCURRENCY"], burst, pool).run()


@scheduler_cli.command("sync")
@reports_errors
def sync_command() -> None:
    """Create the job modules' default schedules where they are missing (idempotent)."""
    from webapp.database import utcnow
    from webapp.services.defaults import sync_defaults

    created = sync_defaults(utcnow())
    click.echo(f"created {created} default schedules")


@scheduler_cli.command("tick")
@reports_errors
def tick_command() -> None:
    """Run one tick: fire every due schedule, print how many runs were queued."""
    from webapp.catalog.current import current_catalog
    from webapp.extensions import db
    from webapp.scheduler.tick import TickSettings, tick

    result = tick(db.session(), current_catalog(), TickSettings.from_config(current_app.config))
    click.echo(
        f"fired {result.queued} runs ({result.skipped} skipped, {result.failed} failed, "
        f"{result.already_recorded} already recorded) for {result.claimed} schedules"
    )
