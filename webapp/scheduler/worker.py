"""The worker process: a loop of steps (reap, tick, lease, renew), a pool of job threads.

Each step is a function of webapp.scheduler that tests call one at a time with an explicit now;
this module only repeats them, sleeps between rounds and handles signals. The sleep is a
threading.Event: SIGTERM, a finished job or a PostgreSQL NOTIFY ends it at once.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import FrameType

from flask import Flask
from sqlalchemy import update
from sqlalchemy.exc import DBAPIError

from webapp.catalog import Catalog
from webapp.database import utcnow, write_transaction
from webapp.extensions import db
from webapp.models import Worker
from webapp.scheduler import claims
from webapp.scheduler.execution import JobTimeout, decide, execute, record_outcome
from webapp.scheduler.leases import LeasedRun, lease_once, reap_once, release_leases, renew_leases
from webapp.scheduler.tick import TickSettings, tick
from webapp.scheduler.wakeup import CHANNEL
from webapp.services.catalog import current_catalog

log = logging.getLogger("webapp.worker")

MAX_BACKOFF = 30.0


@dataclass
class ActiveJob:
    run: LeasedRun
    thread: threading.Thread
    deadline: float  # time.monotonic()
    timeout: float
    done: threading.Event = field(default_factory=threading.Event)


def interrupt_thread(thread: threading.Thread) -> None:
    """Raises JobTimeout inside a job's thread at its next Python instruction.

    Threads cannot be killed: a job blocked in C code (a long sleep, a socket read without a
    timeout) finishes that call first. Its slot is freed at once either way, and its late
    result is discarded because the run no longer belongs to it.
    """
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(JobTimeout)
        )


def database_unavailable(error: DBAPIError, delay: float) -> tuple[float, float]:
    """Logs a lost database and returns (this wait, the next one): the worker never dies of it."""
    db.session.rollback()
    log.warning(
        "database_unavailable",
        extra={"action": "database_unavailable", "error": str(error.orig), "retry_in": delay},
    )
    return delay, min(delay * 2, MAX_BACKOFF)


class WorkerProcess:
    """One worker: registers itself, runs rounds of steps until stopped, deregisters."""

    def __init__(self, app: Flask, concurrency: int, burst: bool = False) -> None:
        self.app = app
        self.config = app.config
        self.concurrency = concurrency
        self.burst = burst
        self.stop_requested = threading.Event()
        self.wake = threading.Event()
        self.worker_id: int | None = None
        self.active: dict[int, ActiveJob] = {}
        self.lock = threading.Lock()
        self.lock_ttl = timedelta(seconds=float(self.config["SCHEDULER_LOCK_TTL"]))
        self.poll_interval = float(self.config["SCHEDULER_POLL_INTERVAL"])
        self.settings = TickSettings.from_config(self.config)
        self.last_renewal = 0.0
        # Leases are renewed three times per TTL, so one late round never lets them lapse.
        self.renewal_interval = self.lock_ttl.total_seconds() / 3

    # --- registration ------------------------------------------------------------------------

    def register(self) -> int:
        with write_transaction(db.session) as session:
            worker = Worker(
                hostname=socket.gethostname(), pid=os.getpid(), concurrency=self.concurrency
            )
            session.add(worker)
            session.flush()
            self.worker_id = worker.id
        log.info(
            "worker_started",
            extra={
                "action": "worker_started",
                "worker_id": self.worker_id,
                "concurrency": self.concurrency,
            },
        )
        return self.worker_id

    def heartbeat(self, now: datetime) -> None:
        with write_transaction(db.session) as session:
            session.execute(
                update(Worker).where(Worker.id == self.worker_id).values(last_heartbeat_at=now)
            )

    def deregister(self) -> None:
        with write_transaction(db.session) as session:
            session.execute(
                update(Worker).where(Worker.id == self.worker_id).values(stopped_at=utcnow())
            )
        log.info("worker_stopped", extra={"action": "worker_stopped", "worker_id": self.worker_id})

    # --- signals and waking ------------------------------------------------------------------

    def request_stop(self, signum: int, _frame: FrameType | None) -> None:
        log.info("stop_requested", extra={"action": "stop_requested", "signal": signum})
        self.stop_requested.set()
        self.wake.set()

    def listen_for_notifications(self, url: str) -> None:
        """PostgreSQL only: wake the loop when a run is queued or a schedule changes."""
        import psycopg

        delay = 1.0
        while not self.stop_requested.is_set():
            try:
                with psycopg.connect(url, autocommit=True) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    delay = 1.0
                    while not self.stop_requested.is_set():
                        for _ in connection.notifies(timeout=1.0, stop_after=1):
                            self.wake.set()
            except psycopg.Error as error:
                log.warning("listen_failed", extra={"action": "listen_failed", "error": str(error)})
                self.stop_requested.wait(delay)
                delay = min(delay * 2, MAX_BACKOFF)

    # --- the pool ----------------------------------------------------------------------------

    def free_slots(self) -> int:
        with self.lock:
            return self.concurrency - len(self.active)

    def start_job(self, run: LeasedRun, catalog: Catalog) -> None:
        timeout = catalog.get(run.job).timeout if run.job in catalog else 60.0
        thread = threading.Thread(
            target=self.job_thread, args=(run, catalog), name=f"run-{run.id}", daemon=True
        )
        job = ActiveJob(run, thread, time.monotonic() + timeout, timeout)
        with self.lock:
            self.active[run.id] = job
        thread.start()

    def job_thread(self, run: LeasedRun, catalog: Catalog) -> None:
        assert self.worker_id is not None
        try:
            with self.app.app_context():
                try:
                    execute(run, catalog, self.config, db.session(), self.worker_id)
                finally:
                    db.session.remove()
        except JobTimeout:
            pass  # the supervisor has recorded the timeout already
        except Exception:
            log.exception("run_crashed", extra={"action": "run_crashed", "run_id": run.id})
        finally:
            with self.lock:
                self.active.pop(run.id, None)
            self.wake.set()

    def enforce_timeouts(self) -> None:
        assert self.worker_id is not None
        now = time.monotonic()
        with self.lock:
            late = [job for job in self.active.values() if job.deadline <= now]
            for job in late:
                del self.active[job.run.id]
        for job in late:
            error = f"timed out after {job.timeout:g} s"
            catalog = current_catalog()
            backoff = catalog.get(job.run.job).retry_backoff if job.run.job in catalog else 0.0
            outcome = decide(job.run, error, "", backoff, utcnow())
            record_outcome(db.session(), job.run, self.worker_id, outcome)
            interrupt_thread(job.thread)

    def running_ids(self) -> list[int]:
        with self.lock:
            return list(self.active)

    # --- one round ---------------------------------------------------------------------------

    def round(self) -> bool:
        """Reaps, ticks, leases and renews once; True when there was something to do."""
        assert self.worker_id is not None
        session = db.session()
        catalog = current_catalog()
        now = claims.database_now(session)
        reap_once(session, now)
        fired = tick(session, catalog, self.settings)
        leased = lease_once(session, self.worker_id, now, self.lock_ttl, self.free_slots())
        for run in leased:
            self.start_job(run, catalog)
        self.enforce_timeouts()
        if time.monotonic() - self.last_renewal >= self.renewal_interval:
            # The database's clock, the one the reapers compare leases with.
            renewed_at = claims.database_now(session)
            renew_leases(session, self.worker_id, self.running_ids(), renewed_at, self.lock_ttl)
            self.heartbeat(renewed_at)
            self.last_renewal = time.monotonic()
        session.commit()
        return bool(fired.claimed or leased)

    def idle(self) -> bool:
        """Nothing due, nothing queued that may start, nothing running here (for --burst)."""
        session = db.session()
        now = claims.database_now(session)
        earliest = claims.earliest_next_run(session)
        idle = (earliest is None or earliest > now) and not claims.any_run_available(session, now)
        session.commit()
        return idle and not self.running_ids()

    def seconds_to_sleep(self) -> float:
        """Until the earliest fire, the next lease renewal or job deadline, or the poll interval."""
        session = db.session()
        earliest = claims.earliest_next_run(session)
        session.commit()
        limits = [self.poll_interval, self.renewal_interval]
        if earliest is not None:
            limits.append((earliest - utcnow()).total_seconds())
        with self.lock:
            limits += [job.deadline - time.monotonic() for job in self.active.values()]
        return max(0.0, min(limits))

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        with self.app.app_context():
            self.connect_and_register()
            if db.engine.dialect.name == "postgresql" and not self.stop_requested.is_set():
                url = db.engine.url.set(drivername="postgresql")
                threading.Thread(
                    target=self.listen_for_notifications,
                    args=(url.render_as_string(hide_password=False),),
                    daemon=True,
                ).start()
            delay = 1.0
            try:
                while not self.stop_requested.is_set():
                    try:
                        busy = self.round()
                        if self.burst and not busy and self.idle():
                            break
                        pause = 0.0 if busy else self.seconds_to_sleep()
                        delay = 1.0
                    except DBAPIError as error:
                        pause, delay = database_unavailable(error, delay)
                    if pause:
                        self.wake.wait(pause)
                    self.wake.clear()
            finally:
                self.shut_down()

    def connect_and_register(self) -> None:
        delay = 1.0
        while not self.stop_requested.is_set():
            try:
                self.register()
                return
            except DBAPIError as error:
                pause, delay = database_unavailable(error, delay)
                self.stop_requested.wait(pause)

    def shut_down(self) -> None:
        """Lets running jobs finish within the grace period, returns the rest to the queue."""
        if self.worker_id is None:
            return
        grace_ends = time.monotonic() + float(self.config["SCHEDULER_SHUTDOWN_GRACE"])
        while self.running_ids() and time.monotonic() < grace_ends:
            self.wake.wait(0.1)
            self.wake.clear()
        try:
            release_leases(db.session(), self.worker_id, self.running_ids(), utcnow())
            self.deregister()
        except DBAPIError as error:
            log.warning(
                "shutdown_incomplete",
                extra={"action": "shutdown_incomplete", "error": str(error.orig)},
            )
        finally:
            db.session.remove()
