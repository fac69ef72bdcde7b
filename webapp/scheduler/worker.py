"""The worker process: registers itself, heartbeats, and stops at once on SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from types import FrameType

from flask import Flask
from sqlalchemy import update

from webapp.database import utcnow, write_transaction
from webapp.extensions import db
from webapp.models import Worker

log = logging.getLogger("webapp.worker")


class WorkerProcess:
    """One worker. Its loop is made of steps; `stop_requested` wakes any wait at once."""

    def __init__(self, app: Flask, concurrency: int, burst: bool = False) -> None:
        self.app = app
        self.concurrency = concurrency
        self.burst = burst
        self.stop_requested = threading.Event()
        self.worker_id: int | None = None

    def register(self) -> int:
        with write_transaction(db.session):
            worker = Worker(
                hostname=socket.gethostname(), pid=os.getpid(), concurrency=self.concurrency
            )
            db.session.add(worker)
            db.session.flush()
            self.worker_id = worker.id
        log.info("worker_started", extra={"action": "worker_started", "worker_id": self.worker_id})
        return worker.id

    def heartbeat(self) -> None:
        with write_transaction(db.session):
            db.session.execute(
                update(Worker).where(Worker.id == self.worker_id).values(last_heartbeat_at=utcnow())
            )

    def deregister(self) -> None:
        with write_transaction(db.session):
            db.session.execute(
                update(Worker).where(Worker.id == self.worker_id).values(stopped_at=utcnow())
            )
        log.info("worker_stopped", extra={"action": "worker_stopped", "worker_id": self.worker_id})

    def request_stop(self, signum: int, _frame: FrameType | None) -> None:
        log.info("stop_requested", extra={"action": "stop_requested", "signal": signum})
        self.stop_requested.set()

    def run(self) -> None:
        """Heartbeats until stopped, or once with --burst (the tick lands with the Worker issue)."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        poll_interval = float(self.app.config["SCHEDULER_POLL_INTERVAL"])
        with self.app.app_context():
            self.register()
            try:
                while not self.stop_requested.is_set():
                    self.heartbeat()
                    if self.burst:
                        break
                    self.stop_requested.wait(poll_interval)
            finally:
                self.deregister()
                db.session.remove()
