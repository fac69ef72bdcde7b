"""Running one leased run: resolve the job through the catalog again, run it, record the outcome.

A job's exception is recorded on its run and never escapes: one job cannot stop the others.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO

from sqlalchemy.orm import Session

from webapp.catalog import Catalog, UnknownJobError
from webapp.catalog.context import JobContext
from webapp.database import utcnow, write_transaction
from webapp.scheduler import claims
from webapp.scheduler.leases import LeasedRun

log = logging.getLogger("webapp.scheduler")

ERROR_LIMIT = 16_384
TRUNCATED = "\n[output truncated]"


class JobTimeout(BaseException):
    """Raised inside a job's thread when it runs past its timeout (BaseException: jobs that
    catch Exception do not swallow it)."""


class CappedOutput:
    """What a job printed or logged, up to a limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0
        self.truncated = False

    def write(self, text: str) -> None:
        if self.size >= self.limit:
            self.truncated = True
            return
        room = self.limit - self.size
        self.parts.append(text[:room])
        self.size += min(len(text), room)
        self.truncated = self.truncated or len(text) > room

    def text(self) -> str:
        return "".join(self.parts) + (TRUNCATED if self.truncated else "")


class RunLogger:
    """The logger a job gets as `ctx.logger`: each line lands in the run's output."""

    def __init__(self, output: CappedOutput) -> None:
        self.output = output

    def _write(self, level: str, msg: object, args: tuple[object, ...]) -> None:
        text = str(msg) % args if args else str(msg)
        prefix = "" if level == "INFO" else f"{level}: "
        self.output.write(f"{prefix}{text}\n")

    def debug(self, msg: object, *args: object) -> None:
        self._write("DEBUG", msg, args)

    def info(self, msg: object, *args: object) -> None:
        self._write("INFO", msg, args)

    def warning(self, msg: object, *args: object) -> None:
        self._write("WARNING", msg, args)

    def error(self, msg: object, *args: object) -> None:
        self._write("ERROR", msg, args)

    def exception(self, msg: object, *args: object) -> None:
        self._write("ERROR", msg, args)
        self.output.write(traceback.format_exc())


class ThreadRoutedStream(io.TextIOBase):
    """sys.stdout for a worker: a job thread's prints go to its run, others to the console."""

    def __init__(self, fallback: TextIO) -> None:
        self.fallback = fallback
        self.local = threading.local()

    def write(self, text: str) -> int:
        target: CappedOutput | None = getattr(self.local, "output", None)
        if target is None:
            return self.fallback.write(text)
        target.write(text)
        return len(text)

    def flush(self) -> None:
        self.fallback.flush()


_install_lock = threading.Lock()


@contextmanager
def prints_captured(output: CappedOutput) -> Iterator[None]:
    with _install_lock:
        if not isinstance(sys.stdout, ThreadRoutedStream):
            sys.stdout = ThreadRoutedStream(sys.stdout)
        router = sys.stdout
    router.local.output = output
    try:
        yield
    finally:
        router.local.output = None


@dataclass(frozen=True)
class Outcome:
    status: str  # 'succeeded' | 'failed' | 'queued' (a retry)
    output: str
    error: str | None
    retry_at: datetime | None = None


def describe_error(error: BaseException) -> str:
    text = "".join(traceback.format_exception(error))
    headline = f"{type(error).__name__}: {error}"
    if len(text) > ERROR_LIMIT:
        text = text[: ERROR_LIMIT - len(TRUNCATED)] + TRUNCATED
    return f"{headline}\n\n{text}"


def run_job(
    run: LeasedRun, catalog: Catalog, config: Mapping[str, Any], session: Session
) -> tuple[str | None, CappedOutput, float]:
    """Runs the job in this thread: (error or None, output, the job's retry backoff)."""
    output = CappedOutput(int(config["SCHEDULER_OUTPUT_LIMIT"]))
    try:
        spec = catalog.get(run.job)
    except UnknownJobError as error:
        return str(error), output, 0.0
    if spec.scope == "system" and run.tenant_id is not None:
        return f"job '{spec.name}' is a system job and cannot run for a tenant", output, 0.0
    if spec.scope == "tenant" and run.tenant_id is None:
        return f"job '{spec.name}' is a tenant job and needs a tenant", output, 0.0
    ctx = JobContext(
        run_id=run.id,
        idempotency_key=run.idempotency_key,
        logger=RunLogger(output),
        attempt=run.attempt,
        tenant_id=run.tenant_id,
        tenant_slug=run.tenant_slug,
        schedule_id=run.schedule_id,
        schedule_key=run.schedule_key,
        scheduled_for=run.scheduled_for if run.trigger != "manual" else None,
        config=config,
        db=session if spec.scope == "system" else None,
    )
    try:
        with prints_captured(output):
            spec.call(ctx, run.args)
    except JobTimeout:
        return f"timed out after {spec.timeout:g} s", output, spec.retry_backoff
    except Exception as error:
        return describe_error(error), output, spec.retry_backoff
    return None, output, spec.retry_backoff


def decide(
    run: LeasedRun, error: str | None, output: str, backoff: float, now: datetime
) -> Outcome:
    if error is None:
        return Outcome("succeeded", output, None)
    if run.attempt < run.max_attempts:
        # Exponential backoff: backoff, 2 x backoff, 4 x backoff ...
        delay = timedelta(seconds=backoff * 2 ** (run.attempt - 1))
        return Outcome("queued", output, f"attempt {run.attempt} failed: {error}", now + delay)
    return Outcome("failed", output, error)


@dataclass(frozen=True)
class FinishedRun:
    """An attempt that has ended, waiting to be stored with others in one transaction."""

    run: LeasedRun
    outcome: Outcome
    started_at: datetime
    finished_at: datetime


ACTIONS = {"succeeded": "run_succeeded", "failed": "run_failed", "queued": "run_retrying"}


def store_outcomes(session: Session, worker_id: int, finished: list[FinishedRun]) -> set[int]:
    """Stores the outcomes in one transaction, each if this worker still holds the attempt."""
    rows = [
        {
            "id": done.run.id,
            "attempt": done.run.attempt,
            "status": done.outcome.status,
            "output": done.outcome.output,
            "error": done.outcome.error,
            "started_at": done.started_at,
            "finished_at": None if done.outcome.status == "queued" else done.finished_at,
            "available_at": done.outcome.retry_at,
        }
        for done in finished
    ]
    with write_transaction(session):
        stored = claims.record_outcomes(session, worker_id, rows)
    for done in finished:
        kept = done.run.id in stored
        log.info(
            "run_finished",
            extra={
                "action": ACTIONS[done.outcome.status] if kept else "run_outcome_dropped",
                "run_id": done.run.id,
                "attempt": done.run.attempt,
                "duration_ms": int((done.finished_at - done.started_at).total_seconds() * 1000),
            },
        )
    return stored


def record_outcome(session: Session, run: LeasedRun, worker_id: int, outcome: Outcome) -> bool:
    """Stores one outcome if this worker still holds the lease (a reaper may have taken it)."""
    now = utcnow()
    done = FinishedRun(run, outcome, run.started_at, now)
    return run.id in store_outcomes(session, worker_id, [done])


def execute(
    run: LeasedRun, catalog: Catalog, config: Mapping[str, Any], session: Session, worker_id: int
) -> Outcome:
    """Runs one leased run to its recorded outcome."""
    error, output, backoff = run_job(run, catalog, config, session)
    session.rollback()  # whatever the job left open must not leak into the outcome's transaction
    outcome = decide(run, error, output.text(), backoff, utcnow())
    record_outcome(session, run, worker_id, outcome)
    return outcome
