"""What a job gets and gives on the worker's execution path: its settings, output and deadline."""

from __future__ import annotations

import math
import sys
import threading
import time

import pytest
from flask import Flask

from tests.scheduler_helpers import leased_run
from webapp import config
from webapp.catalog import Catalog, JobContext, JobTimeout, build_catalog
from webapp.config import JOB_SETTINGS
from webapp.extensions import db
from webapp.scheduler.execution import (
    CappedOutput,
    FinishedRun,
    RunLogger,
    prints_go_to_runs,
    run_attempt,
)
from webapp.scheduler.leases import LeasedRun


@pytest.fixture
def catalog() -> Catalog:
    return build_catalog(demo_jobs=True, modules=["tests.sample_jobs"])


def attempt(app: Flask, catalog: Catalog, run: LeasedRun) -> FinishedRun:
    """What a worker's job slot does with a leased run."""
    with app.app_context():
        try:
            return run_attempt(run, catalog, config.settings(app).job_settings(), db.session())
        finally:
            db.session.remove()


def test_a_job_sees_no_secret_key_and_no_database_url(app: Flask, catalog: Catalog) -> None:
    assert app.config["SECRET_KEY"] and app.config["SQLALCHEMY_DATABASE_URI"]
    done = attempt(app, catalog, leased_run(1, "sample.settings"))
    seen = set(done.outcome.output.strip().split(","))
    assert seen == set(JOB_SETTINGS)
    assert not seen & {"SECRET_KEY", "DATABASE_URL", "SQLALCHEMY_DATABASE_URI"}


def test_two_jobs_running_at_once_each_get_only_their_own_output(
    app: Flask, catalog: Catalog
) -> None:
    done: dict[str, FinishedRun] = {}

    def run(word: str, run_id: int) -> None:
        done[word] = attempt(app, catalog, leased_run(run_id, "sample.chatty", word=word, lines=50))

    console = sys.stdout
    with prints_go_to_runs():  # as the worker does, once, for its whole life
        threads = [threading.Thread(target=run, args=args) for args in (("ping", 1), ("pong", 2))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sys.stdout is console
    assert done["ping"].outcome.output == "ping\n" * 100
    assert done["pong"].outcome.output == "pong\n" * 100


def test_a_run_leaves_sys_stdout_as_it_was(
    app: Flask, catalog: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    console = sys.stdout
    attempt(app, catalog, leased_run(1, "sample.printer"))
    assert sys.stdout is console
    # Outside a worker, a print is the console's: nothing was swapped to catch it.
    assert capsys.readouterr().out == "printed by the job\n"


def test_a_job_that_checks_its_deadline_stops_at_it(app: Flask, catalog: Catalog) -> None:
    started = time.monotonic()
    done = attempt(app, catalog, leased_run(1, "sample.cooperative"))
    took = time.monotonic() - started
    assert (done.outcome.status, done.outcome.error) == ("failed", "timed out after 0.3 s")
    assert done.outcome.output == "started\n"
    assert 0.3 <= took < 1.0  # by itself, before any hard limit


def test_check_timeout_raises_only_once_the_deadline_has_passed() -> None:
    def ctx(deadline: float) -> JobContext:
        logger = RunLogger(CappedOutput(1000))
        return JobContext(run_id=1, idempotency_key="k", logger=logger, deadline=deadline)

    ctx(math.inf).check_timeout()
    ctx(time.monotonic() + 60).check_timeout()
    with pytest.raises(JobTimeout):
        ctx(time.monotonic() - 0.001).check_timeout()
