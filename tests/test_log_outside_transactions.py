"""No log line is written inside a database transaction: a log sink that blocks (a pipe nobody
reads, a stuck journald, a network handler) must never hold the locks of a worker's step. A
handler asks, at each line, whether another connection can lock the rows the step has just
written, on the real database."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Flask
from sqlalchemy import Table, text, update
from sqlalchemy.exc import OperationalError

from tests.conftest import WorkerFactory, World, make_run, make_schedule
from tests.scheduler_helpers import catalog, settings
from webapp.extensions import db
from webapp.models import Run, Schedule
from webapp.scheduler.leases import lease_once, lease_with_starts, reap_once
from webapp.scheduler.tick import tick


class LockProbe(logging.Handler):
    """At each line of its logger, whether another connection could lock `ids` of `table`."""

    def __init__(self, table: Table, ids: list[int]) -> None:
        super().__init__(logging.DEBUG)
        self.table = table
        self.ids = ids
        self.lines: list[tuple[str, bool]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((vars(record).get("action", ""), self.could_lock()))

    def could_lock(self) -> bool:
        with db.engine.connect() as other:
            if other.dialect.name == "postgresql":
                other.execute(text("SET LOCAL lock_timeout = '200ms'"))
            else:
                other.exec_driver_sql("PRAGMA busy_timeout = 200")
            try:
                touch = update(self.table).where(self.table.c.id.in_(self.ids))
                other.execute(touch.values(id=self.table.c.id))
            except OperationalError:
                return False
            finally:
                other.rollback()
        return True


@contextmanager
def probing(logger: str, table: Any, ids: list[int]) -> Iterator[LockProbe]:
    probe = LockProbe(table.__table__, ids)
    chosen = logging.getLogger(logger)
    level = chosen.level
    chosen.addHandler(probe)
    chosen.setLevel(logging.DEBUG)
    try:
        yield probe
    finally:
        chosen.removeHandler(probe)
        chosen.setLevel(level)


def test_the_tick_logs_its_fires_once_it_has_committed(app: Flask, world: World) -> None:
    now = datetime.now(UTC)
    due = make_schedule(world.alpha, "due", now - timedelta(seconds=1))
    busy = make_schedule(world.alpha, "busy", now - timedelta(seconds=1), overlap_policy="skip")
    make_run(busy, scheduled_for=now, trigger="manual")  # unfinished: its fire is skipped
    broken = make_schedule(world.alpha, "broken", now - timedelta(seconds=1), job="no.such")
    with probing("webapp.scheduler", Schedule, [due.id, busy.id, broken.id]) as probe:
        result = tick(db.session(), catalog(), settings(), now)
    assert (result.queued, result.skipped, result.failed) == (1, 1, 1)
    assert sorted(probe.lines) == [
        ("fire_skipped", True),
        ("schedule_deactivated", True),
        ("schedule_fired", True),
        ("tick_batch", True),
    ]


def test_a_lease_logs_its_runs_once_it_has_committed(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    now = datetime.now(UTC)
    worker = make_worker()
    runs = [make_run(world.alpha, scheduled_for=now - timedelta(seconds=n)) for n in (1, 2)]
    with probing("webapp.scheduler", Run, [run.id for run in runs]) as probe:
        lease = lease_with_starts(db.session(), worker.id, None, timedelta(seconds=60), 2, [], 1)
    assert len(lease.runs) == 2
    assert probe.lines == [("run_leased", True), ("run_leased", True)]


def test_the_reaper_logs_the_runs_it_takes_back_once_it_has_committed(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    now = datetime.now(UTC)
    worker = make_worker()
    run = make_run(world.alpha, scheduled_for=now - timedelta(seconds=1))
    lease_once(db.session(), worker.id, now, timedelta(seconds=1), 1)
    with probing("webapp.scheduler", Run, [run.id]) as probe:
        assert reap_once(db.session(), now + timedelta(seconds=2)) == 1
    assert probe.lines == [("run_lease_expired", True)]
