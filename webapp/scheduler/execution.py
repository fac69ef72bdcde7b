"""Running one leased run: resolve the job through the catalog again, run it, record the outcome.

A job's exception is recorded on its run and never escapes: one job cannot stop the others.
"""

from __future__ import annotations

import io
import logging
import math
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from sqlalchemy.orm import Session

from webapp.catalog import ArgsError, Catalog, PermanentError, UnknownJobError
from webapp.catalog.context import JobContext, JobTimeout, RunCancelled, job_setting
from webapp.config import Settings
from webapp.database import storable, utcnow, write_transaction
from webapp.models import RunStatus
from webapp.scheduler import runs
from webapp.scheduler.leases import LeasedRun
from webapp.scheduler.logs import TRACEBACK
from webapp.scheduler.notify import FinishedAttempt, record_finished_runs

log = logging.getLogger("webapp.scheduler")

ERROR_LIMIT = 16_384
TRUNCATED = "\n[output truncated]"


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


current_output: ContextVar[CappedOutput | None] = ContextVar("current_output", default=None)


class RunOutputStream(io.TextIOBase):
    """sys.stdout while a worker runs: what a job prints goes to its own run (the job's thread
    sets `current_output`), anything else to the console."""

    def __init__(self, console: TextIO) -> None:
        self.console = console

    def write(self, text: str) -> int:
        output = current_output.get()
        if output is None:
            return self.console.write(text)
        output.write(text)
        return len(text)

    def flush(self) -> None:
        self.console.flush()


@contextmanager
def prints_go_to_runs() -> Iterator[None]:
    """Routes jobs' prints to their runs for as long as a worker runs: installed once, before
    the first job starts, and the console stream put back at the end."""
    console = sys.stdout
    sys.stdout = RunOutputStream(console)
    try:
        yield
    finally:
        sys.stdout = console


@dataclass(frozen=True)
class JobError:
    """Why an attempt failed: what tenants see, and the full traceback for operators."""

    shown: str  # the exception's type and message and the job's own frames: no server paths
    detail: str | None = None  # the whole traceback: the worker's log and runs.error_detail
    permanent: bool = False  # retrying cannot help: fail now whatever attempts remain


@dataclass(frozen=True)
class JobResult:
    """What one attempt of a job gave: the error (None on success), its output, and the job's
    retry backoff. Plain data, so that a child process can send it back to the worker."""

    error: JobError | None
    output: str
    backoff: float = 0.0
    stopped: bool = False  # the job stopped because an admin asked it to (ctx.check_cancelled)


@dataclass(frozen=True)
class Outcome:
    status: RunStatus  # 'succeeded' | 'failed' | 'cancelled' | 'queued' (a retry)
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


# A job's defaults where the catalog no longer has it (its run fails at once anyway).
DEFAULT_TIMEOUT = 60.0  # seconds
DEFAULT_BACKOFF = 0.0  # seconds


def job_timeout(catalog: Catalog, job: str) -> float:
    """How long an attempt of this job may run (JobSpec.timeout), whichever executor runs it."""
    return catalog.get(job).timeout if job in catalog else DEFAULT_TIMEOUT


def job_backoff(catalog: Catalog, job: str) -> float:
    """The wait before this job's first retry, doubled for each later one (runs.retry_delay)."""
    return catalog.get(job).retry_backoff if job in catalog else DEFAULT_BACKOFF


def timed_out(timeout: float) -> JobError:
    return JobError(f"timed out after {timeout:g} s")


def timed_out_result(catalog: Catalog, job: str, output: str = "") -> JobResult:
    """The attempt's result when its job ran past its timeout, as every executor records it
    (the thread pool's abandoned thread, the process pool's killed child, Celery's time
    limits): failed, retried after the job's backoff while attempts remain."""
    return JobResult(timed_out(job_timeout(catalog, job)), output, job_backoff(catalog, job))


def run_job(
    run: LeasedRun,
    catalog: Catalog,
    settings: Mapping[str, Any],
    session: Session,
    deadline: float = math.inf,
    stop: threading.Event | None = None,
) -> JobResult:
    """Runs the job in this thread, until it returns, raises, or stops at `deadline`
    (time.monotonic()). `settings` are the job settings (context.job_settings), all a job sees.
    `stop`: set by the worker when an admin asks the run to stop (ctx.check_cancelled); a run
    asked to stop before its job began is not started at all."""
    stop = threading.Event() if stop is None else stop
    if stop.is_set():
        return JobResult(None, "", stopped=True)
    if run.unreadable is not None:
        return JobResult(JobError(run.unreadable, permanent=True), "")
    output = CappedOutput(job_setting(settings, "SCHEDULER_OUTPUT_LIMIT", int))
    try:
        spec = catalog.get(run.job)
    except UnknownJobError as unknown:
        return JobResult(JobError(str(unknown), permanent=True), "")
    refused = spec.scope_problem("tenant" if run.tenant_id is not None else "system")
    if refused is not None:
        return JobResult(JobError(refused, permanent=True), "")
    try:
        # Validated again: the job or the operator's settings may have changed since the save.
        params = spec.parse_args(run.args, settings)
    except ArgsError as invalid:
        return JobResult(JobError(str(invalid), permanent=True), "")
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
        config=settings,
        db=session if spec.scope == "system" else None,
        deadline=deadline,
        stop=stop,
    )
    error: JobError | None = None
    stopped = False
    token = current_output.set(output)
    try:
        spec.fn(ctx, params)
    except RunCancelled:
        stopped = True
    except JobTimeout:
        error = timed_out(spec.timeout)
    except Exception as raised:
        error = describe_error(raised, spec.fn.__module__)
    finally:
        current_output.reset(token)
    return JobResult(error, output.text(), spec.retry_backoff, stopped)


