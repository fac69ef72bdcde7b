"""The worker process: a loop of steps (lease, tick, reap, renew) and a pool of job threads.

Each step is a function of webapp.scheduler that tests call one at a time with an explicit now;
this module repeats them, batches their writes and sleeps in between. The sleep is a
threading.Event: SIGTERM, a finished job or a PostgreSQL NOTIFY ends it at once.

Commits are what a database pays for, so they are shared: runs are leased many at a time
when jobs are short (a few at a time when they are long, so that other workers get their share),
and the outcomes of finished jobs are stored together, one transaction per batch.
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import FrameType

from flask import Flask
from sqlalchemy import update
from sqlalchemy.exc import DBAPIError

from webapp.catalog import Catalog
from webapp.catalog.current import current_catalog
from webapp.database import utcnow, write_transaction
from webapp.extensions import db
from webapp.models import Worker
from webapp.scheduler import claims
from webapp.scheduler.execution import (
    FinishedRun,
    JobError,
    JobTimeout,
    decide,
    run_job,
    store_outcomes,
)
from webapp.scheduler.leases import LeasedRun, lease_once, reap_once, release_leases, renew_leases
from webapp.scheduler.tick import TickSettings, tick
from webapp.scheduler.wakeup import CHANNEL

log = logging.getLogger("webapp.worker")

MAX_BACKOFF = 30.0
MAX_LEASE_BATCH = 100
# Leased-but-waiting work a worker may hold, in expected seconds per thread: enough to batch
# short jobs, too little to hoard long ones.
PREFETCH_SECONDS = 0.05
FLUSH_DELAY = 0.02  # seconds an outcome may wait for others before it is stored
FLUSH_BATCH = 100


def database_unavailable(error: DBAPIError, delay: float) -> tuple[float, float]:
    """Logs a lost database and returns (this wait, the next one): the worker never dies of it."""
    db.session.rollback()
    log.warning(
        "database_unavailable",
        extra={"action": "database_unavailable", "error": str(error.orig), "retry_in": delay},
    )
    return delay, min(delay * 2, MAX_BACKOFF)


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


@dataclass
class Slot:
    """One job thread and what it runs now."""

    thread: threading.Thread
    run: LeasedRun | None = None
    started_at: datetime | None = None
    deadline: float = 0.0  # time.monotonic()
    timeout: float = 0.0
    abandoned: bool = False


class JobPool:
    """`concurrency` threads taking leased runs from a local queue; outcomes wait in `finished`."""

    def __init__(
        self, app: Flask, catalog: Catalog, worker_id: int, concurrency: int, wake: threading.Event
    ) -> None:
        self.app = app
        self.catalog = catalog
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.wake = wake
        self.waiting: queue.SimpleQueue[LeasedRun | None] = queue.SimpleQueue()
        self.waiting_count = 0
        self.finished: list[FinishedRun] = []
        self.first_finished_at = 0.0
        self.lock = threading.Lock()
        self.slots: list[Slot] = []
        self.average_duration: float | None = None  # seconds, moving average
        for _ in range(concurrency):
            self.add_thread()

    def add_thread(self) -> None:
        slot = Slot(thread=threading.Thread(daemon=True))
        slot.thread = threading.Thread(target=self.work, args=(slot,), daemon=True, name="job")
        with self.lock:
            self.slots.append(slot)
        slot.thread.start()

    # --- in the job threads ------------------------------------------------------------------

    def work(self, slot: Slot) -> None:
        with self.app.app_context():
            try:
                while True:
                    run = self.waiting.get()
                    if run is None:
                        return
                    self.execute(slot, run)
                    if slot.abandoned:
                        return  # timed out: the pool has a new thread in this one's place
                    db.session.remove()
            except JobTimeout:
                return  # arrived after the job: the thread was abandoned all the same

    def execute(self, slot: Slot, run: LeasedRun) -> None:
        timeout = self.catalog.get(run.job).timeout if run.job in self.catalog else 60.0
        with self.lock:
            self.waiting_count -= 1
            slot.run, slot.started_at, slot.timeout = run, utcnow(), timeout
            slot.deadline = time.monotonic() + timeout
        started = time.monotonic()
        try:
            error, output, backoff = run_job(run, self.catalog, self.app.config, db.session())
        except JobTimeout:
            return  # the supervisor has recorded the timeout already
        except Exception as crash:  # run_job records job errors; this is the worker's own bug
            log.exception("run_crashed", extra={"action": "run_crashed", "run_id": run.id})
            shown = f"the worker failed: {type(crash).__name__}"  # details: the worker's log
            error, output, backoff = JobError(shown, traceback.format_exc()), None, 0.0
        finally:
            db.session.rollback()
        finished_at = utcnow()
        outcome = decide(run, error, output.text() if output else "", backoff, finished_at)
        with self.lock:
            if slot.abandoned:
                return
            assert slot.started_at is not None
            self.record(FinishedRun(run, outcome, slot.started_at, finished_at))
            slot.run = None
            took = time.monotonic() - started
            average = self.average_duration
            self.average_duration = took if average is None else 0.8 * average + 0.2 * took
        self.wake.set()

    def record(self, done: FinishedRun) -> None:
        """Called with the lock held."""
        if not self.finished:
            self.first_finished_at = time.monotonic()
        self.finished.append(done)

    # --- in the main thread ------------------------------------------------------------------

    def busy(self) -> int:
        with self.lock:
            return sum(1 for slot in self.slots if slot.run is not None) + self.waiting_count

    def wanted(self) -> int:
        """How many runs to lease now: free threads, plus a backlog when jobs are short."""
        with self.lock:
            running = sum(1 for slot in self.slots if slot.run is not None)
            free = self.concurrency - running - self.waiting_count
            average = self.average_duration
        if average is None or average >= PREFETCH_SECONDS:
            return max(free, 0)
        backlog = int(self.concurrency * PREFETCH_SECONDS / max(average, 1e-5))
        return max(0, min(MAX_LEASE_BATCH, free + backlog))

    def submit(self, runs: list[LeasedRun]) -> None:
        with self.lock:
            self.waiting_count += len(runs)
        for run in runs:
            self.waiting.put(run)

    def held_ids(self) -> list[int]:
        """Every run this worker holds a lease on: running, waiting, or finished but unstored."""
        with self.lock:
            ids = [slot.run.id for slot in self.slots if slot.run is not None]
            ids += [done.run.id for done in self.finished]
        return ids + self.waiting_ids()

    def waiting_ids(self) -> list[int]:
        # SimpleQueue cannot be inspected: drain and refill (main thread only, rarely).
        drained = []
        while True:
            try:
                drained.append(self.waiting.get_nowait())
            except queue.Empty:
                break
        for run in drained:
            self.waiting.put(run)
        return [run.id for run in drained if run is not None]

    def take_waiting(self) -> list[int]:
        """On shutdown: the runs no thread has started yet, taken back from the local queue."""
        taken = []
        while True:
            try:
                run = self.waiting.get_nowait()
            except queue.Empty:
                break
            if run is not None:
                taken.append(run.id)
        with self.lock:
            self.waiting_count -= len(taken)
        return taken

    def due_flush(self, force: bool = False) -> list[FinishedRun]:
        with self.lock:
            ready = self.finished and (
                force
                or len(self.finished) >= FLUSH_BATCH
                or time.monotonic() - self.first_finished_at >= FLUSH_DELAY
                or not any(slot.run for slot in self.slots)
            )
            if not ready:
                return []
            batch, self.finished = self.finished, []
        return batch

    def flush_deadline(self) -> float | None:
        with self.lock:
            return self.first_finished_at + FLUSH_DELAY if self.finished else None

    def enforce_timeouts(self) -> None:
        """Fails runs past their job's timeout and gives their slot a new thread."""
        now = time.monotonic()
        with self.lock:
            late = [s for s in self.slots if s.run is not None and s.deadline <= now]
            for slot in late:
                assert slot.run is not None and slot.started_at is not None
                slot.abandoned = True
                self.slots.remove(slot)
                backoff = (
                    self.catalog.get(slot.run.job).retry_backoff
                    if slot.run.job in self.catalog
                    else 0.0
                )
                error = JobError(f"timed out after {slot.timeout:g} s")
                finished_at = utcnow()
                outcome = decide(slot.run, error, "", backoff, finished_at)
                self.record(FinishedRun(slot.run, outcome, slot.started_at, finished_at))
        for slot in late:
            interrupt_thread(slot.thread)
            self.add_thread()

    def next_deadline(self) -> float | None:
        with self.lock:
            deadlines = [slot.deadline for slot in self.slots if slot.run is not None]
        return min(deadlines) if deadlines else None

    def stop(self) -> None:
        for _ in range(len(self.slots)):
            self.waiting.put(None)


