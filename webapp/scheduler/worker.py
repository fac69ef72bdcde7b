"""The worker process: a loop of steps (lease, tick, reap, renew) feeding a job pool (pool.py).

Each step is a function of webapp.scheduler that tests call one at a time with an explicit now;
this module repeats them, batches their writes and sleeps in between. The sleep is a
threading.Event: SIGTERM, a finished job, a PostgreSQL NOTIFY or, on SQLite, a datagram on the
worker's wake socket (local_wakeup.py) ends it at once.

Commits are what a database pays for, so they are shared: runs are leased many at a time
when jobs are short (a few at a time when they are long, so that other workers get their share),
and the outcomes of finished jobs are stored together, one transaction per batch.
"""

from __future__ import annotations

import gc
import logging
import math
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime

from flask import Flask
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from webapp.catalog.current import current_catalog
from webapp.config import Settings, settings
from webapp.database import database_now, lost_race, utcnow, write_transaction
from webapp.extensions import db
from webapp.scheduler import claims
from webapp.scheduler.execution import prints_go_to_runs, store_outcomes
from webapp.scheduler.executor import (
    MAX_BACKOFF,
    Backoff,
    database_unavailable,
    deregister_worker,
    heartbeat,
    register_worker,
    retry_while_database_down,
    touch_liveness,
)
from webapp.scheduler.leases import (
    lease_with_starts,
    reap_once,
    release_leases,
    renew_leases,
)
from webapp.scheduler.local_wakeup import WakeSocket, wake_directory
from webapp.scheduler.logs import bind_process_fields
from webapp.scheduler.outbox import send_notifications
from webapp.scheduler.pool import JobPool, ThreadJobPool
from webapp.scheduler.process_pool import ProcessJobPool
from webapp.scheduler.tick import TickSettings, earliest_of, tick
from webapp.scheduler.wakeup import CHANNEL
from webapp.scheduler.watchdog import watch_overdue

log = logging.getLogger("webapp.worker")

LIVENESS_INTERVAL = 1.0  # seconds: touch_liveness at most this often
WATCH_INTERVAL = 30.0  # the overdue watchdog's period (at least the poll interval)
# The name of the thread that sends the outbox (send_notifications_loop).
NOTIFICATIONS_THREAD = "scheduler-notifications"
POOLS: dict[str, type[JobPool]] = {"thread": ThreadJobPool, "process": ProcessJobPool}


def freeze_start_up() -> None:
    """Puts the objects of start-up (the app, the catalog, the libraries' classes: about 150,000,
    alive as long as the process) out of the garbage collector's reach. A full collection then
    walks only what the worker made since: 2-15 ms of CPU instead of about 100, each one
    stopping every thread of the worker (the leases, the job threads), as a herd's allocations
    bring several (bench/README.md, "... the collector's pauses")."""
    gc.collect()  # what start-up left as garbage is freed, not frozen
    gc.freeze()


def pool_kind(chosen: Settings, pool: str) -> type[JobPool]:
    """The chosen pool, or the hand-off to Celery (imported only then: Celery is an extra)."""
    if chosen.uses_celery:
        from webapp.scheduler.celery_executor import CeleryJobPool

        return CeleryJobPool
    return POOLS[pool]


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_stop_signals(stop: Callable[[int], None]) -> None:
    """Calls `stop(signum)` for each SIGTERM or SIGINT, in a thread of its own. A Python signal
    handler runs in the main thread between two of its steps: one that took a lock that is not
    reentrant (an Event's) waited forever when the main thread, or the handler of an earlier
    signal that it interrupted, held that lock. Ctrl-C on `make run` did that: SIGINT reached the
    worker and `flask serve`, which sent SIGTERM a moment later, and the worker hung in
    Event.set. So the handlers do nothing; the interpreter writes each signal's number to a
    socket (signal.set_wakeup_fd), which the thread reads. Main thread only."""
    receive, send = socket.socketpair()
    send.setblocking(False)
    signal.set_wakeup_fd(send.fileno(), warn_on_full_buffer=False)
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda _signum, _frame: None)

    def watch(sockets: tuple[socket.socket, socket.socket]) -> None:
        while True:
            for signum in sockets[0].recv(64):
                if signum in STOP_SIGNALS:
                    stop(signum)

    # The thread holds both sockets: the write end must stay open for the interpreter.
    threading.Thread(target=watch, args=((receive, send),), name="signals", daemon=True).start()


