"""What a Celery worker of the fleet does with `webapp.run` (celery_executor sends it).

Each Celery worker (the `celery worker` command: one row in `workers`, registered before its
pool starts, heartbeating, shared by its pool's processes) runs a task so:
1. Takes the run over, in one conditional UPDATE: only the attempt the task names, still
   running, still held by the worker that sent it (`sent_by`) and not expired. Anything else
   (the reaper took the lease back, another copy of the message was taken first, the run is
   finished) makes the task stale: logged `celery_task_stale` and acknowledged, nothing run.
2. Runs the job through execution.run_job: the same catalog lookup and argument validation as
   the built-in pool, with ctx.deadline at the job's timeout; a thread renews the lease.
3. Stores the outcome with execution.store_outcomes, fenced by worker and attempt: an attempt
   that no longer holds the lease is dropped and logged (`run_outcome_dropped`).

Celery's soft time limit (just after the job's deadline) raises in the job; an error raised once
the deadline has passed is recorded as the timeout, as the built-in pool records it. Past the
hard limit Celery kills the process, and the Celery worker records the timeout (on_failure runs
in the worker's main process then). A Celery worker killed mid-task renews nothing more: any
scheduler worker's reaper takes the lease back and queues the run again; the message that
Celery delivers again later is stale.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from celery import Celery, Task, signals
from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from flask import Flask
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from webapp.catalog.current import current_catalog
from webapp.config import settings
from webapp.database import database_now, utcnow, write_transaction
from webapp.extensions import db
from webapp.models import Run
from webapp.scheduler import runs
from webapp.scheduler.celery_executor import TASK_NAME
from webapp.scheduler.execution import (
    FinishedRun,
    RunOutputStream,
    finish,
    job_timeout,
    run_job,
    store_outcomes,
    timed_out_result,
)
from webapp.scheduler.executor import (
    Backoff,
    deregister_worker,
    heartbeat,
    register_worker,
    retry_while_database_down,
    touch_liveness,
)
from webapp.scheduler.lease_query import LEASED_COLUMNS
from webapp.scheduler.leases import LeasedRun, leased_run, renew_leases

log = logging.getLogger("webapp.worker")

STORE_RETRY_MAX = 5.0  # seconds between two tries to store an outcome while the database is away


def take_over(
    session: Session,
    run_id: int,
    attempt: int,
    idempotency_key: str,
    sent_by: int | None,
    worker_id: int,
    lock_ttl: timedelta,
) -> LeasedRun | None:
    """The run's lease, moved from the worker that sent it to this Celery worker; None when the
    task is stale (that attempt's lease is not its sender's any more, or has passed)."""
    with write_transaction(session):
        now = database_now(session)
        row = runs.take_over(
            session, run_id, attempt, idempotency_key, sent_by, worker_id, now, lock_ttl
        )
    return None if row is None else leased_run(row)


def held_run(session: Session, run_id: int, attempt: int, worker_id: int) -> LeasedRun | None:
    """The run if this Celery worker holds that attempt's lease."""
    row = session.execute(
        select(*LEASED_COLUMNS).where(
            Run.id == run_id,
            Run.attempt == attempt,
            Run.status == "running",
            Run.worker_id == worker_id,
        )
    ).one_or_none()
    session.rollback()
    return None if row is None else leased_run(row)


class LeaseKeeper:
    """Renews one run's lease from a thread while its job runs (every third of the TTL)."""

    def __init__(self, app: Flask, worker_id: int, run: LeasedRun, lock_ttl: timedelta) -> None:
        self.app = app
        self.worker_id = worker_id
        self.run = run
        self.lock_ttl = lock_ttl
        self.done = threading.Event()
        self.stop = threading.Event()  # an admin asked the run to stop: the job's ctx.stop
        self.thread = threading.Thread(target=self.renew, daemon=True, name="lease")

    def __enter__(self) -> LeaseKeeper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def renew(self) -> None:
        with self.app.app_context():
            try:
                self.keep_renewing()
            finally:
                db.session.remove()

    def keep_renewing(self) -> None:
        while not self.done.wait(self.lock_ttl.total_seconds() / 3):
            try:
                session = db.session()
                now = database_now(session)
                ids = [self.run.id]
                renewed = renew_leases(session, self.worker_id, ids, now, self.lock_ttl)
            except DBAPIError as error:
                db.session.rollback()
                log.warning(
                    "lease_renewal_failed",
                    extra={"action": "lease_renewal_failed", "error": str(error.orig)},
                )
                continue
            if renewed.get(self.run.id):
                self.stop.set()
            if not renewed and not self.done.is_set():  # not merely stored meanwhile
                log.warning(
                    "run_lease_lost",
                    extra={
                        "action": "run_lease_lost",
                        "run_id": self.run.id,
                        "attempt": self.run.attempt,
                        "state": "running",
                    },
                )
                return


