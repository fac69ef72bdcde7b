"""`--pool process`: each slot of the job pool runs its jobs in a child process of its own.

A job past its hard limit is killed with its process (a job blocked in C code too) and the slot
starts a fresh process. The children are started with `spawn`, not `fork`: the worker has threads
and open database connections that a forked child must not inherit. A child builds the catalog
from the same settings, gets the job settings and, for system jobs, a database session of its
own; it shares no memory, connection or Flask app context with the worker.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import time
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from webapp.catalog import build_catalog
from webapp.config import settings
from webapp.database import install_engine_hooks
from webapp.extensions import db
from webapp.scheduler.execution import (
    FinishedRun,
    JobError,
    JobResult,
    finish,
    prints_go_to_runs,
    run_job,
)
from webapp.scheduler.executor import Backoff
from webapp.scheduler.pool import Held, JobPool, Slot

log = logging.getLogger("webapp.worker")

READY = "ready"
SPAWN_RETRY_FIRST = 1.0  # seconds before a child that failed to start is tried again; doubling
SPAWN_RETRY_MAX = 30.0
SPAWN = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class ChildSetup:
    """What a child process needs to run jobs as the worker would (sent once, at its start)."""

    demo_jobs: bool
    job_modules: tuple[str, ...]
    settings: dict[str, Any]  # the job settings
    database_url: str  # for system jobs' sessions; never shown to a job
    engine_options: dict[str, Any]  # the worker's (Settings.engine_options)


def child_main(connection: Connection, setup: ChildSetup) -> None:
    """A child's life: run each run it receives, send back its result, until told to stop."""
    # Ctrl-C and a service manager's SIGTERM reach the whole process group: the worker decides
    # when its children stop (after the shutdown grace), and kills them then.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    catalog = build_catalog(setup.demo_jobs, setup.job_modules)
    engine: Engine | None = None
    with prints_go_to_runs():
        connection.send(READY)
        while (message := connection.recv()) is not None:
            run, timeout = message
            if engine is None:
                engine = create_engine(setup.database_url, **setup.engine_options)
                install_engine_hooks(engine)
            with Session(engine) as session:
                result = run_job(run, catalog, setup.settings, session, time.monotonic() + timeout)
                session.rollback()
            connection.send(result)


class ProcessJobPool(JobPool):
    """Slots whose jobs run in child processes; a job past its hard limit is killed."""

    kind = "process"

    def setup(self) -> ChildSetup:
        chosen = settings(self.app)
        url = db.engine.url.render_as_string(hide_password=False)
        return ChildSetup(
            demo_jobs=chosen.SCHEDULER_DEMO_JOBS,
            job_modules=tuple(chosen.SCHEDULER_JOB_MODULES),
            settings=dict(self.settings),
            database_url=url,
            engine_options=chosen.engine_options(url),
        )

    def start(self) -> None:
        with self.app.app_context():
            self.child_setup = self.setup()
        self.children: set[BaseProcess] = set()
        super().start()

    def spawn(self) -> tuple[BaseProcess, Connection] | None:
        """A new child, once it is ready to take a run (its imports are not a job's time); None
        if the pool stops first. A child that cannot start (a job module that fails to import
        in a fresh interpreter, no memory) is logged and tried again: the runs wait in the
        queue with their leases renewed, and the worker hands them back when it stops."""
        backoff = Backoff(SPAWN_RETRY_FIRST, SPAWN_RETRY_MAX)
        while not self.stopping:
            delay = backoff.next()
            try:
                return self.start_child()
            except (OSError, EOFError, RuntimeError) as error:
                log.error(
                    "job_process_failed_to_start",
                    extra={
                        "action": "job_process_failed_to_start",
                        "error": str(error) or type(error).__name__,
                        "retry_in": delay,
                    },
                )
            with self.run_waiting:
                self.run_waiting.wait_for(lambda: self.stopping, timeout=delay)
        return None

    def start_child(self) -> tuple[BaseProcess, Connection]:
        ours, theirs = SPAWN.Pipe()
        child = SPAWN.Process(
            target=child_main, args=(theirs, self.child_setup), daemon=True, name="job"
        )
        child.start()
        with self.lock:
            self.children.add(child)
        theirs.close()
        try:
            ready = ours.recv()  # EOFError: the child died before it was ready
        except EOFError:
            self.kill(child)
            ours.close()
            raise EOFError(f"the job process exited with code {child.exitcode}") from None
        if ready != READY:
            raise RuntimeError("a job process did not start")
        log.info("job_process_started", extra={"action": "job_process_started", "pid": child.pid})
        return child, ours

    def serve(self, slot: Slot) -> None:
        started = self.spawn()
        if started is None:
            return
        child, connection = started
        try:
            while (held := self.take(slot)) is not None:
                assert held.started_at is not None
                try:
                    done, lost = self.attempt(held, child, connection)
                except Exception as crash:  # our own bug, or a child that died between jobs
                    done, lost = self.crashed(held.run, held.started_at, crash), True
                self.complete(slot, held, done)
                if lost:
                    self.end(child, connection)
                    started = self.spawn()
                    if started is None:
                        return
                    child, connection = started
        finally:
            self.end(child, connection)  # a second time after a loss: harmless

    def attempt(
        self, held: Held, child: BaseProcess, connection: Connection
    ) -> tuple[FinishedRun, bool]:
        """Runs one attempt in the child: (its outcome, whether the child is gone). A run asked
        to stop before it began ends cancelled unstarted; one asked while its job runs in the
        child goes on to its end (the child shares no memory to flag: see
        docs/how-to/add-a-job.md)."""
        assert held.started_at is not None
        if held.stop_asked:
            return finish(held.run, JobResult(None, "", stopped=True), held.started_at), False
        connection.send((held.run, held.timeout))
        if not connection.poll(max(0.0, held.hard_deadline - time.monotonic())):
            self.kill(child)  # a job blocked in C code too: nothing of it is left running
            log.warning(
                "job_process_killed",
                extra={
                    "action": "job_process_killed",
                    "run_id": held.run.id,
                    "job": held.run.job,
                    "timeout": held.timeout,
                    "pid": child.pid,
                },
            )
            return self.timed_out(held), True
        try:
            result: JobResult = connection.recv()
        except EOFError:  # the job ended its process: os._exit, a crash in C code
            child.join()
            shown = f"the job's process exited with code {child.exitcode}"
            return finish(held.run, JobResult(JobError(shown), ""), held.started_at), True
        return finish(held.run, result, held.started_at), False

    def kill(self, child: BaseProcess) -> None:
        child.kill()
        child.join()
        with self.lock:
            self.children.discard(child)

    def end(self, child: BaseProcess, connection: Connection) -> None:
        """A child that is gone or no longer wanted: asked to exit, killed if it does not."""
        with suppress(OSError):  # its end of the pipe is closed: it has exited already
            connection.send(None)
        child.join(0.5)
        self.kill(child)
        connection.close()

    def stop(self) -> None:
        """After the shutdown grace: children still in a job are killed (their runs have been
        given back to the queue); idle ones exit."""
        super().stop()
        with self.lock:
            children = list(self.children)
        for child in children:
            self.kill(child)
