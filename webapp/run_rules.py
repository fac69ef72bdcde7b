"""The SQL rules about a run's and a schedule's time that several reads share: when a schedule
is late or overdue (the dead-man's switch: the panel, the watchdog, /metrics, `scheduler
health`), when a run is overdue, and when a run was meant to start (its lag)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, CompoundSelect, and_, case, or_, select, union, union_all

from webapp.models import Run, Schedule, run_status_is


def schedule_late(now: datetime, grace: timedelta) -> ColumnElement[bool]:
    """An active schedule whose fire time passed more than `grace` ago without a tick
    dispatching it: the first half of schedule_overdue, served by ix_schedules_due."""
    return and_(Schedule.active, Schedule.next_run_at < now - grace)


def run_overdue_halves(now: datetime, grace: timedelta) -> tuple[ColumnElement[bool], ...]:
    """run_overdue's two halves, each served by its partial index: a queued run (ix_runs_queue:
    no worker is alive, or all are busy), and a run leased and not started (ix_runs_leases:
    held for a free slot of its worker, or sent to Celery and taken by no Celery worker)."""
    could_start = Run.available_at < now - grace
    return (
        and_(run_status_is("queued"), could_start),
        and_(run_status_is("running"), Run.started_at.is_(None), could_start),
    )


def run_overdue(now: datetime, grace: timedelta) -> ColumnElement[bool]:
    """A run that could have started more than `grace` ago and has not: queued, or leased and
    not started (see run_overdue_halves)."""
    return or_(*run_overdue_halves(now, grace))


def overdue_runs(now: datetime, grace: timedelta, *columns: Any) -> CompoundSelect:
    """`columns` of the overdue runs, one SELECT per half of run_overdue, so that each reads its
    partial index rather than the table."""
    return union_all(*(select(*columns).where(half) for half in run_overdue_halves(now, grace)))


def schedule_overdue(now: datetime, grace: timedelta) -> ColumnElement[bool]:
    """The dead-man's switch: an active schedule that is not being run, either late (its fire
    time passed more than `grace` ago without a tick dispatching it) or with a run overdue (one
    that could have started more than `grace` ago and has not: no worker has a free slot, no
    Celery worker takes what is sent). The panel, the watchdog, /metrics, `scheduler health`."""
    with_overdue_run = Schedule.id.in_(overdue_runs(now, grace, Run.schedule_id))
    return or_(schedule_late(now, grace), and_(Schedule.active, with_overdue_run))


def overdue_schedule_ids(now: datetime, grace: timedelta) -> CompoundSelect:
    """The ids of the overdue schedules (schedule_overdue), each half read through its indexes
    (ix_schedules_due; the runs' partial indexes, then the schedules' key): what a count of
    them reads rather than every schedule. A UNION: a schedule in both halves counts once."""
    waiting = overdue_runs(now, grace, Run.schedule_id).subquery()
    return union(
        select(Schedule.id).where(schedule_late(now, grace)),
        select(Schedule.id)
        .join(waiting, waiting.c.schedule_id == Schedule.id)
        .where(Schedule.active),
    )


def meant_to_start() -> ColumnElement[datetime]:
    """When a run was meant to start, which its lag is measured from (the history, a run's
    page, a schedule's charts, the roll-ups, /metrics): its fire time (a Run now's: the click,
    a one-off's: its time), unless its queue set a later start on purpose: a backfill's fire
    times are past by design (it was meant to start when it was queued, available_at), and a
    start after the moment it was queued (available_at past queued_at) is a fire's jitter, a
    fire queued ahead, or a retry's backoff. A late tick sets neither: its lateness is lag."""
    later_on_purpose = or_(Run.trigger == "backfill", Run.available_at > Run.queued_at)
    return case((later_on_purpose, Run.available_at), else_=Run.scheduled_for)