class CeleryNode:
    """This Celery worker as the scheduler sees it: its `workers` row, heartbeat and tasks."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.lock_ttl = settings(app).lock_ttl
        self.worker_id: int | None = None
        self.stopping = threading.Event()
        self.registering = threading.Lock()

    # --- the Celery worker's life ------------------------------------------------------------

    def register(self, concurrency: int) -> int:
        """Adds this Celery worker's row; waits for the database if it is away."""
        with self.registering:
            if self.worker_id is None:
                with self.app.app_context():
                    added = retry_while_database_down(lambda: self.add_row(concurrency))
                assert added is not None, "without a stop, it tries until it gets through"
                self.worker_id = added
            log.info(
                "celery_worker_started",
                extra={
                    "action": "celery_worker_started",
                    "worker_id": self.worker_id,
                    "concurrency": concurrency,
                },
            )
            return self.worker_id

    def add_row(self, concurrency: int) -> int:
        with write_transaction(db.session) as session:
            return register_worker(session, concurrency, "celery-worker")

    def start_heartbeat(self) -> None:
        threading.Thread(target=self.beat, daemon=True, name="heartbeat").start()

    def beat(self) -> None:
        with self.app.app_context():
            while not self.stopping.wait(self.lock_ttl.total_seconds() / 3):
                touch_liveness(settings(self.app).SCHEDULER_LIVENESS_FILE)
                try:
                    assert self.worker_id is not None
                    with write_transaction(db.session) as session:
                        heartbeat(session, self.worker_id, database_now(session))
                except DBAPIError as error:
                    log.warning(
                        "heartbeat_failed",
                        extra={"action": "heartbeat_failed", "error": str(error.orig)},
                    )
                finally:
                    db.session.remove()

    def deregister(self) -> None:
        self.stopping.set()
        if self.worker_id is None:
            return
        with self.app.app_context(), write_transaction(db.session) as session:
            deregister_worker(session, self.worker_id)
        log.info("worker_stopped", extra={"action": "worker_stopped", "worker_id": self.worker_id})

    # --- a task ------------------------------------------------------------------------------

    def execute(self, run_id: int, attempt: int, idempotency_key: str, sent_by: int | None) -> None:
        worker_id = self.worker_id or self.register(concurrency=1)
        if not isinstance(sys.stdout, RunOutputStream):
            sys.stdout = RunOutputStream(sys.stdout)  # a job's prints go to its run's output
        session = db.session()
        ttl = self.lock_ttl
        run = take_over(session, run_id, attempt, idempotency_key, sent_by, worker_id, ttl)
        if run is None:
            # Expected, not a fault: the copies a resend or a redelivery leave behind.
            log.info(
                "celery_task_stale",
                extra={
                    "action": "celery_task_stale",
                    "run_id": run_id,
                    "attempt": attempt,
                    "reason": "the attempt's lease is not its sender's any more",
                },
            )
            return
        log.debug(  # at INFO, its outcome tells (execution.store_outcomes)
            "run_started",
            extra={"action": "run_started", "run_id": run.id, "attempt": run.attempt},
        )
        catalog = current_catalog()
        started_at = utcnow()
        deadline = time.monotonic() + job_timeout(catalog, run.job)
        with LeaseKeeper(self.app, worker_id, run, self.lock_ttl) as keeper:
            try:
                given = settings(self.app).job_settings()
                result = run_job(run, catalog, given, session, deadline, keeper.stop)
            except SoftTimeLimitExceeded:  # arrived after the job's own code had returned
                result = timed_out_result(catalog, run.job)
            session.rollback()
            if result.error is not None and time.monotonic() >= deadline:
                # Celery's soft limit, or whatever the job raised once its time was up.
                result = timed_out_result(catalog, run.job, result.output)
            self.store(session, worker_id, finish(run, result, started_at))

    def store(self, session: Session, worker_id: int, done: FinishedRun) -> None:
        """Stores the outcome (fenced); while the database is away, tries again for as long as
        the lease would last, after which a reaper's requeue repeats the attempt anyway."""
        retry_while_database_down(
            lambda: store_outcomes(session, worker_id, [done]),
            give_up_after=self.lock_ttl.total_seconds(),
            backoff=Backoff(0.5, STORE_RETRY_MAX),
            action="run_outcomes_not_stored",
            count=1,
        )

    def record_hard_timeout(self, run_id: int, attempt: int) -> None:
        """Celery killed the task's process at its hard limit: the attempt timed out."""
        if self.worker_id is None:
            return
        session = db.session()
        run = held_run(session, run_id, attempt, self.worker_id)
        if run is None:
            return
        result = timed_out_result(current_catalog(), run.job)
        assert run.started_at is not None, "take_over wrote the start mark"
        store_outcomes(session, self.worker_id, [finish(run, result, run.started_at)])


def install_tasks(celery: Celery, app: Flask) -> CeleryNode:
    """Registers `webapp.run` on `celery`, run inside `app`, and this Celery worker's life
    (registration, heartbeat, deregistration) on Celery's signals."""
    node = CeleryNode(app)

    class RunTask(Task):
        def on_failure(
            self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
        ) -> None:
            if isinstance(exc, TimeLimitExceeded):
                with app.app_context():
                    node.record_hard_timeout(args[0], args[1])

    @celery.task(name=TASK_NAME, base=RunTask, acks_late=True, reject_on_worker_lost=True)
    def run(run_id: int, attempt: int, idempotency_key: str, sent_by: int | None) -> None:
        with app.app_context():
            try:
                node.execute(run_id, attempt, idempotency_key, sent_by)
            finally:
                db.session.remove()

    def worker_init(sender: Any = None, **_: Any) -> None:
        # In the main process, before the pool starts: its processes share this row.
        node.register(concurrency=int(getattr(sender, "concurrency", 1) or 1))

    def worker_process_init(**_: Any) -> None:
        # A forked pool process must not share the parent's database connections.
        with app.app_context():
            db.engine.dispose(close=False)

    def worker_ready(**_: Any) -> None:
        node.start_heartbeat()  # after the pool's first fork: no thread is copied into it

    def worker_shutdown(**_: Any) -> None:
        node.deregister()

    signals.worker_init.connect(worker_init, weak=False)
    signals.worker_process_init.connect(worker_process_init, weak=False)
    signals.worker_ready.connect(worker_ready, weak=False)
    signals.worker_shutdown.connect(worker_shutdown, weak=False)
    return node
