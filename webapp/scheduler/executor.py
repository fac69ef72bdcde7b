"""What every executor shares: the worker loop with its thread pool (pool.py) or process pool
(process_pool.py), and the Celery worker that runs `webapp.run` (celery_tasks.py).

- The worker row: register_worker, heartbeat, deregister_worker; its version (worker_version:
  one rule for the column's width).
- Liveness: touch_liveness, the file a per-process probe reads (`scheduler alive`), touched
  whether the database answers or not (an outage is no reason to restart a worker).
- Waiting for a database that is away: Backoff (waits that double, up to a ceiling) and
  retry_while_database_down (one action, tried again until it gets through), both logged as
  `database_unavailable` unless told otherwise.

What an attempt shares (the job's timeout and backoff, a timeout's outcome, the outcome's
store) is in execution.py; the lease, its start mark and its renewal in leases.py.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import insert, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from webapp import release
from webapp.database import lost_race, utcnow
from webapp.extensions import db
from webapp.models import Worker, WorkerKind

log = logging.getLogger("webapp.worker")

T = TypeVar("T")

MAX_BACKOFF = 30.0  # seconds: the longest wait between two tries while the database is away
VERSION_WIDTH: int = Worker.__table__.c.version.type.length  # type: ignore[attr-defined]


def worker_version() -> str:
    """The installed package's release, for the workers page, cut to the column's width (a
    local build's version can be longer); "unknown" for a checkout run without installing."""
    return release.version()[:VERSION_WIDTH]


def register_worker(session: Session, concurrency: int, kind: WorkerKind) -> int:
    """Adds this process's `workers` row (host, pid, kind, slots, version); returns its id."""
    statement = (
        insert(Worker)
        .values(
            hostname=socket.gethostname(),
            pid=os.getpid(),
            kind=kind,
            concurrency=concurrency,
            version=worker_version(),
        )
        .returning(Worker.id)
    )
    worker_id: int = session.execute(statement).scalar_one()
    return worker_id


def heartbeat(
    session: Session, worker_id: int, now: datetime, abandoned_jobs: int | None = None
) -> None:
    """The worker is alive at `now` (the database's clock: the one reapers compare with);
    `abandoned_jobs`: the job threads it left running past their timeout (the thread pool)."""
    values: dict[str, Any] = {"last_heartbeat_at": now}
    if abandoned_jobs is not None:
        values["abandoned_jobs"] = abandoned_jobs
    session.execute(update(Worker).where(Worker.id == worker_id).values(values))


def touch_liveness(path: str) -> None:
    """This process is alive: its loop (a Celery worker's heartbeat thread) has gone round.
    SCHEDULER_LIVENESS_FILE's modification time, for `scheduler alive`; nothing without one. A
    file that cannot be written is left alone: the probe says so, the worker goes on."""
    if not path:
        return
    try:
        with open(path, "a"):
            os.utime(path)
    except OSError:
        pass


def liveness_age(path: str, now: float) -> float | None:
    """Seconds since the process last touched `path` (now: time.time()); None: never."""
    try:
        return now - os.stat(path).st_mtime
    except FileNotFoundError:
        return None


def deregister_worker(session: Session, worker_id: int) -> None:
    """The worker has stopped: its row stays, for the workers page, with `stopped_at`."""
    session.execute(update(Worker).where(Worker.id == worker_id).values(stopped_at=utcnow()))


class Backoff:
    """Waits that double from `first` up to `most` seconds, until reset (once it got through)."""

    def __init__(self, first: float = 1.0, most: float = MAX_BACKOFF) -> None:
        self.first = min(first, most)
        self.most = most
        self.delay = self.first

    def next(self) -> float:
        delay = self.delay
        self.delay = min(2 * delay, self.most)
        return delay

    def reset(self) -> None:
        self.delay = self.first


def database_unavailable(
    error: DBAPIError, retry_in: float, action: str = "database_unavailable", **fields: Any
) -> None:
    """Logs a database that did not answer, and ends the session's failed transaction: the
    process never dies of it."""
    db.session.rollback()
    log.warning(
        action, extra={"action": action, "error": str(error.orig), "retry_in": retry_in, **fields}
    )


def retry_while_database_down(
    attempt: Callable[[], T],
    *,
    stop: threading.Event | None = None,
    give_up_after: float | None = None,
    backoff: Backoff | None = None,
    action: str = "database_unavailable",
    **fields: Any,
) -> T | None:
    """`attempt()`, tried again after each DBAPIError (logged `action`, with `fields`) after a
    Backoff's wait; None once `stop` is set, the last error once `give_up_after` seconds have
    passed."""
    backoff = backoff or Backoff()
    give_up = None if give_up_after is None else time.monotonic() + give_up_after
    while stop is None or not stop.is_set():
        try:
            return attempt()
        except DBAPIError as error:
            if give_up is not None and time.monotonic() >= give_up:
                db.session.rollback()
                raise
            if lost_race(error):  # rolled back whole: the database is up, try again at once
                db.session.rollback()
                log.info(
                    "transaction_lost_race",
                    extra={"action": "transaction_lost_race", "during": action, **fields},
                )
                continue
            delay = backoff.next()
            database_unavailable(error, delay, action, **fields)
            if stop is None:
                time.sleep(delay)
            else:
                stop.wait(delay)
    return None