class WorkerProcess:
    """One worker: registers itself, runs rounds of steps until stopped, deregisters."""

    def __init__(
        self, app: Flask, concurrency: int, burst: bool = False, pool: str = "thread"
    ) -> None:
        self.app = app
        self.config = settings(app)
        self.concurrency = concurrency
        self.burst = burst
        self.pool_kind = pool_kind(self.config, pool)
        self.stop_requested = threading.Event()
        self.wake = threading.Event()
        self.notified = threading.Event()
        self.worker_id: int | None = None
        self.pool: JobPool | None = None
        self.wake_socket: WakeSocket | None = None
        self.lock_ttl = self.config.lock_ttl
        self.poll_interval = self.config.SCHEDULER_POLL_INTERVAL
        self.settings = TickSettings.of(self.config)
        # Leases are renewed three times per TTL, so one late round never lets them lapse.
        self.renewal_interval = self.lock_ttl.total_seconds() / 3
        # Retried within a renewal interval: back in time to renew before the leases lapse.
        self.max_backoff = min(MAX_BACKOFF, self.renewal_interval)
        self.last_renewal = 0.0
        # After a lost connection or a pause this worker reaps only once it has been renewing
        # again for a whole TTL: other workers who could not renew meanwhile (the database was
        # down, or this worker held its lock while frozen) have renewed by then.
        self.reap_not_before = 0.0
        self.last_tick = 0.0
        self.next_fire: datetime | None = None
        self.next_start: datetime | None = None  # of the first run its ticks queued ahead
        self.overdue_grace = self.config.overdue_grace
        self.max_running = self.config.SCHEDULER_MAX_RUNNING
        self.watch_interval = max(WATCH_INTERVAL, self.poll_interval)
        self.last_watch: float | None = None  # None: watch in the first round
        self.queue_overdue: bool | None = None  # the watchdog's last view of the queue
        self.last_alive = -math.inf  # time.monotonic() of the last touch_liveness

    # --- registration ------------------------------------------------------------------------

    def register(self) -> int:
        with write_transaction(db.session) as session:
            self.worker_id = register_worker(session, self.concurrency, self.pool_kind.kind)
        bind_process_fields(worker_id=self.worker_id)
        log.info(
            "worker_started",
            extra={
                "action": "worker_started",
                "worker_id": self.worker_id,
                "concurrency": self.concurrency,
                "pool": self.pool_kind.kind,
            },
        )
        return self.worker_id

    def heartbeat(self, now: datetime) -> None:
        # The operator's workers page shows the job threads left running past their timeout.
        abandoned = self.pool.abandoned_threads if self.pool is not None else 0
        assert self.worker_id is not None
        with write_transaction(db.session) as session:
            heartbeat(session, self.worker_id, now, abandoned)

    def deregister(self) -> None:
        assert self.worker_id is not None
        with write_transaction(db.session) as session:
            deregister_worker(session, self.worker_id)
        log.info("worker_stopped", extra={"action": "worker_stopped", "worker_id": self.worker_id})

    # --- signals and waking ------------------------------------------------------------------

    def stop(self, signum: int) -> None:
        """SIGTERM or SIGINT, in the signal thread (on_stop_signals): the loop ends its round,
        hands back what it has not started and deregisters (shut_down)."""
        log.info("stop_requested", extra={"action": "stop_requested", "signal": signum})
        self.stop_requested.set()
        self.wake.set()

    def listen_for_notifications(self, url: str) -> None:
        """PostgreSQL only: wake the loop when a run is queued or a schedule changes."""
        import psycopg
        from psycopg import sql

        listen = sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL))
        backoff = Backoff()
        while not self.stop_requested.is_set():
            try:
                with psycopg.connect(url, autocommit=True) as connection:
                    connection.execute(listen)
                    backoff.reset()
                    while not self.stop_requested.is_set():
                        for _ in connection.notifies(timeout=1.0, stop_after=1):
                            self.notified.set()
                            self.wake.set()
            except psycopg.Error as error:
                log.warning("listen_failed", extra={"action": "listen_failed", "error": str(error)})
                self.stop_requested.wait(backoff.next())

    def listen_locally(self, wake_socket: WakeSocket) -> None:
        """SQLite: wake the loop when the web process on this machine queues a run or changes a
        schedule (until shut_down closes the socket)."""
        while wake_socket.wait():
            self.notified.set()
            self.wake.set()

    def start_listening(self) -> None:
        """The wake-up thread of this database: LISTEN on PostgreSQL (none behind a pooler
        without SCHEDULER_LISTEN_DATABASE_URL: the loop polls), a socket on SQLite."""
        url = db.engine.url
        if db.engine.dialect.name == "postgresql":
            conninfo = self.config.listen_url(url.render_as_string(hide_password=False))
            if conninfo is None:
                log.info(
                    "wakeups_by_polling",
                    extra={
                        "action": "wakeups_by_polling",
                        "reason": "SCHEDULER_DATABASE_POOLER without SCHEDULER_LISTEN_DATABASE_URL",
                        "poll_interval": self.poll_interval,
                    },
                )
                return
            threading.Thread(
                target=self.listen_for_notifications, args=(conninfo,), daemon=True
            ).start()
            return
        directory = wake_directory(url)
        if directory is not None:
            self.wake_socket = WakeSocket.bind(directory, str(self.worker_id))
        if self.wake_socket is not None:
            threading.Thread(
                target=self.listen_locally, args=(self.wake_socket,), daemon=True
            ).start()

    # --- notifications ----------------------------------------------------------------------

    def send_notifications_loop(self) -> None:
        """Sends the outbox every poll interval, in a thread of its own: a slow mail server or
        webhook must not hold up the loop, which renews the leases of running jobs."""
        with self.app.app_context():
            while not self.stop_requested.is_set():
                assert self.worker_id is not None
                try:
                    while (
                        send_notifications(db.session(), self.config, self.worker_id, utcnow())
                        and not self.stop_requested.is_set()
                    ):
                        pass
                except Exception as error:  # the database is away, or a bug: try again later
                    db.session.rollback()
                    log.warning(
                        "notifications_not_sent",
                        extra={"action": "notifications_not_sent", "error": str(error)},
                    )
                self.stop_requested.wait(self.poll_interval)
            db.session.remove()

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
        if self.next_start is not None and self.next_start <= utcnow():
            self.next_start = None  # its runs may start: this round's lease takes them
        worked = self.lease()
        now_monotonic = time.monotonic()
        fire_due = self.next_fire is not None and self.next_fire <= utcnow()
        if notified or fire_due or now_monotonic - self.last_tick >= self.poll_interval:
            fired = tick(
                session, current_catalog(), self.settings, between_batches=self.renew_if_due
            )
            self.last_tick = now_monotonic
            first_due = claims.earliest_next_run(session)
            # A fire is claimed SCHEDULER_FIRE_AHEAD before its time; its run starts at it.
            self.next_fire = first_due and first_due - self.settings.fire_ahead
            # Kept until it comes: the ticks after it queue nothing more (a herd queued ahead).
            self.next_start = earliest_of(self.next_start, fired.first_start)
            session.commit()
            if fired.queued:
                worked = self.lease() or worked
        self.pool.enforce_timeouts()
        if now_monotonic - self.last_renewal >= self.renewal_interval:
            self.renew_and_reap(session, now_monotonic)
        self.watch_if_due(session)
        session.commit()
        return worked

    def renew_if_due(self) -> None:
        started = time.monotonic()
        if started - self.last_renewal >= self.renewal_interval:
            self.renew_and_reap(db.session(), started)

    def renew_and_reap(self, session: Session, started: float) -> None:
        """Renews this worker's leases (dropping the runs it finds lost), gives back the runs
        that waited more than a renewal interval for a slot (to a worker that can start them),
        then reaps expired leases: after renewing, so that a worker never reaps its own live
        runs after a pause. `started`: time.monotonic() before the renewal's statement (so the
        deadline it gives the pool is never later than `locked_until`)."""
        assert self.worker_id is not None and self.pool is not None
        # The database's clock, the one the reapers compare leases with.
        now = database_now(session)
        held = self.pool.held_ids()
        renewed = renew_leases(session, self.worker_id, held, now, self.lock_ttl)
        self.pool.renewed(held, set(renewed), started + self.lock_ttl.total_seconds())
        self.pool.ask_to_stop([run_id for run_id, asked in renewed.items() if asked])
        stale = self.pool.take_waiting(leased_before=started - self.renewal_interval)
        try:
            release_leases(session, self.worker_id, [run.run.id for run in stale])
        except DBAPIError:
            self.pool.put_back(stale)
            raise
        if self.last_renewal and started - self.last_renewal > 2 * self.renewal_interval:
            self.connection_lost()  # this worker was paused (SIGSTOP, a stall): as if cut off
        if self.reap_not_before == math.inf:
            self.reap_not_before = started + self.lock_ttl.total_seconds()
        if started >= self.reap_not_before:
            reap_once(session, now)
        self.heartbeat(now)
        self.last_renewal = started

    def watch_if_due(self, session: Session) -> None:
        """The overdue watchdog, every watch interval: batch after batch until it has caught
        up (renewing leases between them, as the tick does)."""
        started = time.monotonic()
        if self.last_watch is not None and started - self.last_watch < self.watch_interval:
            return
        self.last_watch = started  # a failing watch waits for its next turn, like the others
        while True:
            now = database_now(session)
            watched = watch_overdue(
                session, now, self.overdue_grace, self.queue_overdue, settings=self.config
            )
            self.queue_overdue = watched.queue_overdue
            if not watched.more:
                return
            self.renew_if_due()

    def connection_lost(self) -> None:
        """The database could not be reached, or this worker was paused: no reaping until it
        has been renewing again for a TTL."""
        self.reap_not_before = math.inf

    def lease(self) -> bool:
        """Leases what the slots can start soon and, in the same transaction, writes the start
        marks of the runs the free slots take next and clears those gone stale: the start mark
        protocol of leases.py."""
        assert self.worker_id is not None and self.pool is not None
        leased_at = time.monotonic()  # before the statement: never later than `locked_until`
        wanted = self.pool.wanted(leased_at)
        stale = [held.run.id for held in self.pool.stale_marks(leased_at)]
        chosen, room = self.pool.to_start(leased_at)
        if wanted <= 0 and not chosen and not stale:
            return False
        lease = lease_with_starts(
            db.session(),
            self.worker_id,
            None,
            self.lock_ttl,
            max(0, wanted),
            [held.run.id for held in chosen],
            room,
            self.max_running,
            stale,
        )
        if stale:  # committed: no log line inside a transaction
            log.info(
                "start_marks_taken_back",
                extra={"action": "start_marks_taken_back", "run_ids": stale},
            )
        new = self.pool.submit(lease.runs, leased_at + self.lock_ttl.total_seconds(), leased_at)
        self.pool.start_marked(chosen + new[:room], lease.started)
        return bool(lease.runs)

    def flush(self, force: bool = False) -> None:
        assert self.worker_id is not None and self.pool is not None
        batch = self.pool.due_outcomes(force)
        if not batch:
            return
        try:
            store_outcomes(db.session(), self.worker_id, batch)
        except DBAPIError:
            # Kept in memory, stored on the next round that reaches the database.
            log.warning(
                "run_outcomes_not_stored",
                extra={"action": "run_outcomes_not_stored", "count": len(batch)},
            )
            raise
        self.pool.stored(batch)  # not before: a failed commit is tried again next round

    def idle(self) -> bool:
        """Nothing due, nothing queued that may start, nothing held here (for --burst)."""
        assert self.pool is not None
        if self.pool.busy() or self.pool.flush_deadline() is not None:
            return False
        session = db.session()
        now = database_now(session)
        earliest = claims.earliest_next_run(session)
        idle = (earliest is None or earliest > now) and not claims.any_run_available(session, now)
        session.commit()
        return idle

    def seconds_to_sleep(self) -> float:
        """Until the next fire, outcome flush, renewal, job deadline or stale start mark, or the
        poll interval."""
        assert self.pool is not None
        now = time.monotonic()
        limits = [
            self.poll_interval - (now - self.last_tick),
            self.renewal_interval - (now - self.last_renewal),
        ]
        for moment in (self.next_fire, self.next_start):
            if moment is not None:
                limits.append((moment - utcnow()).total_seconds())
        pool = self.pool
        for deadline in (pool.flush_deadline(), pool.next_deadline(), pool.stale_marks_deadline()):
            if deadline is not None:
                limits.append(deadline - now)
        return max(0.0, min(limits))

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        on_stop_signals(self.stop)
        with self.app.app_context(), prints_go_to_runs():
            self.connect_and_register()
            if self.worker_id is None:
                return
            self.pool = self.pool_kind(
                self.app, current_catalog(), self.config.job_settings(), self.concurrency, self.wake
            )
            self.pool.worker_id = self.worker_id
            self.pool.start()
            notifications = threading.Thread(
                target=self.send_notifications_loop, name=NOTIFICATIONS_THREAD, daemon=True
            )
            notifications.start()
            self.start_listening()
            freeze_start_up()
            try:
                self.loop()
            finally:
                # A --burst worker's loop ends without a signal: the threads beside it (the
                # notifications, the listener) stop with it, as they do on SIGTERM, rather than
                # go on sending as a worker that has deregistered.
                self.stop_requested.set()
                self.shut_down()
                notifications.join(self.poll_interval)  # it wakes at once unless it is sending

    def loop(self) -> None:
        backoff = Backoff(1.0, self.max_backoff)
        while not self.stop_requested.is_set():
            self.stay_alive()
            try:
                worked = self.round()
                if self.burst and not worked and self.idle():
                    break
                pause = 0.0 if worked else self.seconds_to_sleep()
                backoff.reset()
            except DBAPIError as error:
                if lost_race(error):  # rolled back whole (a deadlock's loser): go on at once
                    db.session.rollback()
                    log.info("transaction_lost_race", extra={"action": "transaction_lost_race"})
                    continue
                pause = backoff.next()
                database_unavailable(error, pause)
                self.connection_lost()
            except Exception:  # a bug, or a value nobody foresaw: the runs it holds go on
                db.session.rollback()
                pause = backoff.next()
                log.exception("worker_round_failed", extra={"action": "worker_round_failed"})
            if pause:
                self.wake.wait(pause)
            self.wake.clear()

    def stay_alive(self) -> None:
        """Touches SCHEDULER_LIVENESS_FILE (at most once a second: a busy loop goes round at
        once)."""
        now = time.monotonic()
        if now - self.last_alive >= LIVENESS_INTERVAL:
            touch_liveness(self.config.SCHEDULER_LIVENESS_FILE)
            self.last_alive = now

    def connect_and_register(self) -> None:
        def attempt() -> int:
            self.stay_alive()  # alive while it waits for the database
            return self.register()

        retry_while_database_down(attempt, stop=self.stop_requested)

    def shut_down(self) -> None:
        """Lets running jobs finish within the grace period, returns the rest to the queue."""
        if self.wake_socket is not None:
            self.wake_socket.close()  # from now on a Run now is for the other workers
        if self.worker_id is None or self.pool is None:
            return
        pool = self.pool
        try:
            not_started = [held.run.id for held in pool.take_waiting()]
            grace_ends = time.monotonic() + self.config.SCHEDULER_SHUTDOWN_GRACE
            while pool.busy() and time.monotonic() < grace_ends:
                self.wake.wait(0.05)
                self.wake.clear()
            self.flush(force=True)
            running = pool.held_ids()
            release_leases(db.session(), self.worker_id, not_started + running)
            pool.release(running)
            self.deregister()
        except DBAPIError as error:
            log.warning(
                "shutdown_incomplete",
                extra={"action": "shutdown_incomplete", "error": str(error.orig)},
            )
        finally:
            pool.stop()
            db.session.remove()
