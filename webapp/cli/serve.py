"""`flask serve`: the web panel and one worker together in the foreground (the quick start)."""

from __future__ import annotations

import signal
import subprocess
import sys
from types import FrameType

import click
from flask import current_app
from werkzeug.serving import WSGIRequestHandler, make_server

from webapp.cli.demo import DEMO_ADMIN, DEMO_OPERATOR, DEMO_PASSWORD, DEMO_VIEWER


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option(
    "--port",
    default=5000,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="The port to listen on.",
)
def serve_command(host: str, port: int) -> None:
    """Serve the panel with Flask's server and run a worker beside it; Ctrl-C stops both.

    The panel's requests go to stdout, a line each (`panel GET /runs 200`; static files left
    out), the worker's log to stderr. For production, run the app under a WSGI server and
    `scheduler-worker` processes instead.
    """
    # SIGTERM (kill, a supervisor) and SIGHUP would end this process without its `finally`,
    # leaving the worker firing schedules on its own: both stop the two, as Ctrl-C does. SIGINT
    # too, even where the parent had it ignored (a script's background command): the worker
    # stops on it whatever, and the panel must not go on without it.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    # The port bound first: taken, it fails here, before a worker starts; and the URL is
    # printed once it answers, so that a script that waits for it can open it at once.
    server = make_server(host, port, app, threaded=True, request_handler=PanelRequestHandler)
    worker = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "webapp", "scheduler", "worker"]
    )
    click.echo(f"\n  Scheduler panel: http://{host}:{port}/")
    click.echo(
        f"  Log in as {DEMO_ADMIN} / {DEMO_PASSWORD}"
        f" (viewer: {DEMO_VIEWER}, operator: {DEMO_OPERATOR})\n"
    )
    try:
        server.serve_forever()  # without werkzeug's start-up lines: the URL is printed above
    finally:
        server.server_close()
        worker.terminate()
        worker.wait(timeout=60)


def stop(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # what Ctrl-C raises: the server closes, then the worker stops


class PanelRequestHandler(WSGIRequestHandler):
    """The panel's access log, apart from the worker's lines (stderr): one line a request on
    stdout, `panel GET /runs?status=failed 200`; the static files a page loads are left out."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        path = getattr(self, "path", "")
        if path.startswith("/static/"):
            return
        line = f"panel {self.command} {path} {code}" if path else f"panel {self.requestline}"
        click.echo(line.translate(self._control_char_table))
