"""Real worker processes for the acceptance and fault tests: start, wait, read their logs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from webapp.extensions import db

PROJECT = Path(__file__).resolve().parent.parent
# For what only PostgreSQL has: LISTEN/NOTIFY, terminating a backend, stopping the server.
postgresql_only = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
# Tests whose worker processes race leases of a few seconds (kill -9, SIGSTOP, a wake-up within a
# bound): under `make test` (pytest -n, --dist loadgroup) the files marked so run on one test
# process, one test at a time, so that two of them never starve each other's workers of the CPU.
one_at_a_time = pytest.mark.xdist_group("real-workers")


class Workers:
    """Starts `flask scheduler worker` processes and stops whatever is left at the end."""

    def __init__(self, database_url: str, log_dir: Path, code: Path = PROJECT) -> None:
        self.database_url = database_url
        self.log_dir = log_dir
        self.code = code  # the checkout whose `webapp` the workers run (an older release's)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.log_files: list[IO[bytes]] = []

    def start(self, *args: str, **settings: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "SECRET_KEY": "test",
            "SCHEDULER_DEMO_JOBS": "1",
            "SCHEDULER_POLL_INTERVAL": "0.2",
            **settings,
        }
        log = open(self.log_dir / f"worker-{len(self.processes)}.log", "wb")
        self.log_files.append(log)
        process = subprocess.Popen(
            [sys.executable, "-m", "flask", "--app", "webapp", "scheduler", "worker", *args],
            cwd=self.code,  # `python -m` imports `webapp` from here first
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.processes.append(process)
        return process

    def logs(self) -> str:
        return "\n".join(path.read_text() for path in sorted(self.log_dir.glob("worker-*.log")))

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        for log in self.log_files:
            log.close()


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        db.session.rollback()  # a fresh snapshot each time
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
