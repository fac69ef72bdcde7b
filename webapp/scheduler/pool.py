"""The worker's job pool: the runs it holds, the slots that run them, and their timeouts.

One table, `held`, answers "which runs does this worker hold a lease on?": a run enters it when
it is leased and leaves it once its outcome is stored, its lease released, or the worker learns
that it lost the lease (renewal did not find it ours), whatever it does in between (wait for a
slot, run, wait for the outcome's commit). Lease renewal reads that table under the lock, so it
covers every held run at that instant; `waiting` and `outcomes` are the work lists of the slots
and of the flush, under the same lock.

Fencing: each held run knows its lease's deadline by this worker's monotonic clock, taken before
the statement that leased or renewed it (so it never falls after the database's `locked_until`).
A slot starts only a run whose deadline has not passed: a worker that was frozen, or could not
renew, starts nothing it may no longer own. Such a run waits for the next renewal, which either
extends it (nobody took it: it may start) or finds it lost (it is dropped, never started).

Start marks: a slot starts only a run whose start is written; the protocol (to_start, the
lease's transaction, start_marked, stale_marks) is told once, in leases.py.

Two kinds of slots:
- ThreadJobPool (the default): long-lived threads in the worker. A job past its timeout is
  failed and its thread abandoned (threads cannot be killed): a new thread takes the slot, the
  old one is counted until its job returns, and its late result is discarded.
- ProcessJobPool (`--pool process`): each slot owns a child process. A job past its timeout is
  killed with its process, and the slot starts a fresh one.
Both give the job `ctx.deadline` and `ctx.check_timeout()`; the hard limit comes HARD_LIMIT_GRACE
after it, so that a job which checks its deadline stops by itself first.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flask import Flask

from webapp.catalog import Catalog
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import WorkerKind
from webapp.scheduler.execution import (
    FinishedRun,
    JobError,
    JobResult,
    finish,
    job_timeout,
    run_attempt,
    timed_out_result,
)
from webapp.scheduler.leases import LeasedRun

log = logging.getLogger("webapp.worker")

HARD_LIMIT_GRACE = 1.0  # seconds past a job's deadline before it is abandoned or killed
MAX_LEASE_BATCH = 400
# Leased-but-waiting work a worker may hold, in expected seconds per slot: enough to batch
# short jobs, too little to hoard long ones.
PREFETCH_SECONDS = 0.05
# A job that has run this long (seconds) is a long one: its slot takes no backlog, and a run
# marked started that has waited this long for a slot loses its mark (stale_marks). Far above
# PREFETCH_SECONDS, since a short job's thread may wait tens of ms for the GIL under load.
LONG_JOB_SECONDS = 1.0
FLUSH_DELAY = 0.02  # seconds an outcome may wait for others before it is stored
FLUSH_BATCH = 400


@dataclass(eq=False)
class Held:
    """A run this worker holds a lease on, from its lease until its outcome is stored."""

    run: LeasedRun
    lease_deadline: float  # time.monotonic(): its lease may have passed after this
    leased_at: float  # time.monotonic()
    start_marked: bool = False  # its start is written: a slot may start it
    marked_at: float = 0.0  # time.monotonic() when start_marked was set
    started_at: datetime | None = None  # None while it waits for a slot
    started: float = 0.0  # time.monotonic() when a slot started it
    timeout: float = 0.0
    hard_deadline: float = math.inf  # time.monotonic()
    # An admin asked the run to stop: its slot's `stop` is set (the job's ctx.stop), or it is
    # not started at all if it has not begun (both pools).
    stop_asked: bool = False


@dataclass(eq=False)
class Slot:
    """One place where a job runs, and the run it runs now."""

    held: Held | None = None
    abandoned: bool = False  # thread pool: the job ran past its hard limit; a new slot took over
    stop: threading.Event = field(default_factory=threading.Event)  # ctx.stop of its job now
    thread: threading.Thread | None = field(default=None, repr=False)


class JobPool(ABC):
    """`concurrency` slots taking leased runs; the table of held runs; outcomes to store."""

    kind: WorkerKind = "thread"  # its `workers` row's
    # Jobs left running past their hard limit: only threads can be left behind (a process is
    # killed), so this stays 0 but in ThreadJobPool.
    abandoned_threads = 0
    worker_id: int | None = None  # the worker's row, set once it has registered

    def __init__(
        self,
        app: Flask,
        catalog: Catalog,
        settings: Mapping[str, Any],
        concurrency: int,
        wake: threading.Event,
    ) -> None:
        self.app = app
        self.catalog = catalog
        self.settings = settings  # the job settings: all that jobs see of the configuration
        self.concurrency = concurrency
        self.wake = wake
        self.lock = threading.Lock()
        self.run_waiting = threading.Condition(self.lock)
        self.held: dict[int, Held] = {}
        self.waiting: deque[Held] = deque()
        # Start marks in the order they were written (marked_at, run): stale_marks reads the
        # oldest first, without scanning the waiting runs every round.
        self.marks: deque[tuple[float, Held]] = deque()
        self.outcomes: list[FinishedRun] = []  # finished, not yet stored (still in `held`)
        self.first_outcome_at = 0.0
        self.slots: list[Slot] = []
        self.stopping = False
        self.average_duration: float | None = None  # seconds, moving average

    def start(self) -> None:
        for _ in range(self.concurrency):
            self.add_slot()

    def add_slot(self) -> None:
        slot = Slot()
        slot.thread = threading.Thread(target=self.serve, args=(slot,), daemon=True, name="job")
        with self.lock:
            self.slots.append(slot)
        slot.thread.start()

    # --- in the slots' threads ---------------------------------------------------------------

    @abstractmethod
    def serve(self, slot: Slot) -> None:
        """A slot's life: take runs, run them, hand back their outcomes, until the pool stops."""

    def take(self, slot: Slot) -> Held | None:
        """The next waiting run whose lease holds, now started in `slot`; None once the pool
        stops."""
        with self.run_waiting:
            while (held := self.start_next(slot, time.monotonic())) is None:
                if self.stopping:
                    return None
                self.run_waiting.wait()
        log.debug(  # at INFO, its outcome tells (execution.store_outcomes)
            "run_started",
            extra={
                "action": "run_started",
                "run_id": held.run.id,
                "attempt": held.run.attempt,
                "tenant_id": held.run.tenant_id,
                "schedule_id": held.run.schedule_id,
            },
        )
        return held

    def start_next(self, slot: Slot, now: float) -> Held | None:
        """Called with the lock held: the first waiting run marked started whose lease has not
        passed by `now` (time.monotonic()), started in `slot`. Runs whose lease has passed stay
        waiting, not started, until renewal says whether they are still ours."""
        if self.stopping:
            return None
        for held in self.waiting:
            if held.start_marked and held.lease_deadline > now:
                break
        else:
            return None
        self.waiting.remove(held)
        held.started_at = utcnow()
        held.started = now
        held.timeout = job_timeout(self.catalog, held.run.job)
        held.hard_deadline = now + held.timeout + HARD_LIMIT_GRACE
        slot.held = held
        slot.stop.clear()  # its previous job has returned
        if held.stop_asked:
            slot.stop.set()
        return held

    def complete(self, slot: Slot, held: Held, done: FinishedRun) -> None:
        """Hands a finished attempt to the flush, unless a timeout has recorded it already."""
        with self.lock:
            if slot.abandoned or slot.held is not held:
                return
            slot.held = None
            self.add_outcome(done)
            took = (done.finished_at - done.started_at).total_seconds()
            average = self.average_duration
            self.average_duration = took if average is None else 0.8 * average + 0.2 * took
        self.wake.set()

    def add_outcome(self, done: FinishedRun) -> None:
        """Called with the lock held."""
        if not self.outcomes:
            self.first_outcome_at = time.monotonic()
        self.outcomes.append(done)

    def crashed(self, run: LeasedRun, started_at: datetime, crash: Exception) -> FinishedRun:
        """The worker's own bug around a job (never the job's exception): the run fails."""
        log.exception("run_crashed", extra={"action": "run_crashed", "run_id": run.id})
        shown = f"the worker failed: {type(crash).__name__}"  # details: the worker's log
        error = JobError(shown, traceback.format_exc())
        return finish(run, JobResult(error, ""), started_at)

    def timed_out(self, held: Held) -> FinishedRun:
        assert held.started_at is not None
        return finish(held.run, timed_out_result(self.catalog, held.run.job), held.started_at)

    # --- in the main thread ------------------------------------------------------------------

    def submit(self, runs: list[LeasedRun], lease_deadline: float, now: float) -> list[Held]:
        """Runs just leased, their leases good until `lease_deadline` (time.monotonic()), in
        their order; none starts before its start mark (start_marked)."""
        submitted = []
        with self.run_waiting:
            for run in runs:
                if run.id in self.held:  # leased again: the database took it back from us
                    self.lose(self.held[run.id])
                held = self.held[run.id] = Held(run, lease_deadline, leased_at=now)
                self.waiting.append(held)
                submitted.append(held)
        return submitted

    def to_start(self, now: float) -> tuple[list[Held], int]:
        """The waiting runs to mark started now (time.monotonic()), oldest lease first, and
        room for how many more (runs leased with them): what the free slots take next, one
        each, or while jobs are short PREFETCH_SECONDS of work each (one statement marks a
        batch). A busy slot gets none: a run marked and never started would spend an attempt
        if this worker were lost (and one marked behind a job that turns out long loses its
        mark: stale_marks)."""
        with self.lock:
            free = len(self.slots) - self.running()
            average = self.average_duration
            per_slot = 1
            if average is not None and average < PREFETCH_SECONDS:
                per_slot = int(PREFETCH_SECONDS / max(average, 1e-5))
            budget = free * per_slot - sum(1 for held in self.waiting if held.start_marked)
            chosen: list[Held] = []
            for held in self.waiting:
                if len(chosen) >= budget:
                    break
                if not held.start_marked and held.lease_deadline > now:
                    chosen.append(held)
            return chosen, max(0, budget - len(chosen))

    def start_marked(self, chosen: list[Held], marked: set[int]) -> None:
        """After the start statement: the runs it marked may start; the others of `chosen`
        are no longer ours (their lease had passed or was taken back) and never start."""
        now = time.monotonic()
        with self.run_waiting:
            for held in chosen:
                if self.held.get(held.run.id) is not held:  # released or lost meanwhile
                    continue
                if held.run.id in marked:
                    held.start_marked = True
                    held.marked_at = now
                    self.marks.append((now, held))
                else:
                    self.lose(held)
            self.run_waiting.notify(len(marked))

    def stale_marks(self, now: float) -> list[Held]:
        """The waiting runs marked started LONG_JOB_SECONDS or more before `now`
        (time.monotonic()), their marks taken back: no slot starts them until they are marked
        again. Behind a job longer than the batch foresaw, they might wait for its end; the
        worker clears their marks in the database too (leases.py, step 4)."""
        stale = []
        with self.lock:
            while self.marks and now - self.marks[0][0] >= LONG_JOB_SECONDS:
                marked_at, held = self.marks.popleft()
                if self.still_marked(marked_at, held):
                    held.start_marked = False
                    stale.append(held)
        return stale

    def stale_marks_deadline(self) -> float | None:
        """When the oldest mark of a waiting run goes stale (time.monotonic()), if any."""
        with self.lock:
            while self.marks and not self.still_marked(*self.marks[0]):
                self.marks.popleft()  # started, lost or marked again since: not stale
            return self.marks[0][0] + LONG_JOB_SECONDS if self.marks else None

    def still_marked(self, marked_at: float, held: Held) -> bool:
        """Called with the lock held: the run still waits for a slot with the mark written at
        `marked_at` (not started, not lost or released, not marked again)."""
        return (
            held.start_marked
            and held.marked_at == marked_at
            and held.started_at is None
            and self.held.get(held.run.id) is held
        )

    def held_ids(self) -> list[int]:
        """Every run this worker holds a lease on at this instant: waiting, running, or finished
        but not yet stored. What lease renewal extends."""
        with self.lock:
            return list(self.held)

    def renewed(self, sent: list[int], renewed: set[int], lease_deadline: float) -> None:
        """After renewal: the runs it extended are good until `lease_deadline`; the others of
        `sent` are no longer ours (another worker's reaper took them back)."""
        with self.run_waiting:
            for run_id in sent:
                held = self.held.get(run_id)
                if held is None:  # its outcome was stored meanwhile
                    continue
                if run_id in renewed:
                    held.lease_deadline = lease_deadline
                else:
                    self.lose(held)
            self.run_waiting.notify_all()  # runs whose lease had passed may start again

    def ask_to_stop(self, run_ids: list[int]) -> None:
        """Flags the runs an admin asked to stop (lease renewal reports them)."""
        with self.lock:
            for run_id in run_ids:
                if (held := self.held.get(run_id)) is not None:
                    held.stop_asked = True
            for slot in self.slots:
                if slot.held is not None and slot.held.stop_asked:
                    slot.stop.set()

    def lose(self, held: Held) -> None:
        """Called with the lock held: the lease on this run is lost. Not started, it is dropped;
        started, its job goes on (a thread cannot be stopped) and its outcome is stored only
        if nobody has taken the run over (execution.store_outcomes)."""
        del self.held[held.run.id]
        state = "finished" if any(done.run is held.run for done in self.outcomes) else "running"
        if held in self.waiting:
            self.waiting.remove(held)
            state = "waiting"
        log.warning(
            "run_lease_lost",
            extra={
                "action": "run_lease_lost",
                "run_id": held.run.id,
                "attempt": held.run.attempt,
                "state": state,
            },
        )

    def running(self) -> int:
        """Called with the lock held: slots running a job."""
        return sum(1 for slot in self.slots if slot.held is not None)

    def busy(self) -> int:
        """Runs waiting or running here."""
        with self.lock:
            return len(self.waiting) + self.running()

    def wanted(self, now: float) -> int:
        """How many runs to lease at `now` (time.monotonic()): as many as the slots can start
        soon. A free slot takes one at once. While jobs are short, a slot that is free or has
        just started its job also takes a backlog (PREFETCH_SECONDS of work), so that a lease
        serves many runs; a slot busy with a long job (LONG_JOB_SECONDS so far) takes nothing,
        so no run waits behind it while another worker could start it."""
        with self.lock:
            busy = [slot.held.started for slot in self.slots if slot.held is not None]
            free = len(self.slots) - len(busy)
            waiting = len(self.waiting)
            average = self.average_duration
        if average is None or average >= PREFETCH_SECONDS:
            return max(0, free - waiting)
        soon = free + sum(1 for started in busy if now - started < LONG_JOB_SECONDS)
        backlog = int(soon * PREFETCH_SECONDS / max(average, 1e-5))
        return max(0, min(MAX_LEASE_BATCH, free + backlog - waiting))

    def due_outcomes(self, force: bool = False) -> list[FinishedRun]:
        """The outcomes to store now (they stay held until `stored`), or none yet."""
        with self.lock:
            ready = self.outcomes and (
                force
                or len(self.outcomes) >= FLUSH_BATCH
                or time.monotonic() - self.first_outcome_at >= FLUSH_DELAY
                or (not self.waiting and not self.running())
            )
            return list(self.outcomes) if ready else []

    def stored(self, batch: list[FinishedRun]) -> None:
        """Their outcomes are committed (or dropped, the run being another worker's): this
        worker holds these attempts no more."""
        finished = {id(done) for done in batch}
        with self.lock:
            self.outcomes = [done for done in self.outcomes if id(done) not in finished]
            for done in batch:
                held = self.held.get(done.run.id)
                if held is not None and held.run is done.run:  # not a newer lease of the run
                    del self.held[done.run.id]

    def flush_deadline(self) -> float | None:
        with self.lock:
            return self.first_outcome_at + FLUSH_DELAY if self.outcomes else None

    def take_waiting(self, leased_before: float = math.inf) -> list[Held]:
        """The runs no slot has started (leased before `leased_before`), taken back so that no
        slot starts them while their leases are released: on shutdown, all of them; in a round,
        those that have waited too long."""
        with self.lock:
            taken = [held for held in self.waiting if held.leased_at < leased_before]
            for held in taken:
                self.waiting.remove(held)
                del self.held[held.run.id]
        return taken

    def put_back(self, taken: list[Held]) -> None:
        """Runs whose release failed (no database): still ours, they wait for a slot again."""
        with self.run_waiting:
            for held in taken:
                self.held[held.run.id] = held
                if held.start_marked:  # its mark's entry may be gone meanwhile: one more
                    self.marks.append((held.marked_at, held))
            self.waiting.extendleft(reversed(taken))
            self.run_waiting.notify(len(taken))

    def release(self, run_ids: list[int]) -> None:
        """On shutdown: runs whose leases were given back."""
        with self.lock:
            for run_id in run_ids:
                self.held.pop(run_id, None)

    def enforce_timeouts(self) -> None:
        """Ends the jobs past their hard limit, where the pool's main thread must do it (the
        thread pool); a process pool's slots kill their own child, so by default nothing."""
        return None

    def next_deadline(self) -> float | None:
        """When enforce_timeouts has work next (time.monotonic()), if ever."""
        return None

    def stop(self) -> None:
        with self.run_waiting:
            self.stopping = True
            self.run_waiting.notify_all()


