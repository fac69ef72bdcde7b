"""Jobs for the Celery tests (loaded through SCHEDULER_JOB_MODULES): a failure retried soon, a
job that ignores its deadline, and one that even swallows Celery's soft time limit."""

from __future__ import annotations

import time

from pydantic import BaseModel

from webapp.catalog import Catalog, JobContext

catalog = Catalog()


@catalog.job("celery.flaky", title="Fail, retried soon", max_attempts=2, retry_backoff=0.2)
def flaky(ctx: JobContext, params: BaseModel) -> None:
    raise RuntimeError(f"attempt {ctx.attempt} failed")


@catalog.job("celery.stubborn", title="Run past the timeout", timeout=0.5)
def stubborn(ctx: JobContext, params: BaseModel) -> None:
    """Ignores its deadline; stopped by Celery's soft time limit."""
    while True:
        time.sleep(0.05)


@catalog.job("celery.unstoppable", title="Swallow the soft limit", timeout=0.5)
def unstoppable(ctx: JobContext, params: BaseModel) -> None:
    """Catches even the soft limit's exception: only Celery's hard limit ends it."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            time.sleep(0.05)
        except Exception:
            continue
