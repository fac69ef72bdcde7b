"""`maintenance.prune_runs`: the retention of run history (system scope)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from pydantic import BaseModel
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from webapp.catalog.context import JobContext
from webapp.database import utcnow
from webapp.models import RUN_STATUSES, UNFINISHED_STATUSES, Run

FINISHED = tuple(status for status in RUN_STATUSES if status not in UNFINISHED_STATUSES)
BATCH = 5_000


class PruneParams(BaseModel):
    pass


def prune_finished_runs(
    session: Session, older_than: datetime, check_timeout: Callable[[], None] = lambda: None
) -> int:
    """Deletes finished runs that ended before `older_than`, in batches; returns how many.

    `check_timeout` is asked between batches: each batch is committed, so stopping there loses
    nothing, and the next run goes on where this one stopped."""
    total = 0
    while True:
        check_timeout()
        ids = session.scalars(
            select(Run.id)
            .where(Run.status.in_(FINISHED), Run.finished_at < older_than)
            .limit(BATCH)
        ).all()
        if not ids:
            return total
        session.execute(delete(Run).where(Run.id.in_(ids)))
        session.commit()  # short transactions: pruning must not hold the tick up
        total += len(ids)


def prune_runs(ctx: JobContext, params: PruneParams) -> None:
    days = int(str(ctx.config.get("SCHEDULER_RUN_RETENTION_DAYS", 90)))
    if not isinstance(ctx.db, Session):
        raise RuntimeError("maintenance.prune_runs needs a database session")
    removed = prune_finished_runs(ctx.db, utcnow() - timedelta(days=days), ctx.check_timeout)
    ctx.log(f"deleted {removed} runs that finished more than {days} days ago")
