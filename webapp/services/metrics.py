"""The figures /metrics exports, read from the database at scrape time, and their Prometheus form.

Every figure lives in the database, so any web process answers for the whole system. Each query
is bounded whatever the size of the tables: the queue, the leases, the overdue schedules and the
notification outbox are read through their partial indexes and counted up to COUNT_LIMIT; the
recent figures (fires, outcomes, lag, duration) come from the newest RECENT_RUNS_LIMIT runs by id
(a backward walk of the primary key), those of the last RECENT_WINDOW.

Prometheus counters must never go down, and the database keeps no running totals (runs are
pruned, a tenant's deletion takes its history), so the recent figures are gauges over the window
and the histograms gauge histograms: `histogram_quantile` applies to their buckets as they are,
not to a `rate()` of them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import ColumnElement, Float, RowMapping, Select, and_, case, func, select
from sqlalchemy.orm import Session

from webapp.config import Settings
from webapp.database import database_now
from webapp.models import (
    NOTIFICATION_STATUSES,
    RUN_STATUSES,
    TRIGGERS,
    Notification,
    Run,
    Schedule,
    Worker,
    run_status_is,
)
from webapp.run_rules import meant_to_start, overdue_schedule_ids, run_overdue

RECENT_WINDOW = timedelta(minutes=15)
RECENT_RUNS_LIMIT = 10_000
RECENT_NOTIFICATIONS_LIMIT = 10_000
# A worker row is written at each start and kept, so only the newest are read: a live worker is
# missed only after this many other starts since its own.
RECENT_WORKERS_LIMIT = 1_000
# A worker that stopped heartbeating without deregistering counts as stale for this long, then
# it is history (killed workers' rows stay forever).
STALE_HORIZON = timedelta(days=1)
# Counts of the queue, the leases and the overdue stop here: beyond it the exact number does not
# change what an operator does, and counting a million index entries at every scrape costs.
COUNT_LIMIT = 100_000
LAG_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
DURATION_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
FINISHED_STATUSES = tuple(status for status in RUN_STATUSES if status not in ("queued", "running"))
SENT_OR_NOT = tuple(status for status in NOTIFICATION_STATUSES if status != "pending")


@dataclass(frozen=True)
class Histogram:
    """Cumulative counts per upper bound in seconds (Prometheus' `le`), `+Inf` last."""

    buckets: tuple[tuple[str, int], ...]
    sum_seconds: float


@dataclass(frozen=True)
class Figures:
    runs_queued: int
    runs_running: int
    queue_depth: int  # queued runs whose available_at has come
    queue_oldest_age_seconds: float
    queued_runs_overdue: int
    leases_expired: int  # running runs whose lease lapsed: the reaper's next work
    schedules_overdue: int
    dispatch_lag_seconds: float  # how long ago the most overdue active schedule was due
    workers_alive: int
    workers_stale: int
    worker_slots: int
    notifications_pending: int
    recent_runs: dict[str, int]  # finished in the window, by status
    recent_fires: dict[str, int]  # created in the window, by trigger
    recent_notifications: dict[str, int]  # created in the window and no longer pending
    lag: Histogram  # started_at - meant_to_start of the runs started in the window
    duration: Histogram  # finished_at - started_at of the runs finished in the window
    query_seconds: float


def tally(condition: ColumnElement[bool]) -> ColumnElement[int]:
    """How many rows meet `condition` (0 rather than NULL over no rows)."""
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def seconds_between(session: Session, later: Any, earlier: Any) -> ColumnElement[float]:
    """`later - earlier` in seconds: SQLite keeps timestamps as text, PostgreSQL as timestamps."""
    if session.get_bind().dialect.name == "sqlite":
        return (func.julianday(later) - func.julianday(earlier)) * 86400.0
    return func.extract("epoch", later - earlier).cast(Float)


def histogram_columns(
    name: str, seconds: ColumnElement[float], counted: ColumnElement[bool], bounds: Sequence[float]
) -> list[ColumnElement[Any]]:
    columns: list[ColumnElement[Any]] = [
        tally(and_(counted, seconds <= bound)).label(f"{name}_{index}")
        for index, bound in enumerate(bounds)
    ]
    columns.append(tally(counted).label(f"{name}_count"))
    columns.append(
        func.coalesce(func.sum(case((counted, seconds), else_=0.0)), 0.0).label(f"{name}_sum")
    )
    return columns


def histogram_of(row: RowMapping, name: str, bounds: Sequence[float]) -> Histogram:
    counts = [(str(bound), int(row[f"{name}_{index}"])) for index, bound in enumerate(bounds)]
    counts.append(("+Inf", int(row[f"{name}_count"])))
    return Histogram(tuple(counts), float(row[f"{name}_sum"]))


def capped_count(session: Session, query: Select[Any]) -> int:
    counted = query.limit(COUNT_LIMIT).subquery()
    return int(session.execute(select(func.count()).select_from(counted)).scalar_one())


def age_seconds(now: datetime, since: datetime | None) -> float:
    return max((now - since).total_seconds(), 0.0) if since else 0.0


def read_figures(session: Session, settings: Settings) -> Figures:
    """Every figure, in a fixed number of bounded statements (see the module's docstring)."""
    started = time.perf_counter()
    now = database_now(session)
    grace = settings.overdue_grace
    since = now - RECENT_WINDOW

    ready = (
        select(Run.available_at, run_overdue(now, grace).label("overdue"))
        .where(run_status_is("queued"), Run.available_at <= now)
        .order_by(Run.available_at)
        .limit(COUNT_LIMIT)
        .subquery()
    )
    depth, overdue_runs, oldest_ready = session.execute(
        select(func.count(), tally(ready.c.overdue), func.min(ready.c.available_at))
    ).one()
    queued = capped_count(session, select(Run.available_at).where(run_status_is("queued")))

    # A run leased and not started is overdue too (sent to Celery, taken by no Celery worker).
    held = (
        select(Run.locked_until, run_overdue(now, grace).label("overdue"))
        .where(run_status_is("running"))
        .limit(COUNT_LIMIT)
        .subquery()
    )
    running, expired, overdue_held = session.execute(
        select(func.count(), tally(held.c.locked_until < now), tally(held.c.overdue))
    ).one()

    schedules_overdue = capped_count(session, select(overdue_schedule_ids(now, grace).subquery()))
    first_due = session.execute(
        select(func.min(Schedule.next_run_at)).where(Schedule.active)
    ).scalar_one()

    workers = (
        select(Worker.last_heartbeat_at, Worker.stopped_at, Worker.concurrency)
        .order_by(Worker.id.desc())
        .limit(RECENT_WORKERS_LIMIT)
        .subquery()
    )
    fresh_after = now - 2 * settings.lock_ttl
    alive = and_(workers.c.stopped_at.is_(None), workers.c.last_heartbeat_at >= fresh_after)
    stale = and_(
        workers.c.stopped_at.is_(None),
        workers.c.last_heartbeat_at < fresh_after,
        workers.c.last_heartbeat_at >= now - STALE_HORIZON,
    )
    workers_alive, workers_stale, slots = session.execute(
        select(
            tally(alive),
            tally(stale),
            func.coalesce(func.sum(case((alive, workers.c.concurrency), else_=0)), 0),
        )
    ).one()

    # The seconds are computed once per run, in the subquery, not once per bucket.
    recent = (
        select(
            Run.status,
            Run.trigger,
            Run.queued_at,
            Run.started_at,
            Run.finished_at,
            seconds_between(session, Run.started_at, meant_to_start()).label("lag"),
            seconds_between(session, Run.finished_at, Run.started_at).label("duration"),
        )
        .order_by(Run.id.desc())
        .limit(RECENT_RUNS_LIMIT)
        .subquery()
    )
    finished = recent.c.finished_at >= since
    runs_row = (
        session.execute(
            select(
                *(
                    tally(and_(finished, recent.c.status == status)).label(status)
                    for status in FINISHED_STATUSES
                ),
                *(
                    tally(and_(recent.c.queued_at >= since, recent.c.trigger == trigger)).label(
                        f"fired_{trigger}"
                    )
                    for trigger in TRIGGERS
                ),
                *histogram_columns("lag", recent.c.lag, recent.c.started_at >= since, LAG_BUCKETS),
                *histogram_columns(
                    "duration",
                    recent.c.duration,
                    and_(finished, recent.c.started_at.is_not(None)),
                    DURATION_BUCKETS,
                ),
            )
        )
        .mappings()
        .one()
    )

    notifications_pending = capped_count(
        session, select(Notification.available_at).where(Notification.status == "pending")
    )
    outbox = (
        select(Notification.status, Notification.created_at)
        .order_by(Notification.id.desc())
        .limit(RECENT_NOTIFICATIONS_LIMIT)
        .subquery()
    )
    notifications_row = (
        session.execute(
            select(
                *(
                    tally(and_(outbox.c.created_at >= since, outbox.c.status == status)).label(
                        status
                    )
                    for status in SENT_OR_NOT
                )
            )
        )
        .mappings()
        .one()
    )

    return Figures(
        runs_queued=queued,
        runs_running=running,
        queue_depth=depth,
        queue_oldest_age_seconds=age_seconds(now, oldest_ready),
        queued_runs_overdue=int(overdue_runs) + int(overdue_held),
        leases_expired=int(expired),
        schedules_overdue=schedules_overdue,
        dispatch_lag_seconds=age_seconds(now, first_due),
        workers_alive=int(workers_alive),
        workers_stale=int(workers_stale),
        worker_slots=int(slots),
        notifications_pending=notifications_pending,
        recent_runs={status: int(runs_row[status]) for status in FINISHED_STATUSES},
        recent_fires={trigger: int(runs_row[f"fired_{trigger}"]) for trigger in TRIGGERS},
        recent_notifications={status: int(notifications_row[status]) for status in SENT_OR_NOT},
        lag=histogram_of(runs_row, "lag", LAG_BUCKETS),
        duration=histogram_of(runs_row, "duration", DURATION_BUCKETS),
        query_seconds=time.perf_counter() - started,
    )


def gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


def labelled(name: str, text: str, label: str, values: Mapping[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=[label])
    for key, value in values.items():
        family.add_metric([key], value)
    return family


def gauge_histogram(name: str, text: str, histogram: Histogram) -> GaugeHistogramMetricFamily:
    return GaugeHistogramMetricFamily(
        name, text, buckets=list(histogram.buckets), gsum_value=histogram.sum_seconds
    )


def metric_families(figures: Figures) -> list[Metric]:
    """The figures as Prometheus metrics; docs/how-to/monitoring.md's Metrics section lists the
    same."""
    window = f"in the last {int(RECENT_WINDOW.total_seconds() // 60)} minutes"
    return [
        labelled(
            "scheduler_runs",
            "Runs queued or running now.",
            "status",
            {"queued": figures.runs_queued, "running": figures.runs_running},
        ),
        labelled(
            "scheduler_recent_runs",
            f"Runs finished {window}, by outcome.",
            "status",
            figures.recent_runs,
        ),
        labelled(
            "scheduler_recent_fires",
            f"Runs created {window}, by trigger.",
            "trigger",
            figures.recent_fires,
        ),
        gauge_histogram(
            "scheduler_recent_run_lag_seconds",
            f"Seconds from fire time to start, of the runs started {window}.",
            figures.lag,
        ),
        gauge_histogram(
            "scheduler_recent_run_duration_seconds",
            f"Seconds from start to finish, of the runs finished {window}.",
            figures.duration,
        ),
        gauge(
            "scheduler_queue_depth",
            "Queued runs that may start now (their available_at has come).",
            figures.queue_depth,
        ),
        gauge(
            "scheduler_queue_oldest_age_seconds",
            "Seconds the oldest startable queued run has waited (0: none waits).",
            figures.queue_oldest_age_seconds,
        ),
        gauge(
            "scheduler_queued_runs_overdue",
            "Runs not started longer than SCHEDULER_OVERDUE_GRACE after they could: queued, or "
            "leased and not started (sent to Celery and taken by no Celery worker).",
            figures.queued_runs_overdue,
        ),
        gauge("scheduler_leases_held", "Running runs (each holds a lease).", figures.runs_running),
        gauge(
            "scheduler_leases_expired",
            "Running runs whose lease has lapsed: their worker is gone or frozen.",
            figures.leases_expired,
        ),
        gauge(
            "scheduler_schedules_overdue",
            "Active schedules due longer ago than SCHEDULER_OVERDUE_GRACE and not dispatched.",
            figures.schedules_overdue,
        ),
        gauge(
            "scheduler_dispatch_lag_seconds",
            "Seconds since the earliest due active schedule was due (0: none is due).",
            figures.dispatch_lag_seconds,
        ),
        labelled(
            "scheduler_workers",
            "Workers heartbeating within 2 x SCHEDULER_LOCK_TTL (alive), or silent for longer "
            "without a clean exit, within a day (stale).",
            "state",
            {"alive": figures.workers_alive, "stale": figures.workers_stale},
        ),
        gauge(
            "scheduler_worker_slots",
            "Jobs the alive workers may run at once (the sum of their concurrency).",
            figures.worker_slots,
        ),
        gauge(
            "scheduler_notifications_pending",
            "Notifications waiting in the outbox.",
            figures.notifications_pending,
        ),
        labelled(
            "scheduler_recent_notifications",
            f"Notifications written {window} and no longer pending, by status.",
            "status",
            figures.recent_notifications,
        ),
        gauge(
            "scheduler_metrics_query_seconds",
            "Seconds this scrape spent reading the database.",
            figures.query_seconds,
        ),
    ]


class FiguresCollector(Collector):
    """Hands prometheus_client figures already read (a registry per scrape, never the global)."""

    def __init__(self, figures: Figures) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        yield from metric_families(self.figures)


def exposition(session: Session, settings: Settings) -> bytes:
    """The Prometheus text format of the figures read now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FiguresCollector(read_figures(session, settings)))
    return generate_latest(registry)
