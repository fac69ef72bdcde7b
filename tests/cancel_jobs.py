"""Jobs for the cancel tests (loaded through SCHEDULER_JOB_MODULES): long work that checks for a
stop request between steps, and the same work that never asks."""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from webapp.catalog import Catalog, JobContext

catalog = Catalog()


class LoopParams(BaseModel):
    seconds: float = Field(default=30.0, ge=0, le=120)


def work(ctx: JobContext, seconds: float, check: bool) -> None:
    ctx.log("started")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check:
            ctx.check_cancelled()
        time.sleep(0.05)
    ctx.log("finished all the work")


@catalog.job("cancel.polite", title="Long work, stops when asked", params=LoopParams, timeout=120)
def polite(ctx: JobContext, params: LoopParams) -> None:
    work(ctx, params.seconds, check=True)


@catalog.job("cancel.stubborn", title="Long work, never asks", params=LoopParams, timeout=120)
def stubborn(ctx: JobContext, params: LoopParams) -> None:
    work(ctx, params.seconds, check=False)
