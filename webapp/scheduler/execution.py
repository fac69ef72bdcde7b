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

from webapp.catalog import ArgsError, Catalog, PermanentError, UnknownJobError
from webapp.catalog.context import JobContext
from webapp.database import utcnow, write_transaction
from webapp.scheduler import claims
from webapp.scheduler.leases import LeasedRun
from webapp.scheduler.logs import TRACEBACK

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
class JobError:
    """Why an attempt failed: what tenants see, and the full traceback for operators."""

    shown: str  # the exception's type and message and the job's own frames: no server paths
    detail: str | None = None  # the whole traceback: the worker's log and runs.error_detail
    permanent: bool = False  # retrying cannot help: fail now whatever attempts remain


@dataclass(frozen=True)
class Outcome:
    status: str  # 'succeeded' | 'failed' | 'queued' (a retry)
    output: str
    error: str | None
    retry_at: datetime | None = None
    error_detail: str | None = None


def capped(text: str) -> str:
    return text if len(text) <= ERROR_LIMIT else text[: ERROR_LIMIT - len(TRUNCATED)] + TRUNCATED


def describe_error(error: BaseException, job_module: str) -> JobError:
    """Tenants get `Type: message` and the frames of the job's own module (by module name, not
    file path); the frames of the worker, the libraries and the server's paths stay in `detail`.
    """
    shown = [f"{type(error).__name__}: {error}" if str(error) else type(error).__name__]
    for frame, line in traceback.walk_tb(error.__traceback__):
        if frame.f_globals.get("__name__") == job_module:
            shown.append(f"  {job_module}, line {line}, in {frame.f_code.co_name}")
    return JobError(
        shown=capped("\n".join(shown)),
        detail=capped("".join(traceback.format_exception(error))),
        permanent=isinstance(error, PermanentError),
    )


def run_job(
    run: LeasedRun, catalog: Catalog, config: Mapping[str, Any], session: Session
) -> tuple[JobError | None, CappedOutput, float]:
    """Runs the job in this thread: (error or None, output, the job's retry backoff)."""
    output = CappedOutput(int(config["SCHEDULER_OUTPUT_LIMIT"]))
    try:
        spec = catalog.get(run.job)
    except UnknownJobError as error:
        return JobError(str(error), permanent=True), output, 0.0
    if spec.scope == "system" and run.tenant_id is not None:
        refused = f"job '{spec.name}' is a system job and cannot run for a tenant"
        return JobError(refused, permanent=True), output, 0.0
    if spec.scope == "tenant" and run.tenant_id is None:
        refused = f"job '{spec.name}' is a tenant job and needs a tenant"
        return JobError(refused, permanent=True), output, 0.0
    try:
        # Validated again: the job or the operator's settings may have changed since the save.
        params = spec.parse_args(run.args, config)
    except ArgsError as error:
        return JobError(str(error), permanent=True), output, 0.0
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
            spec.fn(ctx, params)
    except JobTimeout:
        return JobError(f"timed out after {spec.timeout:g} s"), output, spec.retry_backoff
    except Exception as error:
        return describe_error(error, spec.fn.__module__), output, spec.retry_backoff
    return None, output, spec.retry_backoff


def decide(
    run: LeasedRun, error: JobError | None, output: str, backoff: float, now: datetime
) -> Outcome:
    if error is None:
        return Outcome("succeeded", output, None)
    if run.attempt < run.max_attempts:
        if error.permanent:
            return Outcome("failed", output, f"not retried: {error.shown}", None, error.detail)
        # Exponential backoff: backoff, 2 x backoff, 4 x backoff ...
        delay = timedelta(seconds=backoff * 2 ** (run.attempt - 1))
        shown = f"attempt {run.attempt} failed: {error.shown}"
        return Outcome("queued", output, shown, now + delay, error.detail)
    return Outcome("failed", output, error.shown, None, error.detail)


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
            "error_detail": done.outcome.error_detail,
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
        fields: dict[str, object] = {
            "action": ACTIONS[done.outcome.status] if kept else "run_outcome_dropped",
            "run_id": done.run.id,
            "attempt": done.run.attempt,
            "duration_ms": int((done.finished_at - done.started_at).total_seconds() * 1000),
        }
        if done.outcome.error is not None:
            fields["error"] = done.outcome.error.partition("\n")[0]
        if done.outcome.error_detail is not None:
            fields[TRACEBACK] = done.outcome.error_detail  # the full one: operators only
        level = logging.INFO if done.outcome.error is None else logging.WARNING
        log.log(level, "run_finished", extra=fields)
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
