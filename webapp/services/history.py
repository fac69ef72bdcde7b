"""The run history's filters: one rule for the panel's history page and the API's run list."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import ColumnElement, Integer, Select, String, bindparam

from webapp.database import UTCDateTime
from webapp.models import Run


def local_midnight(day: date, time_zone: str) -> datetime:
    return datetime.combine(day, time.min, tzinfo=ZoneInfo(time_zone))


# Each filter's condition on a parameter of its name. A statement built once for a set of
# filters (the panel's history) takes their values at execution: filter_values.
CONDITIONS: dict[str, Callable[[Any], ColumnElement[bool]]] = {
    "schedule_id": lambda value: Run.schedule_id == bindparam("schedule_id", value, Integer),
    "status": lambda value: Run.status == bindparam("status", value, String),
    "trigger": lambda value: Run.trigger == bindparam("trigger", value, String),
    "since": lambda value: Run.scheduled_for >= bindparam("since", value, UTCDateTime),
    "until": lambda value: Run.scheduled_for < bindparam("until", value, UTCDateTime),
    "before": lambda value: Run.id < bindparam("before", value, Integer),
}


def filter_values(
    time_zone: str,
    *,
    schedule_id: int | None = None,
    status: str | None = None,
    trigger: str | None = None,
    since: date | None = None,
    until: date | None = None,
    before: int | None = None,
) -> dict[str, Any]:
    """The parameters of the filters given: one schedule, a status, a trigger, fire times from
    the local day `since` through the local day `until` (in `time_zone`), and ids below
    `before` (the next page, newest first)."""
    values: dict[str, Any] = {
        "schedule_id": schedule_id,
        "status": status or None,
        "trigger": trigger or None,
        "since": local_midnight(since, time_zone) if since else None,
        "until": local_midnight(until + timedelta(days=1), time_zone) if until else None,
        "before": before,
    }
    return {name: value for name, value in values.items() if value is not None}


def run_conditions(values: Mapping[str, Any]) -> list[ColumnElement[bool]]:
    """The conditions of the filters named in `values` (see filter_values), bound to them."""
    return [CONDITIONS[name](value) for name, value in values.items()]


def filter_runs(query: Select[Run], values: Mapping[str, Any]) -> Select[Run]:
    """`query` narrowed by the filters of `values` (filter_values)."""
    return query.where(*run_conditions(values))
