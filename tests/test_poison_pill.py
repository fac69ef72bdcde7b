"""No stored value can crash a worker: a run whose row cannot be read or decoded fails alone,
with the reason, and the worker goes on with the other runs (a real worker process, both
databases). The values are written behind the product's back, as an older release, a manual
fix in the database or a bug elsewhere could have left them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flask import Flask
from sqlalchemy import text

from tests.conftest import World, make_run
from tests.worker_support import Workers
from webapp.database import is_postgresql, write_transaction
from webapp.extensions import db
from webapp.models import Tenant

START = datetime(2026, 1, 1, tzinfo=UTC)

# What each poison does to the row of a queued demo.echo run, by dialect. SQLite stores JSON as
# text and text as bytes it never checks; PostgreSQL checks both, so what it can hold is valid
# JSON of the wrong shape.
POISONS = {
    "sqlite": {
        """UPDATE runs SET args = '{"message": "\\ud800"}'""": (
            "its stored arguments hold text that is not valid: args.message is not valid text: "
            "it holds a lone surrogate (U+D800)"
        ),
        "UPDATE runs SET args = '{not json'": "its stored arguments are not JSON",
        "UPDATE runs SET job = CAST(X'64656d6fff' AS TEXT)": "job 'demo\ufffd' is not",
        "UPDATE runs SET args = '[1, 2]'": "its stored arguments are not an object but list",
    },
    "postgresql": {
        "UPDATE runs SET args = '[1, 2]'::jsonb": "its stored arguments are not an object but list",
        """UPDATE runs SET args = '"text"'::jsonb""": "are not an object but str",
        "UPDATE runs SET job = 'no.such.job'": "job 'no.such.job' is not",
    },
}


def queue_echo_runs(tenant: Tenant, count: int) -> list[int]:
    return [
        make_run(
            tenant, scheduled_for=START + timedelta(seconds=n), args={"message": f"run {n}"}
        ).id
        for n in range(count)
    ]


def test_a_run_whose_row_cannot_be_decoded_fails_alone_and_the_worker_goes_on(
    app: Flask, world: World, workers: Workers
) -> None:
    dialect = "postgresql" if is_postgresql(db.session()) else "sqlite"
    poisons = POISONS[dialect]
    ids = queue_echo_runs(world.alpha, 2 * len(poisons))
    poisoned = dict(zip(ids[::2], poisons.items(), strict=True))
    with write_transaction(db.session) as session:
        for run_id, (statement, _) in poisoned.items():
            session.execute(text(f"{statement} WHERE id = :id"), {"id": run_id})
        # A job whose output and error no database stores as they are: stored escaped.
        session.execute(
            text("UPDATE runs SET job = 'odd.text', args = '{}' WHERE id = :id"), {"id": ids[1]}
        )
    worker = workers.start("--burst", "--concurrency", "2", SCHEDULER_JOB_MODULES="tests.odd_jobs")
    assert worker.wait(120) == 0, workers.logs()
    db.session.rollback()
    ended = {
        run_id: (status, error)
        for run_id, status, error in db.session.execute(
            text("SELECT id, status, error FROM runs ORDER BY id")
        )
    }
    for run_id, (statement, reason) in poisoned.items():
        status, error = ended[run_id]
        assert (status, reason in (error or "")) == ("failed", True), (statement, ended[run_id])
    odd = db.session.execute(
        text("SELECT status, error, output FROM runs WHERE id = :id"), {"id": ids[1]}
    ).one()
    escaped = "a NUL \\x00 and a lone surrogate \\ud800"
    assert (odd.status, f"RuntimeError: {escaped}" in odd.error, escaped in odd.output) == (
        "failed",
        True,
        True,
    ), (odd, workers.logs())
    for run_id in ids[3::2]:
        assert ended[run_id] == ("succeeded", None), (run_id, ended, workers.logs())
