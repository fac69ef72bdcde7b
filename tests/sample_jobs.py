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
