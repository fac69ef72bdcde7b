"""An operator's job module, as the tests load it through SCHEDULER_JOB_MODULES."""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from webapp.catalog import Catalog, JobContext

catalog = Catalog()


class ReportParams(BaseModel):
    recipients: int = Field(default=1, ge=1, le=50, title="Recipients")
    fmt: Literal["pdf", "csv"] = Field(default="pdf", title="Format")


@catalog.job("sample.report", title="Send a report", params=ReportParams)
def report(ctx: JobContext, params: ReportParams) -> None:
    ctx.log(f"report for {params.recipients} as {params.fmt}")


catalog.register_default(
    "sample.nightly-report",
    "sample.report",
    "0 2 * * *",
    args={"fmt": "csv"},
    name="Nightly report",
)


class SlowParams(BaseModel):
    seconds: float = Field(default=30, ge=0, le=600)
    pid_file: str = Field(default="", description="Where to write the job's process id.")


@catalog.job("sample.slow", title="Run past the timeout", params=SlowParams, timeout=0.5)
def slow(ctx: JobContext, params: SlowParams) -> None:
    """Ignores its deadline: sleeps in small steps until its own time is up."""
    if params.pid_file:
        Path(params.pid_file).write_text(str(os.getpid()))
    end = time.monotonic() + params.seconds
    while time.monotonic() < end:
        time.sleep(0.05)


@catalog.job("sample.cooperative", title="Stop at the deadline", timeout=0.3)
def cooperative(ctx: JobContext, params: BaseModel) -> None:
    """Long work in steps, checking the deadline between them, as jobs should."""
    ctx.log("started")
    while True:
        ctx.check_timeout()
        time.sleep(0.01)


@catalog.job("sample.settings", title="Show the settings a job gets")
def settings(ctx: JobContext, params: BaseModel) -> None:
    ctx.log(",".join(sorted(ctx.config)))


class ChattyParams(BaseModel):
    word: str
    lines: int = Field(default=20, ge=1, le=1000)


# Two sample.chatty jobs take turns at this barrier, so that their writes interleave.
CHATTY_TURNS = threading.Barrier(2)


@catalog.job("sample.chatty", title="Print and log in turns", params=ChattyParams)
def chatty(ctx: JobContext, params: ChattyParams) -> None:
    for _ in range(params.lines):
        CHATTY_TURNS.wait(timeout=10)
        print(params.word)
        ctx.log(params.word)


@catalog.job("sample.printer", title="Print to stdout")
def printer(ctx: JobContext, params: BaseModel) -> None:
    print("printed by the job")


@catalog.job("sample.collector", title="Show what the garbage collector walks")
def collector(ctx: JobContext, params: BaseModel) -> None:
    print(f"walked={len(gc.get_objects())} frozen={gc.get_freeze_count()}")
