"""A job module for the fault tests: every execution of `probe.work` records when it ran.

Each execution appends JSON lines to a file of its own in `directory`: `start` (with the run,
attempt and pid, when its slot decided to start it, and whether this worker still owned the run
and its start mark was written, by the database as the job began),
a `step` every STEP seconds while it works, and `end`. A worker frozen mid-job leaves a gap
between two lines, so that `active_spans` tells when an execution really ran.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import create_engine, select
from sqlalchemy.engine import Engine

from webapp.catalog import Catalog, JobContext
from webapp.models import Run, Worker

catalog = Catalog()
STEP = 0.01  # seconds between two lines of a working execution
# Two lines further apart than this mean the execution was not running in between (its
# process was stopped): a step takes STEP, even on a loaded machine far less than this.
STOPPED_GAP = 2.0


class ProbeParams(BaseModel):
    directory: str
    seconds: float = Field(default=0.0, ge=0, le=60)
    check_owner: bool = Field(default=False, description="Ask the database at the start.")


@cache
def database() -> Engine:
    # Behind PgBouncer (tests/pg_bouncer.py), as the worker's engine: no prepared statements.
    pooled = os.environ.get("SCHEDULER_DATABASE_POOLER", "none") != "none"
    return create_engine(
        os.environ["DATABASE_URL"], connect_args={"prepare_threshold": None} if pooled else {}
    )


def owns(run_id: int, attempt: int) -> tuple[bool, bool]:
    """Whether this process's worker holds the lease on this attempt right now, by the
    database (the run is running, at this attempt, for a worker with this pid, not expired),
    and whether the run's start mark is written."""
    query = (
        select(Run.status, Run.attempt, Run.locked_until, Run.started_at, Worker.pid)
        .join(Worker, Worker.id == Run.worker_id)
        .where(Run.id == run_id)
    )
    with database().connect() as connection:
        row = connection.execute(query).one_or_none()
    if row is None or row.locked_until is None:
        return False, False
    owned = (row.status, row.attempt, row.pid) == ("running", attempt, os.getpid()) and (
        row.locked_until > datetime.now(UTC)
    )
    return owned, row.started_at is not None


TIMEOUT = 600.0


@catalog.job(
    "probe.work", title="Record an execution", params=ProbeParams, max_attempts=3, timeout=TIMEOUT
)
def work(ctx: JobContext, params: ProbeParams) -> None:
    # When the slot decided to start it (its deadline counts from then), by the wall clock.
    decided = time.time() - (time.monotonic() - (ctx.deadline - TIMEOUT))
    name = f"{ctx.run_id}-{ctx.attempt}-{os.getpid()}-{threading.get_ident()}.jsonl"
    with (Path(params.directory) / name).open("a") as record:

        def write(event: str, **fields: Any) -> None:
            record.write(json.dumps({"event": event, "at": time.time(), **fields}) + "\n")
            record.flush()

        owned, marked = owns(ctx.run_id, ctx.attempt) if params.check_owner else (None, None)
        write(
            "start",
            run_id=ctx.run_id,
            attempt=ctx.attempt,
            pid=os.getpid(),
            decided=decided,
            owned=owned,
            marked=marked,
        )
        end = time.monotonic() + params.seconds
        while time.monotonic() < end:
            time.sleep(STEP)
            write("step")
        write("end")


def executions(directory: Path) -> list[list[dict[str, Any]]]:
    """Every execution recorded in `directory`: its lines, `start` first."""
    return [
        [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(directory.glob("*.jsonl"))
    ]


def active_spans(lines: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """The times an execution was running: its lines, split where its process was stopped."""
    spans: list[tuple[float, float]] = []
    start = previous = lines[0]["at"]
    for line in lines[1:]:
        if line["at"] - previous > STOPPED_GAP:
            spans.append((start, previous))
            start = line["at"]
        previous = line["at"]
    spans.append((start, previous))
    return spans


def concurrent_copies(directory: Path) -> list[tuple[int, int, int]]:
    """(run, attempt, attempt) for every two executions of one run that ran at the same time."""
    by_run: dict[int, list[tuple[int, list[tuple[float, float]]]]] = {}
    for lines in executions(directory):
        start = lines[0]
        by_run.setdefault(start["run_id"], []).append((start["attempt"], active_spans(lines)))
    overlaps = []
    for run_id, copies in by_run.items():
        for n, (attempt, spans) in enumerate(copies):
            for other_attempt, other_spans in copies[n + 1 :]:
                if any(a < d and c < b for a, b in spans for c, d in other_spans):
                    overlaps.append((run_id, attempt, other_attempt))
    return overlaps
