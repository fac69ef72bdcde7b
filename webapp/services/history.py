"""The run history's filters: one rule for the panel's history page and the API's run list."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import Select

from webapp.models import Run


def local_midnight(day: date, time_zone: str) -> datetime:
    return datetime.combine(day, time.min, tzinfo=ZoneInfo(time_zone))


def filter_runs(
    query: Select[Run],
    time_zone: str,
    *,
    schedule_id: int | None = None,
    status: str | None = None,
    trigger: str | None = None,
    since: date | None = None,
    until: date | None = None,
    before: int | None = None,
) -> Select[Run]:
    """`query` narrowed to one schedule, a status, a trigger, fire times from the local day
    `since` through the local day `until` (in `time_zone`), and ids below `before` (the next
    page, newest first)."""
    if schedule_id is not None:
        query = query.where(Run.schedule_id == schedule_id)
    if status:
        query = query.where(Run.status == status)
    if trigger:
        query = query.where(Run.trigger == trigger)
    if since:
        query = query.where(Run.scheduled_for >= local_midnight(since, time_zone))
    if until:
        query = query.where(
            Run.scheduled_for < local_midnight(until + timedelta(days=1), time_zone)
        )
    if before is not None:
        query = query.where(Run.id < before)
    return query
