"""An operator's job module, as the tests load it through SCHEDULER_JOB_MODULES."""

from __future__ import annotations

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


@catalog.job("sample.slow", title="Run past the timeout", params=SlowParams, timeout=0.5)
def slow(ctx: JobContext, params: SlowParams) -> None:
    """Sleeps in small steps, as Python code that a timeout can interrupt."""
    import time

    deadline = time.monotonic() + params.seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)


@catalog.job("sample.printer", title="Print to stdout")
def printer(ctx: JobContext, params: BaseModel) -> None:
    print("printed by the job")
