"""One schedule's last 30 UTC days, for its page's charts: from the daily roll-ups where the
retention job made one, otherwise aggregated from the runs still in the table.

One statement whatever the history's size: the roll-ups of the window and, after UNION ALL,
one aggregate of the schedule's runs of the window (found by the runs' (schedule_id, ...)
indexes). The median is computed in SQL with window functions, which SQLite and PostgreSQL
both have, so that no run row is ever loaded. The statement is built once (LAST_DAYS, every value a
bound parameter): its date arithmetic is written per dialect when SQLAlchemy compiles it
(SecondsBetween, UtcDay), and building it cost the schedule's page about a tenth of its time
(bench/README).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Date,
    Float,
    Select,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    select,
    union_all,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from webapp.database import UTCDateTime
from webapp.extensions import db
from webapp.models import Run
from webapp.rollup_models import RunRollup
from webapp.run_rules import meant_to_start

DAYS = 30


@dataclass(frozen=True)
class DayStats:
    day: date  # UTC, of the runs' fire times
    runs: int
    succeeded: int
    failed: int
    skipped: int
    duration_p50_seconds: float | None  # of the runs that finished
    lag_mean_seconds: float | None  # meant_to_start to start, of the runs that started
    from_rollup: bool


def window(today: date, days: int = DAYS) -> list[date]:
    """The `days` UTC days ending with `today`, oldest first."""
    return [today - timedelta(days=days - 1 - i) for i in range(days)]


def last_days(schedule_id: int, tenant_id: int | None, now: datetime) -> list[DayStats]:
    """Each of the 30 UTC days up to `now`'s, oldest first; days without runs count zero."""
    days = window(now.astimezone(UTC).date())
    first = days[0]
    rows: Any = db.session.execute(
        LAST_DAYS,
        {
            "schedule_id": schedule_id,
            "tenant_id": tenant_id,
            "first": first,
            "since": datetime.combine(first, time(), UTC),
        },
    )
    found: dict[date, DayStats] = {}
    for row in rows:
        stats = day_stats(*row)
        if stats.day not in found or stats.from_rollup:  # a day rolled up is read from there
            found[stats.day] = stats
    empty = DayStats(first, 0, 0, 0, 0, None, None, False)
    return [found.get(day, replace(empty, day=day)) for day in days]


def days_statement() -> CompoundSelect[Any]:
    """The roll-ups of the window UNION ALL the aggregate of the schedule's runs (parameters
    schedule_id, tenant_id, first day, since), in the dialect's date arithmetic. The roll-ups
    come first, so that their column types (a Date) read both
    parts."""
    rollups = select(
        RunRollup.day,
        RunRollup.runs,
        RunRollup.succeeded,
        RunRollup.failed,
        RunRollup.skipped,
        RunRollup.duration_p50_seconds,
        RunRollup.lag_mean_seconds,
        literal(True).label("from_rollup"),
    ).where(
        RunRollup.schedule_id == bindparam("schedule_id"),
        RunRollup.tenant_id.is_not_distinct_from(bindparam("tenant_id")),
        RunRollup.day >= bindparam("first", type_=Date),
    )
    return union_all(rollups, aggregate_runs())


def day_stats(
    day: date | str,
    runs: int,
    succeeded: int | None,
    failed: int | None,
    skipped: int | None,
    median: Any,
    lag_mean: Any,
    from_rollup: Any,
) -> DayStats:
    # SQLite's date() answers text, PostgreSQL a date; averages may be Decimal.
    when = date.fromisoformat(day) if isinstance(day, str) else day
    return DayStats(
        when,
        int(runs),
        int(succeeded or 0),
        int(failed or 0),
        int(skipped or 0),
        None if median is None else float(median),
        None if lag_mean is None else float(lag_mean),
        from_rollup=bool(from_rollup),
    )


class SecondsBetween(FunctionElement[float]):
    """`SecondsBetween(start, end)`: `end - start` in seconds, in the dialect's own date
    arithmetic."""

    type = Float()
    inherit_cache = True


@compiles(SecondsBetween)
def _seconds_between(element: SecondsBetween, compiler: SQLCompiler, **kw: Any) -> str:
    start, end = element.clauses
    return compiler.process(cast(func.extract("epoch", end - start), Float), **kw)


@compiles(SecondsBetween, "sqlite")
def _seconds_between_sqlite(element: SecondsBetween, compiler: SQLCompiler, **kw: Any) -> str:
    # Stored as UTC text that julianday() reads; its days as a float are exact to about
    # 10 microseconds only: milliseconds are what the charts show anyway.
    start, end = element.clauses
    seconds = func.round((func.julianday(end) - func.julianday(start)) * 86400.0, 3)
    return compiler.process(seconds, **kw)


class UtcDay(FunctionElement[date]):
    """`UtcDay(moment)`: the UTC day of a stored time."""

    type = Date()
    inherit_cache = True


@compiles(UtcDay)
def _utc_day(element: UtcDay, compiler: SQLCompiler, **kw: Any) -> str:
    (moment,) = element.clauses
    return compiler.process(cast(func.timezone("UTC", moment), Date), **kw)


@compiles(UtcDay, "sqlite")
def _utc_day_sqlite(element: UtcDay, compiler: SQLCompiler, **kw: Any) -> str:
    (moment,) = element.clauses
    return compiler.process(func.date(moment), **kw)


def aggregate_runs() -> Select[Any]:
    """Per UTC day since the parameter `since`, of the runs of the parameters schedule_id and
    tenant_id: runs by status, the median duration and the mean lag (the columns of a
    DayStats, from_rollup false)."""
    day = UtcDay(Run.scheduled_for)
    finished = and_(Run.started_at.is_not(None), Run.finished_at.is_not(None))
    duration = case((finished, SecondsBetween(Run.started_at, Run.finished_at)))
    lag = case((Run.started_at.is_not(None), SecondsBetween(meant_to_start(), Run.started_at)))
    # Number each day's durations in order, apart from the runs without one (NULLs sort first
    # on SQLite and last on PostgreSQL), and count them: the median is the middle one or two.
    ranked = (
        select(
            day.label("day"),
            Run.status,
            duration.label("duration"),
            lag.label("lag"),
            func.row_number()
            .over(partition_by=(day, duration.is_(None)), order_by=duration)
            .label("position"),
            func.count(duration).over(partition_by=day).label("finished"),
        )
        .where(
            Run.schedule_id == bindparam("schedule_id"),
            Run.tenant_id.is_not_distinct_from(bindparam("tenant_id")),
            Run.scheduled_for >= bindparam("since", type_=UTCDateTime),
        )
        .subquery()
    )
    middle = and_(
        ranked.c.duration.is_not(None),
        ranked.c.position.in_([(ranked.c.finished + 1) // 2, (ranked.c.finished + 2) // 2]),
    )

    def having(status: str) -> ColumnElement[int]:
        return func.sum(case((ranked.c.status == status, 1), else_=0))

    return select(
        ranked.c.day,
        func.count(),
        having("succeeded"),
        having("failed"),
        having("skipped"),
        func.avg(case((middle, ranked.c.duration))),
        func.avg(ranked.c.lag),
        literal(False),
    ).group_by(ranked.c.day)


LAST_DAYS = days_statement()
