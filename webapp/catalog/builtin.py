"""The jobs that ship with the scheduler, registered by `register_builtin_jobs`.

Registration is a function rather than an import side effect, so that each app (and each test)
builds a catalog of its own.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from webapp.catalog.context import JobContext
from webapp.catalog.maintenance import PruneParams, prune_runs
from webapp.catalog.registry import Catalog
from webapp.catalog.webhook import WebhookParams, webhook


class EchoParams(BaseModel):
    message: str = Field(description="Written to the run's output.")


class SleepParams(BaseModel):
    seconds: float = Field(ge=0, le=3600, description="How long the run lasts.")


class FailParams(BaseModel):
    message: str = Field(default="Failed on purpose", description="The error the run fails with.")


def echo(ctx: JobContext, params: EchoParams) -> None:
    ctx.log(params.message)


def sleep(ctx: JobContext, params: SleepParams) -> None:
    """Does nothing for the given seconds; asked to stop, it stops at once (the run ends
    cancelled), and it stops at its deadline (the run ends timed out)."""
    if ctx.stop.wait(min(params.seconds, max(ctx.seconds_left(), 0.0))):
        ctx.log("Asked to stop: stopped early")
        ctx.check_cancelled()
    ctx.check_timeout()


def fail(ctx: JobContext, params: FailParams) -> None:
    raise RuntimeError(params.message)


def register_builtin_jobs(catalog: Catalog, demo: bool) -> None:
    """Registers the bundled jobs; the demo jobs only when `demo` (SCHEDULER_DEMO_JOBS=1)."""
    catalog.job(
        "http.webhook",
        title="Call a webhook",
        description="Sends one HTTP request to an allowed host; fails on an unexpected status.",
        params=WebhookParams,
        max_attempts=3,
        retry_backoff=60.0,
        timeout=300.0,  # a backstop: SCHEDULER_WEBHOOK_TIMEOUT bounds the whole request
    )(webhook)
    catalog.job(
        "maintenance.prune_runs",
        title="Prune run history",
        description=(
            "Folds finished runs older than their retention (the tenant's, or "
            "SCHEDULER_RUN_RETENTION_DAYS) into daily roll-ups, then deletes them."
        ),
        params=PruneParams,
        scope="system",
        timeout=3600.0,
    )(prune_runs)
    catalog.register_default(
        "maintenance.prune_runs",
        "maintenance.prune_runs",
        "17 3 * * *",
        scope="system",
        time_zone="UTC",
        name="Prune run history",
    )
    if not demo:
        return
    catalog.job(
        "demo.echo",
        title="Echo a message",
        description="Writes the message to the run's output.",
        params=EchoParams,
    )(echo)
    catalog.job(
        "demo.sleep",
        title="Sleep for a while",
        description="Does nothing for the given number of seconds.",
        params=SleepParams,
        max_attempts=2,  # so that the demo shows a run taken over after its worker died
        retry_backoff=1.0,
    )(sleep)
    catalog.job(
        "demo.fail",
        title="Fail on purpose",
        description="Raises an error, to show what a failed run looks like.",
        params=FailParams,
    )(fail)