def decide(run: LeasedRun, result: JobResult, now: datetime) -> Outcome:
    """The run's next state after this attempt: succeeded, failed, cancelled (the job stopped
    when asked to), or queued for a retry."""
    error, output, backoff = result.error, result.output, result.backoff
    if result.stopped:
        return Outcome("cancelled", output, None)
    if error is None:
        return Outcome("succeeded", output, None)
    if run.attempt < run.max_attempts:
        if error.permanent:
            return Outcome("failed", output, f"not retried: {error.shown}", None, error.detail)
        delay = runs.retry_delay(backoff, run.attempt)
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


ACTIONS: dict[RunStatus, str] = {
    "succeeded": "run_succeeded",
    "failed": "run_failed",
    "queued": "run_retrying",
    "cancelled": "run_cancelled",
}


def store_outcomes(
    session: Session,
    worker_id: int,
    finished: list[FinishedRun],
    settings: Settings | None = None,
) -> set[int]:
    """Stores the outcomes in one transaction, each if this worker still holds the attempt.

    The same transaction counts the schedules' failures in a row, pauses those that reach their
    limit and writes the notifications (scheduler.notify), for the outcomes it stored that end
    their runs (a retry still to come is no failure yet). `settings`: the app's by default.

    An attempt whose lease a reaper took back while it ran (the worker was frozen, or could not
    reach the database) is still stored when nobody has touched the run since: its history
    shows what the job did, not "worker lost". Once another attempt has begun, the outcome is
    dropped, never written over the new owner's, and the log says so (`run_outcome_dropped`).
    """
    rows = [
        {
            "id": done.run.id,
            "attempt": done.run.attempt,
            "status": done.outcome.status,
            # As the job gave it, escaped where the database could not store it.
            "output": storable(done.outcome.output),
            "error": done.outcome.error and storable(done.outcome.error),
            "error_detail": done.outcome.error_detail and storable(done.outcome.error_detail),
            "started_at": done.started_at,
            "finished_at": None if done.outcome.status == "queued" else done.finished_at,
            "available_at": done.outcome.retry_at,
        }
        for done in finished
    ]
    with write_transaction(session):
        stored = runs.record_outcomes(session, worker_id, rows)
        late = [row for row in rows if row["id"] not in stored]
        stored_late = runs.record_outcomes(session, worker_id, late, taken_back=True)
        # A cancel is neither a failure nor a success: it leaves the failure count alone.
        ended = sorted(
            (
                done
                for done in finished
                if done.outcome.status not in ("queued", "cancelled")
                and (done.run.id in stored or done.run.id in stored_late)
            ),
            key=lambda done: (done.finished_at, done.run.id),
        )
        attempts = [
            FinishedAttempt(done.run.id, done.run.schedule_id, done.outcome.status == "succeeded")
            for done in ended
        ]
        record_finished_runs(session, settings, attempts, utcnow())
    # A success is one id on its batch's line; its own line, at DEBUG. At a herd's pace one line
    # per run would be most of a worker's Python and past a log sink's rate limit, which then
    # drops lines, failures' too (bench/README.md, "One line per batch of successes").
    succeeded: list[int] = []
    debug = log.isEnabledFor(logging.DEBUG)
    for done in finished:
        kept = done.run.id in stored or done.run.id in stored_late
        plain = done.run.id in stored and done.outcome.status == "succeeded"
        if plain:
            succeeded.append(done.run.id)
            if not debug:
                continue
        fields: dict[str, object] = {
            "action": ACTIONS[done.outcome.status] if kept else "run_outcome_dropped",
            "run_id": done.run.id,
            "attempt": done.run.attempt,
            "tenant_id": done.run.tenant_id,
            "schedule_id": done.run.schedule_id,
            "duration_ms": int((done.finished_at - done.started_at).total_seconds() * 1000),
        }
        if done.run.id in stored_late:
            fields["lease"] = "taken_back"  # stored all the same: nobody had taken the run over
        elif not kept:
            fields["outcome"] = done.outcome.status
            fields["reason"] = "another attempt holds the run"
        if done.outcome.error is not None:
            fields["error"] = done.outcome.error.partition("\n")[0]
        if done.outcome.error_detail is not None:
            fields[TRACEBACK] = done.outcome.error_detail  # the full one: operators only
        level = logging.INFO if done.outcome.error is None and kept else logging.WARNING
        log.log(logging.DEBUG if plain else level, "run_finished", extra=fields)
    if succeeded:
        extra = {"action": "runs_succeeded", "count": len(succeeded), "run_ids": succeeded}
        log.info("runs_succeeded", extra=extra)
    return stored | stored_late


def finish(run: LeasedRun, result: JobResult, started_at: datetime) -> FinishedRun:
    """The attempt's outcome, decided now, to be stored by store_outcomes."""
    finished_at = utcnow()
    return FinishedRun(run, decide(run, result, finished_at), started_at, finished_at)


def run_attempt(
    run: LeasedRun,
    catalog: Catalog,
    settings: Mapping[str, Any],
    session: Session,
    deadline: float | None = None,
    stop: threading.Event | None = None,
) -> FinishedRun:
    """Runs one leased attempt in this thread to its outcome: what a worker's job thread does
    with each run it takes (the worker stores the outcomes together with store_outcomes).
    `deadline` (time.monotonic()): the job's timeout from when its slot started it; by default
    from now."""
    started_at = utcnow()
    if deadline is None:
        deadline = time.monotonic() + job_timeout(catalog, run.job)
    result = run_job(run, catalog, settings, session, deadline, stop)
    session.rollback()  # whatever the job left open must not leak into the outcome's transaction
    return finish(run, result, started_at)
