"""The retention of run history: expired runs are folded into daily roll-ups, then deleted.

A run expires when it has finished and the whole UTC day of its fire time lies before its
tenant's cutoff: now minus the tenant's `retention_days`, or SCHEDULER_RUN_RETENTION_DAYS for
tenants without their own and for system runs. Unfinished runs stay, whatever their age; once
one finishes, a later prune folds it into the roll-up its day already has (see `merge`).

Work is done in batches of whole days, each in its own short transaction that deletes the runs
(`DELETE ... RETURNING`) and writes the roll-ups of exactly the rows it deleted: a crash, a
timeout or a second prune running at the same time can neither lose a run nor count one twice.

- Runs of a schedule are walked in `(schedule_id, scheduled_for)` order; a batch ends at the
  midnight after its `batch_size`-th run, so it holds whole `(schedule, day)` groups and their
  percentiles are exact.
- Runs without a schedule (their schedule was deleted) are walked by `scheduled_for` and folded
  per `(tenant, job, day)` into a roll-up whose schedule_id is NULL, like the roll-ups that lost
  their schedule to the same deletion; a batch ends at a midnight too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock_time
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, insert, or_, select, tuple_
from sqlalchemy.orm import InstrumentedAttribute, Session

from webapp.database import write_transaction
from webapp.models import RUN_STATUSES, UNFINISHED_STATUSES, Run, Tenant
from webapp.rollup_models import RunRollup
from webapp.run_rules import meant_to_start

FINISHED = tuple(status for status in RUN_STATUSES if status not in UNFINISHED_STATUSES)
BATCH_SIZE = 5_000


def midnight_before(moment: datetime) -> datetime:
    """The start of `moment`'s UTC day."""
    return datetime.combine(moment.astimezone(UTC).date(), clock_time(), tzinfo=UTC)


@dataclass(frozen=True)
class Cutoffs:
    """Runs fired before their tenant's cutoff (a UTC midnight) are expired once finished."""

    default: datetime  # tenants without their own retention, and system runs
    by_tenant: dict[int, datetime]

    @classmethod
    def at(cls, session: Session, now: datetime, default_days: int) -> Cutoffs:
        own = session.execute(
            select(Tenant.id, Tenant.retention_days).where(Tenant.retention_days.is_not(None))
        ).all()
        return cls(
            default=midnight_before(now - timedelta(days=default_days)),
            by_tenant={
                tenant_id: midnight_before(now - timedelta(days=days or 0))
                for tenant_id, days in own  # days is never NULL here
            },
        )

    def expired(self) -> ColumnElement[bool]:
        tenants_by_cutoff: dict[datetime, list[int]] = {}
        for tenant_id, cutoff in self.by_tenant.items():
            tenants_by_cutoff.setdefault(cutoff, []).append(tenant_id)
        default = and_(
            or_(Run.tenant_id.is_(None), Run.tenant_id.not_in(list(self.by_tenant))),
            Run.scheduled_for < self.default,
        )
        own = [
            and_(Run.tenant_id.in_(ids), Run.scheduled_for < cutoff)
            for cutoff, ids in tenants_by_cutoff.items()
        ]
        return and_(Run.status.in_(FINISHED), or_(default, *own))


@dataclass
class PruneReport:
    runs_deleted: int = 0  # each folded into a roll-up in the same transaction
    rollups_created: int = 0
    rollups_merged: int = 0
    rollups_expired: int = 0
    batch_seconds: list[float] = field(default_factory=list)  # fold + delete transactions

    def summary(self) -> str:
        longest = max(self.batch_seconds, default=0.0) * 1000
        runs = "run" if self.runs_deleted == 1 else "runs"
        return (
            f"folded {self.runs_deleted} {runs} into {self.rollups_created} new and "
            f"{self.rollups_merged} merged daily roll-ups, then deleted them, in "
            f"{len(self.batch_seconds)} batches (longest {longest:.0f} ms); deleted "
            f"{self.rollups_expired} expired roll-ups"
        )


def percentile(ordered: Sequence[float], fraction: float) -> float | None:
    """Linear interpolation between the closest ranks: PostgreSQL's percentile_cont."""
    if not ordered:
        return None
    position = fraction * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


