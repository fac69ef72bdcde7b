"""`flask scheduler ...`: the worker and its steps."""

from __future__ import annotations

import logging

import click
from flask import current_app
from flask.cli import AppGroup

from webapp.cli import reports_errors

scheduler_cli = AppGroup("scheduler", help="Run the scheduler worker.")


@scheduler_cli.command("worker")
@click.option("--concurrency", type=click.IntRange(1, 256), default=None, help="Jobs run at once.")
@click.option("--burst", is_flag=True, help="Exit once nothing is due or queued.")
@reports_errors
def worker_command(concurrency: int | None, burst: bool) -> None:
    """Run a worker until SIGTERM/SIGINT."""
    from webapp.scheduler.worker import WorkerProcess

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    WorkerProcess(app, concurrency or app.config["SCHEDULER_CONCURRENCY"], burst).run()
