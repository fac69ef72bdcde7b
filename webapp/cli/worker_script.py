"""The `scheduler-worker` console script: the same as `flask --app webapp scheduler worker`."""

from __future__ import annotations

import sys

import click

from webapp.cli.scheduler import scheduler_cli


def main() -> None:
    from flask.cli import ScriptInfo

    from webapp import create_app

    info = ScriptInfo(create_app=create_app)
    worker = scheduler_cli.get_command(click.Context(scheduler_cli), "worker")
    assert worker is not None
    sys.exit(worker.main(args=sys.argv[1:], prog_name="scheduler-worker", obj=info))