@dataclass
class DayOfRuns:
    """The deleted runs of one roll-up row: one schedule's day, or one (tenant, job, day) of
    runs whose schedule is gone."""

    tenant_id: int | None
    schedule_id: int | None
    job: str
    day: date
    statuses: dict[str, int] = field(default_factory=dict)
    durations: list[float] = field(default_factory=list)  # of the runs that started
    lags: list[float] = field(default_factory=list)

    def add(self, row: Any) -> None:
        self.job = row.job  # a schedule's job may have been edited: the latest run's name wins
        self.statuses[row.status] = self.statuses.get(row.status, 0) + 1
        if row.started_at is not None:
            self.lags.append((row.started_at - row.meant_at).total_seconds())
            if row.finished_at is not None:
                self.durations.append((row.finished_at - row.started_at).total_seconds())

    def rollup(self) -> dict[str, Any]:
        """The roll-up row's columns (a dict: rows are inserted many per statement)."""
        durations = sorted(self.durations)
        return {
            "tenant_id": self.tenant_id,
            "schedule_id": self.schedule_id,
            "job": self.job,
            "day": self.day,
            "runs": sum(self.statuses.values()),
            "succeeded": self.statuses.get("succeeded", 0),
            "failed": self.statuses.get("failed", 0),
            "skipped": self.statuses.get("skipped", 0),
            "duration_p50_seconds": percentile(durations, 0.5),
            "duration_p95_seconds": percentile(durations, 0.95),
            "lag_mean_seconds": sum(self.lags) / len(self.lags) if self.lags else None,
            "lag_max_seconds": max(self.lags, default=None),
        }


def weighted(
    old: float | None, old_weight: int, new: float | None, new_weight: int
) -> float | None:
    if old is None or old_weight <= 0:
        return new
    if new is None or new_weight <= 0:
        return old
    return (old * old_weight + new * new_weight) / (old_weight + new_weight)


def merge(rollup: RunRollup, late: dict[str, Any], late_started: int) -> None:
    """Adds `late` (runs of a day already rolled up: they finished after that prune) to
    `rollup`. Counts add and the maximum lag is exact; the mean lag is weighted by the runs that
    started. The percentiles are approximate: the day's durations are gone, so each is the mean
    of the two rows' percentiles weighted the same way. The row keeps no count of its started
    runs; runs - skipped stands for it (a skipped run never starts)."""
    started = rollup.runs - rollup.skipped
    for name in ("duration_p50_seconds", "duration_p95_seconds", "lag_mean_seconds"):
        setattr(rollup, name, weighted(getattr(rollup, name), started, late[name], late_started))
    maxima = [m for m in (rollup.lag_max_seconds, late["lag_max_seconds"]) if m is not None]
    rollup.lag_max_seconds = max(maxima, default=None)
    for name in ("runs", "succeeded", "failed", "skipped"):
        setattr(rollup, name, getattr(rollup, name) + late[name])
    rollup.job = late["job"]


@dataclass(frozen=True)
class Walk:
    """An order of runs in which each roll-up's runs are contiguous, and the batches along it."""

    columns: tuple[InstrumentedAttribute[Any], ...]  # the order; the last is scheduled_for
    which: ColumnElement[bool]

    def position(self, start: tuple[Any, ...] | None, end: tuple[Any, ...] | None) -> Any:
        key = tuple_(*self.columns)
        bounds: list[ColumnElement[bool]] = [self.which]
        # The bare first column besides the row value: an index on it bounds the scan.
        if start is not None:
            bounds += [self.columns[0] >= start[0], key >= start]
        if end is not None:
            bounds += [self.columns[0] <= end[0], key < end]
        return and_(*bounds)

    def group_key(self, row: Any) -> tuple[Any, ...]:
        day = row.scheduled_for.astimezone(UTC).date()
        if row.schedule_id is not None:
            return (row.schedule_id, day)
        return (row.tenant_id, row.job, day)


SCHEDULED = Walk((Run.schedule_id, Run.scheduled_for), Run.schedule_id.is_not(None))
ORPHANED = Walk((Run.scheduled_for,), Run.schedule_id.is_(None))


def batch_end(
    session: Session, walk: Walk, expired: ColumnElement[bool], start: Any, size: int
) -> tuple[Any, ...] | None:
    """Where the batch from `start` ends: the midnight after its `size`-th expired run, so
    that no day is split; None when fewer remain (the batch takes them all)."""
    last = session.execute(
        select(*walk.columns)
        .where(expired, walk.position(start, None))
        .order_by(*walk.columns)
        .offset(size - 1)
        .limit(1)
    ).first()
    session.commit()  # a read: it holds no row lock, and the batch's transaction starts anew
    if last is None:
        return None
    return (*last[:-1], midnight_before(last[-1]) + timedelta(days=1))


