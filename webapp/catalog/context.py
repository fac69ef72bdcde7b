"""What a job sees of the run it executes."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

T = TypeVar("T")


def job_setting(settings: Mapping[str, object], name: str, kind: type[T]) -> T:
    """One of the operator's JOB_SETTINGS as the Settings typed it (its default there, not
    here); a name the job was not given, or a value of another type, is a programming error."""
    value = settings[name]
    if not isinstance(value, kind):
        raise TypeError(f"{name} is {type(value).__name__}, not {kind.__name__}")
    return value


class PermanentError(Exception):
    """Raised by a job for a failure that no retry can fix: a bad setting or argument, a request
    the far end refuses (HTTP 4xx). The worker fails the run at once, whatever attempts remain;
    any other exception is retried while attempts remain."""


class JobTimeout(BaseException):
    """Raised by `ctx.check_timeout()` once the job's deadline has passed. A BaseException, so
    that a job's `except Exception` does not swallow it; the run fails with `timed out`."""


class RunCancelled(BaseException):
    """Raised by `ctx.check_cancelled()` once an admin has asked the run to stop. A
    BaseException, so that a job's `except Exception` does not swallow it; the run ends
    `cancelled`."""


class JobLogger(Protocol):
    """The part of `logging.Logger` a job may use; the worker stores what it writes on the run."""

    def debug(self, msg: object, *args: object) -> None: ...
    def info(self, msg: object, *args: object) -> None: ...
    def warning(self, msg: object, *args: object) -> None: ...
    def error(self, msg: object, *args: object) -> None: ...
    def exception(self, msg: object, *args: object) -> None: ...


@dataclass
class JobContext:
    """Given to every job as `ctx`: which run this is, for whom, and where to write output."""

    run_id: int
    idempotency_key: str
    logger: JobLogger
    attempt: int = 1
    tenant_id: int | None = None  # None for system-scope jobs
    tenant_slug: str | None = None
    schedule_id: int | None = None  # None for a run whose schedule was deleted
    schedule_key: str | None = None
    scheduled_for: datetime | None = None  # the fire time, aware UTC; None for a plain run-now
    config: Mapping[str, object] = field(default_factory=dict)  # JOB_SETTINGS only
    db: object | None = None  # the database session, for the few jobs that need it
    deadline: float = math.inf  # time.monotonic() at which the job's timeout ends
    # Set by the worker when an admin asks the run to stop (seen at its next lease renewal).
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        if self.scheduled_for is not None and self.scheduled_for.utcoffset() != timedelta(0):
            raise ValueError(
                f"scheduled_for must be an aware UTC datetime, not {self.scheduled_for}"
            )

    def setting(self, name: str, kind: type[T]) -> T:
        """job_setting() of the settings this job was given."""
        return job_setting(self.config, name, kind)

    def log(self, msg: str) -> None:
        """Writes one line to the run's output."""
        self.logger.info(msg)

    def seconds_left(self) -> float:
        """Until the job's timeout (infinite without one); negative once it has passed."""
        return self.deadline - time.monotonic()

    def check_timeout(self) -> None:
        """Raises JobTimeout once the deadline has passed: call it between steps of long work."""
        if self.seconds_left() <= 0:
            raise JobTimeout

    def cancel_requested(self) -> bool:
        """Whether an admin has asked this run to stop: a job may wind down and return."""
        return self.stop.is_set()

    def check_cancelled(self) -> None:
        """Raises RunCancelled once an admin has asked the run to stop: call it between steps
        of long work, as check_timeout. A job that never asks runs to its end."""
        if self.stop.is_set():
            raise RunCancelled
