"""Overdue schedules and waiting runs as the panel shows them, computed when the page renders.

Not from `schedules.overdue_since` alone: that flag needs a living worker, and a page must say
that a schedule is overdue precisely when none is alive. The rules are those of webapp.models
(`schedule_overdue`'s late half, `run_overdue`), here on rows already loaded, so a page pays no
statement for them; the badge adds the watchdog's flag for a schedule with an overdue run (a
living worker flags it: the Celery sender whose runs no Celery worker takes). The reason a run
waits costs one statement per kind of wait (queued, leased), only on a page that shows one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from webapp.scheduler.watchdog import held_run_reasons, queue_stall_reason


def schedule_late_by(schedule: Any, now: datetime, grace: timedelta) -> timedelta | None:
    """How long ago an overdue schedule was due, or None when it is not overdue: active and
    next_run_at < now - grace (models.schedule_overdue)."""
    due = schedule.next_run_at
    if not schedule.active or due is None or not due < now - grace:
        return None
    return now - due


def run_waiting_for(run: Any, now: datetime, grace: timedelta) -> timedelta | None:
    """How long a run has waited since it could start, or None when it is not overdue: queued,
    or leased and not started, and available_at < now - grace (models.run_overdue). `run`: a
    model or a row."""
    if not (run.status == "queued" or (run.status == "running" and run.started_at is None)):
        return None
    if not run.available_at < now - grace:
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
    """The overdue runs among `runs` (models or rows with id, status, started_at and
    available_at), by id. The reasons are asked only if one of them is overdue: once for the
    queued ones (queue_stall_reason), once for the leased ones (by the worker that holds them:
    a Celery sender's wait for a Celery worker to take them)."""
    overdue = {
        run.id: (run.status, waited)
        for run in runs
        if (waited := run_waiting_for(run, now, grace)) is not None
    }
    if not overdue:
        return {}
    queued = any(status == "queued" for status, _ in overdue.values())
    queue_reason = queue_stall_reason(session, now, lock_ttl) if queued else ""
    held = [run_id for run_id, (status, _) in overdue.items() if status == "running"]
    held_reasons = held_run_reasons(session, held)
    return {
        run_id: Waiting(waited, held_reasons.get(run_id, queue_reason))
        for run_id, (_, waited) in overdue.items()
    }