def fold_and_delete(
    session: Session, walk: Walk, condition: ColumnElement[bool]
) -> tuple[int, int, int]:
    """One transaction: deletes the runs, folds exactly those into roll-ups. Returns runs
    deleted, roll-ups created, roll-ups merged."""
    with write_transaction(session):
        deleted = session.execute(
            delete(Run)
            .where(condition)
            .returning(
                Run.tenant_id,
                Run.schedule_id,
                Run.job,
                Run.status,
                Run.scheduled_for,
                Run.started_at,
                Run.finished_at,
                meant_to_start().label("meant_at"),
            )
            .execution_options(synchronize_session=False)
        ).all()
        days: dict[tuple[Any, ...], DayOfRuns] = {}
        for row in sorted(deleted, key=lambda r: r.scheduled_for):
            key = walk.group_key(row)
            if key not in days:
                days[key] = DayOfRuns(row.tenant_id, row.schedule_id, row.job, key[-1])
            days[key].add(row)
        existing = existing_rollups(session, walk, list(days.values()))
        new = []
        for key, day in days.items():
            if key in existing:
                merge(existing[key], day.rollup(), len(day.lags))
            else:
                new.append(day.rollup())
        if new:
            # render_nulls: rows with and without a NULL go in the same multi-row statement.
            session.execute(insert(RunRollup).execution_options(render_nulls=True), new)
    return len(deleted), len(new), len(days) - len(new)


def existing_rollups(
    session: Session, walk: Walk, days: list[DayOfRuns]
) -> dict[tuple[Any, ...], RunRollup]:
    """The roll-ups already written for these days (runs that finished after their day was
    pruned), by the same key as the batch's groups."""
    if not days:
        return {}
    query = select(RunRollup).where(RunRollup.day.in_({day.day for day in days}))
    if walk is SCHEDULED:
        query = query.where(RunRollup.schedule_id.in_({day.schedule_id for day in days}))
    else:
        query = query.where(RunRollup.schedule_id.is_(None))
    found: dict[tuple[Any, ...], RunRollup] = {}
    for rollup in session.scalars(query.order_by(RunRollup.id)):
        key = (
            (rollup.schedule_id, rollup.day)
            if rollup.schedule_id is not None
            else (rollup.tenant_id, rollup.job, rollup.day)
        )
        found.setdefault(key, rollup)  # the oldest, should a deletion have left two
    return found


def delete_expired_rollups(session: Session, before: date, batch_size: int) -> int:
    total = 0
    while True:
        with write_transaction(session):
            ids = session.scalars(
                select(RunRollup.id).where(RunRollup.day < before).limit(batch_size)
            ).all()
            if ids:
                session.execute(delete(RunRollup).where(RunRollup.id.in_(ids)))
        total += len(ids)
        if len(ids) < batch_size:
            return total


def prune(
    session: Session,
    now: datetime,
    run_retention_days: int,
    rollup_retention_days: int,
    *,
    batch_size: int = BATCH_SIZE,
    check_timeout: Callable[[], None] = lambda: None,
) -> PruneReport:
    """Folds and deletes every expired run, batch by batch, then deletes roll-ups older than
    `rollup_retention_days`. `check_timeout` is asked before each batch: every batch is
    committed, so stopping there leaves consistent data and the next prune goes on."""
    report = PruneReport()
    expired = Cutoffs.at(session, now, run_retention_days).expired()
    for walk in (SCHEDULED, ORPHANED):
        # The walk moves on from where the last batch ended rather than starting over: deleted
        # rows linger in PostgreSQL's indexes until vacuum, and each batch would walk them all.
        start = None
        while True:
            check_timeout()
            end = batch_end(session, walk, expired, start, batch_size)
            started = time.monotonic()
            deleted, created, merged = fold_and_delete(
                session, walk, and_(expired, walk.position(start, end))
            )
            report.batch_seconds.append(time.monotonic() - started)
            report.runs_deleted += deleted
            report.rollups_created += created
            report.rollups_merged += merged
            if end is None:
                break
            start = end
    check_timeout()
    oldest_kept = midnight_before(now).date() - timedelta(days=rollup_retention_days)
    report.rollups_expired = delete_expired_rollups(session, oldest_kept, batch_size)
    return report
