"""`maintenance.prune_runs`: the retention of run history (system scope)."""

from __future__ import annotations

from pydantic import BaseModel
from sqlalchemy.orm import Session

from webapp.catalog import retention
from webapp.catalog.context import JobContext
from webapp.database import utcnow


class PruneParams(BaseModel):
    pass


def prune_runs(ctx: JobContext, params: PruneParams) -> None:
    """Folds runs past their retention into daily roll-ups and deletes them (see retention)."""
    run_days = ctx.setting("SCHEDULER_RUN_RETENTION_DAYS", int)
    rollup_days = ctx.setting("SCHEDULER_ROLLUP_RETENTION_DAYS", int)
    if not isinstance(ctx.db, Session):
        raise RuntimeError("maintenance.prune_runs needs a database session")
    report = retention.prune(
        ctx.db, utcnow(), run_days, rollup_days, check_timeout=ctx.check_timeout
    )
    ctx.log(report.summary())
