"""`flask scheduler ...`: the worker and its steps."""

from __future__ import annotations

import click
from flask import current_app
from flask.cli import AppGroup

from webapp.cli import reports_errors
from webapp.config import settings

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

    configure_worker_logging()  # in SCHEDULER_LOG_FORMAT
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    WorkerProcess(app, concurrency or settings(app).SCHEDULER_CONCURRENCY, burst, pool).run()


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

    result = tick(db.session(), current_catalog(), TickSettings.of(settings()))
    click.echo(
        f"fired {result.queued} runs ({result.skipped} skipped, {result.failed} failed, "
        f"{result.already_recorded} already recorded) for {result.claimed} schedules"
    )


@scheduler_cli.command("alive")
@click.option(
    "--max-age",
    type=click.IntRange(1),
    default=None,
    help="Seconds within which the worker must have touched SCHEDULER_LIVENESS_FILE "
    "[default: 2 x SCHEDULER_LOCK_TTL].",
)
def alive_command(max_age: int | None) -> None:
    """Check that this machine's worker process goes round its loop (it touches
    SCHEDULER_LIVENESS_FILE); exit 1 if not. A liveness probe for one worker that reads no
    database: `scheduler health` is the installation's, for alerts."""
    import time

    from webapp.scheduler.executor import liveness_age

    chosen = settings()
    path = chosen.SCHEDULER_LIVENESS_FILE
    if not path:
        click.echo("fail SCHEDULER_LIVENESS_FILE is not set: the worker touches no file")
        raise SystemExit(1)
    limit = max_age or int(2 * chosen.lock_ttl.total_seconds())
    age = liveness_age(path, time.time())
    if age is None:
        click.echo(f"fail {path} does not exist: no worker has started here")
        raise SystemExit(1)
    if age > limit:
        click.echo(f"fail the worker has not gone round its loop for {int(age)} s (over {limit} s)")
        raise SystemExit(1)
    click.echo(f"ok the worker went round its loop {int(max(age, 0))} s ago")


@scheduler_cli.command("health")
@click.option(
    "--max-heartbeat-age",
    type=click.IntRange(1),
    default=None,
    help="Seconds within which a worker must have heartbeated [default: 2 x SCHEDULER_LOCK_TTL].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checks as one JSON object.")
def health_command(max_heartbeat_age: int | None, as_json: bool) -> None:
    """Check the database, the migrations, a worker's heartbeat (and a Celery worker's with
    SCHEDULER_EXECUTOR=celery) and the overdue; exit 1 if any fails (for systemd, Kubernetes or
    any supervisor)."""
    import json
    from datetime import timedelta

    from sqlalchemy.exc import SQLAlchemyError

    from webapp.database import database_now
    from webapp.extensions import db
    from webapp.services import health

    session = db.session()
    chosen = settings()
    checks = {"database": health.database_check(session)}
    if checks["database"].ok:
        max_age = timedelta(seconds=max_heartbeat_age) if max_heartbeat_age else 2 * chosen.lock_ttl
        grace = chosen.overdue_grace
        checks["migrations"] = health.migrations_check(
            session, current_app.extensions["migrate"].directory
        )
        try:
            now = database_now(session)
            checks["worker_heartbeat"] = health.heartbeat_check(session, now, max_age)
            if chosen.uses_celery:
                checks["celery_worker_heartbeat"] = health.heartbeat_check(
                    session, now, max_age, celery=True
                )
            checks["overdue_schedules"] = health.overdue_schedules_check(session, now, grace)
            checks["overdue_runs"] = health.overdue_runs_check(session, now, grace)
        except SQLAlchemyError as error:  # a schema far behind, the connection lost meanwhile
            reason = health.unreachable_reason(error, session)
            checks["scheduler_tables"] = health.Check(False, f"cannot read the tables: {reason}")
        session.rollback()
    healthy = all(check.ok for check in checks.values())
    if as_json:
        click.echo(
            json.dumps(
                {
                    "status": "ok" if healthy else "fail",
                    "checks": {
                        name: {**check.as_json(), "message": check.line}
                        for name, check in checks.items()
                    },
                }
            )
        )
    else:
        for check in checks.values():
            click.echo(f"{'ok' if check.ok else 'fail'} {check.line}")
    if not healthy:
        raise SystemExit(1)