class ThreadJobPool(JobPool):
    """Slots are threads of the worker; a job past its hard limit is abandoned and counted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.abandoned_threads = 0  # abandoned and still running their job

    def serve(self, slot: Slot) -> None:
        with self.app.app_context():
            session = db.session()  # the slot's, closed after each job: none sees another's
            while (held := self.take(slot)) is not None:
                assert held.started_at is not None
                try:
                    deadline = held.hard_deadline - HARD_LIMIT_GRACE
                    done = run_attempt(
                        held.run, self.catalog, self.settings, session, deadline, slot.stop
                    )
                except Exception as crash:  # run_attempt records the job's errors: our own bug
                    done = self.crashed(held.run, held.started_at, crash)
                finally:
                    session.close()
                self.complete(slot, held, done)
                if slot.abandoned:
                    self.finished_late(held)
                    return  # a new thread has taken this one's slot

    def finished_late(self, held: Held) -> None:
        with self.lock:
            self.abandoned_threads -= 1
            still = self.abandoned_threads
        log.info(
            "job_thread_finished_late",
            extra={
                "action": "job_thread_finished_late",
                "run_id": held.run.id,
                "abandoned_threads": still,
            },
        )

    def enforce_timeouts(self) -> None:
        """Fails the runs past their hard limit and gives their slots new threads."""
        now = time.monotonic()
        late: list[Held] = []
        with self.lock:
            for slot in list(self.slots):
                held = slot.held
                if held is None or held.hard_deadline > now:
                    continue
                slot.abandoned = True
                self.slots.remove(slot)
                self.add_outcome(self.timed_out(held))
                self.abandoned_threads += 1
                late.append(held)
            abandoned = self.abandoned_threads
        for held in late:
            log.warning(
                "job_thread_abandoned",
                extra={
                    "action": "job_thread_abandoned",
                    "run_id": held.run.id,
                    "job": held.run.job,
                    "timeout": held.timeout,
                    "abandoned_threads": abandoned,
                },
            )
            self.add_slot()
        if late:
            self.wake.set()

    def next_deadline(self) -> float | None:
        with self.lock:
            deadlines = [slot.held.hard_deadline for slot in self.slots if slot.held is not None]
        return min(deadlines) if deadlines else None
