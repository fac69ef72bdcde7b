"""`flask serve`: the web panel and one worker together in the foreground (the quick start)."""

from __future__ import annotations

import subprocess
import sys

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
