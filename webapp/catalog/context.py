"""What a job sees of the run it executes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol


class PermanentError(Exception):
    """Raised by a job for a failure that no retry can fix: a bad setting or argument, a request
    the far end refuses (HTTP 4xx). The worker fails the run at once, whatever attempts remain;
    any other exception is retried while attempts remain."""


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
    config: Mapping[str, object] = field(default_factory=dict)  # the app's settings
    db: object | None = None  # the database session, for the few jobs that need it

    def __post_init__(self) -> None:
        if self.scheduled_for is not None and self.scheduled_for.utcoffset() != timedelta(0):
            raise ValueError(
                f"scheduled_for must be an aware UTC datetime, not {self.scheduled_for}"
            )

    def log(self, msg: str) -> None:
        """Writes one line to the run's output."""
        self.logger.info(msg)
