"""Run roll-ups: a schedule's runs of a day, folded in before retention deletes them.

Beside `models.py` (which is at its size bound) and part of the same foundation: the names are
a public contract as there."""

from __future__ import annotations

from datetime import date, datetime
from typing import TYPE_CHECKING

from sqlalchemy import Date, Float, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from webapp.database import UTCDateTime, utcnow
from webapp.models import NEVER_REUSE_IDS

if TYPE_CHECKING:
    from webapp.extensions import Base as Model
else:
    from webapp.extensions import db

    Model = db.Model


class RunRollup(Model):
    """One schedule's runs of one UTC day, folded in before `maintenance.prune_runs` deletes
    them: the history's shape outlives its rows (kept SCHEDULER_ROLLUP_RETENTION_DAYS)."""

    __tablename__ = "run_rollups"
    __table_args__ = (
        UniqueConstraint("schedule_id", "day"),
        Index("ix_run_rollups_tenant_day", "tenant_id", "day"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    schedule_id: Mapped[int | None] = mapped_column(ForeignKey("schedules.id", ondelete="SET NULL"))
    job: Mapped[str] = mapped_column(String(200))
    day: Mapped[date] = mapped_column(Date)  # the UTC day of the runs' fire times
    runs: Mapped[int] = mapped_column(Integer, default=0)
    succeeded: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    skipped: Mapped[int] = mapped_column(Integer, default=0)
    # Of the runs that started: seconds from start to finish, and from when each was meant to
    # start (meant_to_start) to its start.
    duration_p50_seconds: Mapped[float | None] = mapped_column(Float)
    duration_p95_seconds: Mapped[float | None] = mapped_column(Float)
    lag_mean_seconds: Mapped[float | None] = mapped_column(Float)
    lag_max_seconds: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
