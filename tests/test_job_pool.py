"""The job pool's table of held runs, with its real job threads running real jobs."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from flask import Flask

from tests.scheduler_helpers import leased_run
from webapp.catalog import build_catalog
from webapp.catalog.context import job_settings
from webapp.scheduler.execution import Outcome
from webapp.scheduler.pool import ThreadJobPool


@pytest.fixture
def pool(app: Flask) -> Iterator[ThreadJobPool]:
    catalog = build_catalog(demo_jobs=True)
    started = ThreadJobPool(app, catalog, job_settings(app.config), 8, threading.Event())
    started.start()
    yield started
    started.stop()


def test_renewal_sees_every_held_run_while_runs_move_from_queue_to_slot(
    pool: ThreadJobPool,
) -> None:
    """8 job threads take runs off the queue while the main thread reads what it holds, as
    lease renewal does: a run is held from its lease until its outcome is stored, so no read
    may miss one, whether it waits, runs or has just finished."""
    held: set[int] = set()
    reads = 0
    for batch in range(150):
        runs = [leased_run(batch * 20 + n, message=str(batch * 20 + n)) for n in range(1, 21)]
        pool.submit(runs)
        held.update(run.id for run in runs)
        for _ in range(20):
            missed = held - set(pool.held_ids())
            assert not missed, f"renewal would miss runs {sorted(missed)}"
            reads += 1
        stored = pool.due_outcomes(force=True)
        pool.stored(stored)
        held.difference_update(done.run.id for done in stored)
    assert reads == 3000
    while held:  # the last ones: wait for their threads (the wake event says one finished)
        pool.wake.wait(5)
        pool.wake.clear()
        stored = pool.due_outcomes(force=True)
        pool.stored(stored)
        held.difference_update(done.run.id for done in stored)
    assert pool.held_ids() == [] and pool.busy() == 0


def test_every_run_ends_with_its_own_outcome(pool: ThreadJobPool) -> None:
    runs = [leased_run(n, message=str(n)) for n in range(1, 201)]
    pool.submit(runs)
    outcomes: dict[int, Outcome] = {}
    while len(outcomes) < len(runs):
        pool.wake.wait(5)
        pool.wake.clear()
        stored = pool.due_outcomes(force=True)
        pool.stored(stored)
        outcomes.update({done.run.id: done.outcome for done in stored})
    assert {o.status for o in outcomes.values()} == {"succeeded"}
    assert all(o.output == f"{run_id}\n" for run_id, o in outcomes.items())
