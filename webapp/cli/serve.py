"""`flask serve`: the web panel and one worker together in the foreground (the quick start)."""

from __future__ import annotations

import signal
import subprocess
import sys
from types import FrameType

import click
from flask import current_app
from werkzeug.serving import run_simple

from webapp.cli.demo import DEMO_ADMIN, DEMO_OPERATOR, DEMO_PASSWORD, DEMO_VIEWER


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=5000, show_default=True, type=click.IntRange(1, 65535))
def serve_command(host: str, port: int) -> None:
    """Serve the panel with Flask's server and run a worker beside it; Ctrl-C stops both.

    For production, run the app under a WSGI server and `scheduler-worker` processes instead.
    """
    # SIGTERM (kill, a supervisor) and SIGHUP would end this process without its `finally`,
    # leaving the worker firing schedules on its own: both stop the two, as Ctrl-C does.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    worker = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "webapp", "scheduler", "worker"]
    )
    click.echo(f"\n  Scheduler panel: http://{host}:{port}/")
    click.echo(
        f"  Log in as {DEMO_ADMIN} / {DEMO_PASSWORD}"
        f" (viewer: {DEMO_VIEWER}, operator: {DEMO_OPERATOR})\n"
    )
    try:
        run_simple(host, port, current_app._get_current_object(), threaded=True)  # type: ignore[attr-defined]
    finally:
        worker.terminate()
        worker.wait(timeout=60)


def stop(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # what Ctrl-C raises: the server closes, then the worker stops
