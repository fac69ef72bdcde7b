"""Overdue schedules and waiting runs as the panel shows them, computed when the page renders.

Not from `schedules.overdue_since`: that flag needs a living worker, and a page must say that a
schedule is overdue precisely when none is alive. The rules are those of webapp.models
(`schedule_overdue`, `run_overdue`), here on rows already loaded, so a page pays no statement
for them; the reason a run waits costs one, only on a page that shows a waiting run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from webapp.scheduler.watchdog import queue_stall_reason


def schedule_late_by(schedule: Any, now: datetime, grace: timedelta) -> timedelta | None:
    """How long ago an overdue schedule was due, or None when it is not overdue: active and
    next_run_at < now - grace (models.schedule_overdue)."""
    due = schedule.next_run_at
    if not schedule.active or due is None or not due < now - grace:
        return None
    return now - due


def run_waiting_for(run: Any, now: datetime, grace: timedelta) -> timedelta | None:
    """How long a queued run has waited since it could start, or None when it is not overdue:
    queued and available_at < now - grace (models.run_overdue). `run`: a model or a row."""
    if run.status != "queued" or not run.available_at < now - grace:
        return None
    return now - run.available_at


@dataclass(frozen=True)
class Waiting:
    """An overdue queued run: how long it has waited since it could start, and why."""

    waited: timedelta
    reason: str

    @property
    def minutes(self) -> int:
        """Whole minutes waited, as the panel says it ("not started 12 min after it was due")."""
        return int(self.waited.total_seconds() // 60)


def waiting_runs(
    session: Session, runs: Iterable[Any], now: datetime, grace: timedelta, lock_ttl: timedelta
) -> dict[int, Waiting]:
    """The overdue queued runs among `runs` (models or rows with id, status and available_at),
    by id. The reason is asked once (one statement), and only if one of them is overdue."""
    waited = {run.id: run_waiting_for(run, now, grace) for run in runs}
    overdue = {run_id: time for run_id, time in waited.items() if time is not None}
    if not overdue:
        return {}
    reason = queue_stall_reason(session, now, lock_ttl)
    return {run_id: Waiting(time, reason) for run_id, time in overdue.items()}
