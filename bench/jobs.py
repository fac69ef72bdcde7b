"""Jobs for the benchmarks, loaded with SCHEDULER_JOB_MODULES=bench.jobs."""

from __future__ import annotations

import socket
import time

from pydantic import BaseModel, Field

from webapp.catalog import Catalog, JobContext

catalog = Catalog()


class NoopParams(BaseModel):
    pass


class MarkParams(BaseModel):
    port: int = Field(ge=1, le=65535)


@catalog.job("bench.noop", title="Do nothing (benchmarks)", params=NoopParams)
def noop(ctx: JobContext, params: NoopParams) -> None:
    """The cheapest job there is: what is left is the scheduler's own cost."""


@catalog.job("bench.mark", title="Report the start time (benchmarks)", params=MarkParams)
def mark(ctx: JobContext, params: MarkParams) -> None:
    """Sends `run_id wall-clock` over UDP to the benchmark, first thing when the job starts."""
    started = time.time()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.sendto(f"{ctx.run_id} {started!r}".encode(), ("127.0.0.1", params.port))
