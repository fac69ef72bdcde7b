"""A job for the poison-pill tests (loaded through SCHEDULER_JOB_MODULES): its output and its
error hold what no database stores as text, a NUL and a lone surrogate."""

from __future__ import annotations

from pydantic import BaseModel

from webapp.catalog import Catalog, JobContext

catalog = Catalog()
ODD = "a NUL \x00 and a lone surrogate \ud800"


@catalog.job("odd.text", title="Print what no database stores")
def odd_text(ctx: JobContext, params: BaseModel) -> None:
    ctx.log(ODD)
    raise RuntimeError(ODD)