class WorkerProcess:
    """One worker: registers itself, runs rounds of steps until stopped, deregisters."""

    def __init__(self, app: Flask, concurrency: int, burst: bool = False) -> None:
        self.app = app
        self.config = app.config
        self.concurrency = concurrency
        self.burst = burst
        self.stop_requested = threading.Event()
        self.wake = threading.Event()
        self.notified = threading.Event()
        self.worker_id: int | None = None
        self.pool: JobPool | None = None
        self.lock_ttl = timedelta(seconds=float(self.config["SCHEDULER_LOCK_TTL"]))
        self.poll_interval = float(self.config["SCHEDULER_POLL_INTERVAL"])
        self.settings = TickSettings.from_config(self.config)
        # Leases are renewed three times per TTL, so one late round never lets them lapse.
        self.renewal_interval = self.lock_ttl.total_seconds() / 3
        self.last_renewal = 0.0
        self.last_tick = 0.0
        self.next_fire: datetime | None = None

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
                            self.notified.set()
                            self.wake.set()
            except psycopg.Error as error:
                log.warning("listen_failed", extra={"action": "listen_failed", "error": str(error)})
                self.stop_requested.wait(delay)
                delay = min(delay * 2, MAX_BACKOFF)

    # --- one round ---------------------------------------------------------------------------

    def round(self) -> bool:
        """Stores outcomes, leases, ticks when due, reaps and renews on their timers.

        Leasing comes first: after a NOTIFY for a Run now, the job should start before anything
        else. Returns True when there was work, so that the loop goes round again at once.
        """
        assert self.worker_id is not None and self.pool is not None
        session = db.session()
        self.flush()
        notified = self.notified.is_set()
        self.notified.clear()
        worked = self.lease()
        now_monotonic = time.monotonic()
        fire_due = self.next_fire is not None and self.next_fire <= utcnow()
        if notified or fire_due or now_monotonic - self.last_tick >= self.poll_interval:
            fired = tick(session, current_catalog(), self.settings)
            self.last_tick = now_monotonic
            self.next_fire = claims.earliest_next_run(session)
            session.commit()
            if fired.queued:
                worked = self.lease() or worked
        self.pool.enforce_timeouts()
        if now_monotonic - self.last_renewal >= self.renewal_interval:
            # The database's clock, the one the reapers compare leases with.
            now = claims.database_now(session)
            reap_once(session, now)
            renew_leases(session, self.worker_id, self.pool.held_ids(), now, self.lock_ttl)
            self.heartbeat(now)
            self.last_renewal = now_monotonic
        session.commit()
        return worked

    def lease(self) -> bool:
        assert self.worker_id is not None and self.pool is not None
        wanted = self.pool.wanted()
        if wanted <= 0:
            return False
        runs = lease_once(db.session(), self.worker_id, None, self.lock_ttl, wanted)
        self.pool.submit(runs)
        return bool(runs)

    def flush(self, force: bool = False) -> None:
        assert self.worker_id is not None and self.pool is not None
        batch = self.pool.due_flush(force)
        if batch:
            store_outcomes(db.session(), self.worker_id, batch)

    def idle(self) -> bool:
        """Nothing due, nothing queued that may start, nothing held here (for --burst)."""
        assert self.pool is not None
        if self.pool.busy() or self.pool.flush_deadline() is not None:
            return False
        session = db.session()
        now = claims.database_now(session)
        earliest = claims.earliest_next_run(session)
        idle = (earliest is None or earliest > now) and not claims.any_run_available(session, now)
        session.commit()
        return idle

    def seconds_to_sleep(self) -> float:
        """Until the next fire, outcome flush, renewal or job deadline, or the poll interval."""
        assert self.pool is not None
        now = time.monotonic()
        limits = [
            self.poll_interval - (now - self.last_tick),
            self.renewal_interval - (now - self.last_renewal),
        ]
        if self.next_fire is not None:
            limits.append((self.next_fire - utcnow()).total_seconds())
        for deadline in (self.pool.flush_deadline(), self.pool.next_deadline()):
            if deadline is not None:
                limits.append(deadline - now)
        return max(0.0, min(limits))

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        with self.app.app_context():
            self.connect_and_register()
            if self.worker_id is None:
                return
            self.pool = JobPool(
                self.app, current_catalog(), self.worker_id, self.concurrency, self.wake
            )
            if db.engine.dialect.name == "postgresql":
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
                        worked = self.round()
                        if self.burst and not worked and self.idle():
                            break
                        pause = 0.0 if worked else self.seconds_to_sleep()
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
        if self.worker_id is None or self.pool is None:
            return
        pool = self.pool
        try:
            not_started = pool.take_waiting()
            grace_ends = time.monotonic() + float(self.config["SCHEDULER_SHUTDOWN_GRACE"])
            while pool.busy() and time.monotonic() < grace_ends:
                self.wake.wait(0.05)
                self.wake.clear()
            self.flush(force=True)
            running = [run_id for run_id in pool.held_ids() if run_id not in not_started]
            release_leases(db.session(), self.worker_id, not_started + running, utcnow())
            pool.stop()
            self.deregister()
        except DBAPIError as error:
            log.warning(
                "shutdown_incomplete",
                extra={"action": "shutdown_incomplete", "error": str(error.orig)},
            )
        finally:
            db.session.remove()
