"""Hand-off of leased runs to a Celery fleet (SCHEDULER_EXECUTOR=celery): the Celery app, and
the pool that sends runs instead of running them.

The tick and the leases stay the worker's: it leases runs as with its own pool, and one sender
thread publishes each as the task `webapp.run(run_id, attempt, idempotency_key, sent_by)`. A
Celery worker takes the run over (celery_tasks: the run's worker_id becomes the Celery
worker's, in one conditional UPDATE), runs it, renews its lease and stores its outcome fenced.

Until a Celery worker takes a sent run over, the sending worker keeps renewing its lease, so a
run may wait in Celery's queue longer than the lock TTL without its lease lapsing and an attempt
being burnt. Those runs are the ones "in flight" (SCHEDULER_CELERY_MAX_IN_FLIGHT bounds them):
the worker leases more only as Celery starts them. A message can be lost (a broker restarted
without persistence), so a run not taken over after a lock TTL is sent again. Duplicates are
harmless: the first one taken over wins; any other finds the run no longer held by its sender
and is dropped (`celery_task_stale`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import Celery
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError

from webapp.config import Settings, settings
from webapp.extensions import db
from webapp.models import Run
from webapp.scheduler.execution import job_timeout
from webapp.scheduler.leases import LeasedRun, release_leases
from webapp.scheduler.pool import MAX_LEASE_BATCH, Held, JobPool, Slot

log = logging.getLogger("webapp.worker")

TASK_NAME = "webapp.run"
# Celery's soft limit comes this long after the job's own deadline (ctx.deadline), so that a job
# which checks its deadline stops by itself first; an error raised after the deadline counts as
# the timeout either way.
SOFT_LIMIT_MARGIN = 0.5
# Then the hard limit: Celery kills the process. Longer than the thread pool's grace: after the
# soft limit the task still stores the outcome, a database round trip.
HARD_LIMIT_GRACE = 5.0
# How often the sender looks for runs that Celery has started (and so no longer count as in
# flight), and waits at most for new runs to send.
CHECK_INTERVAL = 1.0
SEND_RETRY_FIRST = 1.0  # seconds without sending after the broker refused a message; doubling
SEND_RETRY_MAX = 30.0
BROKER_CHECK_TIMEOUT = 5.0  # seconds: the check at start


def make_celery(chosen: Settings) -> Celery:
    """The Celery app of the scheduler's settings: its broker and queue, no result backend
    (outcomes live in the runs table), and late acknowledgement, so that a task whose worker
    died is delivered again (and dropped as stale if its lease has moved on meanwhile)."""
    queue = chosen.SCHEDULER_CELERY_QUEUE
    celery = Celery("webapp", broker=chosen.SCHEDULER_CELERY_BROKER_URL, set_as_current=False)
    celery.conf.update(
        task_default_queue=queue,
        task_routes={TASK_NAME: {"queue": queue}},
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # One message at a time per process: a long job does not hold others' messages.
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        # A task running when the broker connection drops goes on: its outcome is ours to store
        # (fenced), and its redelivery would be dropped as stale anyway.
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return celery


class CeleryJobPool(JobPool):
    """Sends leased runs to Celery from one thread; holds their leases until Celery starts them.

    `held` has the runs leased and not yet taken over by a Celery worker: `waiting` those not
    sent yet, `sent_at` those sent (time.monotonic() of the last send).
    """

    kind = "celery-sender"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        chosen = settings(self.app)
        self.celery = make_celery(chosen)
        self.queue = chosen.SCHEDULER_CELERY_QUEUE
        self.max_in_flight = chosen.SCHEDULER_CELERY_MAX_IN_FLIGHT
        self.resend_after = chosen.lock_ttl.total_seconds()
        self.sent_at: dict[int, float] = {}
        self.send_again_at = 0.0  # time.monotonic(): the broker refused; nothing sent before
        self.send_retry = SEND_RETRY_FIRST
        self.last_check = 0.0

    def start(self) -> None:
        self.check_broker()
        self.add_slot()  # one sender: publishing is fast, and keeps the order of the lease

    def check_broker(self) -> None:
        """Says in one line at start when the broker cannot be reached. The worker runs all the
        same: the sender gives leased runs back and retries with backoff until the broker is
        there, so nothing is lost meanwhile."""
        try:
            with self.celery.connection_for_write() as connection:
                connection.ensure_connection(
                    max_retries=1, interval_start=0, interval_step=0, timeout=BROKER_CHECK_TIMEOUT
                )
        except Exception as error:  # whatever the broker's client raised
            log.warning(
                "celery_broker_unreachable",
                extra={
                    "action": "celery_broker_unreachable",
                    "broker": self.celery.connection_for_write().as_uri(),  # no password
                    "error": f"{type(error).__name__}: {error}",
                },
            )

    # --- in the sender thread ----------------------------------------------------------------

    def serve(self, slot: Slot) -> None:
        with self.app.app_context():
            while (batch := self.take_batch()) is not None:
                if batch:
                    self.send(batch)
                if time.monotonic() - self.last_check >= CHECK_INTERVAL:
                    self.forget_started()
                    self.last_check = time.monotonic()
                db.session.remove()

    def take_batch(self) -> list[Held] | None:
        """The runs to send now: those leased and not sent whose lease holds, and those sent a
        lock TTL ago that no Celery worker has started (the message may be lost). Waits up to
        CHECK_INTERVAL for some; None once the pool stops."""
        with self.run_waiting:
            batch = self.due(time.monotonic())
            if not batch and not self.stopping:
                self.run_waiting.wait(CHECK_INTERVAL)
                batch = self.due(time.monotonic())
            if self.stopping:
                return None
            for held in batch:
                if held in self.waiting:
                    self.waiting.remove(held)
                self.sent_at[held.run.id] = time.monotonic()
            return batch

    def due(self, now: float) -> list[Held]:
        """Called with the lock held."""
        if now < self.send_again_at:
            return []
        new = [held for held in self.waiting if held.lease_deadline > now]
        again = [
            self.held[run_id]
            for run_id, sent in self.sent_at.items()
            if now - sent >= self.resend_after and self.held[run_id].lease_deadline > now
        ]
        return new + again

    def send(self, batch: list[Held]) -> None:
        for index, held in enumerate(batch):
            run = held.run
            timeout = job_timeout(self.catalog, run.job)
            try:
                self.celery.send_task(
                    TASK_NAME,
                    args=[run.id, run.attempt, run.idempotency_key, self.worker_id],
                    # Recognisable: a run's resend has the id of its first send.
                    task_id=f"{run.idempotency_key}:{run.attempt}",
                    queue=self.queue,
                    soft_time_limit=timeout + SOFT_LIMIT_MARGIN,
                    time_limit=timeout + HARD_LIMIT_GRACE,
                )
            except Exception as error:  # whatever the broker's client raised: nothing was sent
                self.not_sent(batch[index:], error)
                return
            log.info(
                "run_sent",
                extra={"action": "run_sent", "run_id": run.id, "attempt": run.attempt},
            )
        self.send_retry = SEND_RETRY_FIRST

    def not_sent(self, unsent: list[Held], error: Exception) -> None:
        """The broker is out of reach: the runs are given back at once (the attempt does not
        count: no job started; a message that did go out is dropped as stale), and nothing is
        leased or sent for a while, doubling while the broker stays away."""
        with self.lock:
            self.send_again_at = time.monotonic() + self.send_retry
        log.warning(
            "celery_send_failed",
            extra={
                "action": "celery_send_failed",
                "count": len(unsent),
                "error": f"{type(error).__name__}: {error}",
                "retry_in": self.send_retry,
            },
        )
        self.send_retry = min(2 * self.send_retry, SEND_RETRY_MAX)
        self.give_back(unsent)

    def give_back(self, unsent: list[Held]) -> None:
        assert self.worker_id is not None
        with self.lock:
            for held in unsent:
                self.sent_at.pop(held.run.id, None)
                self.held.pop(held.run.id, None)
        ids = [held.run.id for held in unsent]
        try:
            release_leases(db.session(), self.worker_id, ids)
        except DBAPIError:
            db.session.rollback()
            # Still ours: sent when the broker is back, or given back by the worker's renewal
            # round (take_waiting).
            self.put_back(unsent)

    def forget_started(self) -> None:
        """Forgets the sent runs that a Celery worker has taken over (or that are no longer
        this worker's at all): they are in flight no more, and their leases are not ours."""
        with self.lock:
            sent = {run_id: self.held[run_id] for run_id in self.sent_at}
        if not sent:
            return
        try:
            rows = db.session.execute(
                select(Run.id, Run.attempt).where(
                    Run.id.in_(sent), Run.worker_id == self.worker_id, Run.status == "running"
                )
            ).all()
            db.session.rollback()
        except DBAPIError:
            db.session.rollback()
            return  # the worker's loop reports the database; checked again next time
        still_ours = {(run_id, attempt) for run_id, attempt in rows}
        forgotten = 0
        with self.lock:
            for run_id, held in sent.items():
                gone = (run_id, held.run.attempt) not in still_ours
                if gone and self.held.get(run_id) is held:  # not leased again meanwhile
                    self.forget(held)
                    forgotten += 1
        if forgotten:
            self.wake.set()  # room for more runs: the worker leases them

    def forget(self, held: Held) -> None:
        """Called with the lock held."""
        del self.held[held.run.id]
        self.sent_at.pop(held.run.id, None)
        log.debug(
            "run_handed_over",
            extra={"action": "run_handed_over", "run_id": held.run.id, "attempt": held.run.attempt},
        )

    # --- in the main thread ------------------------------------------------------------------

    def to_start(self, now: float) -> tuple[list[Held], int]:
        """None: a sent run is started by the Celery worker that takes it over (its take-over
        writes the start mark), so a run this worker leased and never handed over goes back to
        the queue without spending an attempt if this worker is lost."""
        return [], 0

    def submit(self, runs: list[LeasedRun], lease_deadline: float, now: float) -> list[Held]:
        """Runs just leased: the sender sends them at once (no start mark to wait for)."""
        submitted = super().submit(runs, lease_deadline, now)
        with self.run_waiting:
            self.run_waiting.notify()
        return submitted

    def wanted(self, now: float) -> int:
        """Runs to lease: up to the in-flight limit, none while the broker refuses."""
        with self.lock:
            if now < self.send_again_at:
                return 0
            return max(0, min(MAX_LEASE_BATCH, self.max_in_flight - len(self.held)))

    def renewed(self, sent: list[int], renewed: set[int], lease_deadline: float) -> None:
        """A sent run that renewal no longer finds ours was taken over by a Celery worker (or
        finished by it): forgotten, not lost."""
        with self.run_waiting:
            for run_id in sent:
                held = self.held.get(run_id)
                if held is None:
                    continue
                if run_id in renewed:
                    held.lease_deadline = lease_deadline
                elif run_id in self.sent_at:
                    self.forget(held)
                else:
                    self.lose(held)
            self.run_waiting.notify_all()

    def lose(self, held: Held) -> None:
        self.sent_at.pop(held.run.id, None)
        super().lose(held)

    def release(self, run_ids: list[int]) -> None:
        with self.lock:
            for run_id in run_ids:
                self.sent_at.pop(run_id, None)
        super().release(run_ids)
