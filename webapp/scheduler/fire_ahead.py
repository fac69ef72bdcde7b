"""Fires queued ahead of their time (SCHEDULER_FIRE_AHEAD), taken back when their schedule
changes before that time.

Such a run was queued with the schedule as it was at the tick: its job, its arguments, its
cadence. An edit, a pause or a delete before the fire time must not let that copy run, so every
change of a schedule goes through `withdraw_fires_ahead` in its own transaction: the queued
run is deleted (it never started: a run is leased only once its fire time has come) and the
schedule's next_run_at goes back to that fire time, as if it had never been claimed. The fire
then happens once, as the schedule is after the change (or not at all, when paused or deleted).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from webapp.database import utcnow
from webapp.models import Run, Schedule
from webapp.scheduler.claims import lock_schedules


def withdraw_fires_ahead(
    session: Session, schedule_ids: Iterable[int], now: datetime | None = None
) -> dict[int, datetime]:
    """Deletes the queued runs of these schedules whose fire time is still to come, sets each
    schedule's next_run_at back to its earliest withdrawn fire time, and returns those times.

    Under the caller's transaction. The schedules are locked first: a tick that claimed one of
    them may be queuing its next fire right now, and that run must be seen (and withdrawn), not
    left queued for a schedule this change pauses or edits. A run a worker is leasing meanwhile
    is no longer queued once the lease commits (PostgreSQL re-checks the row after waiting for
    its lock), so it is never deleted after it started."""
    ids = sorted(set(schedule_ids))
    if not ids:
        return {}
    lock_schedules(session, ids)
    withdrawn = session.execute(
        delete(Run)
        .where(
            Run.schedule_id.in_(ids),
            Run.scheduled_for > (now or utcnow()),
            Run.status == "queued",
            Run.trigger == "schedule",
        )
        .returning(Run.schedule_id, Run.scheduled_for)
        .execution_options(synchronize_session=False)
    ).all()
    first: dict[int, datetime] = {}
    for schedule_id, fire in withdrawn:
        if schedule_id is not None and (schedule_id not in first or fire < first[schedule_id]):
            first[schedule_id] = fire
    for schedule_id, fire in sorted(first.items()):
        session.execute(
            update(Schedule)
            .where(Schedule.id == schedule_id, Schedule.next_run_at > fire)
            .values(next_run_at=fire)
            .execution_options(synchronize_session=False)
        )
    return first
