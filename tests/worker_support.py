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

from tests.pg_bouncer import pooler_settings
from webapp.extensions import db

PROJECT = Path(__file__).resolve().parent.parent
# For what only PostgreSQL has: LISTEN/NOTIFY, terminating a backend, stopping the server.
postgresql_only = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
# Once more through a real PgBouncer in transaction mode (docs/how-to/deploy.md, "Behind
# PgBouncer"): the workers' DATABASE_URL is the pooled one, their SCHEDULER_LISTEN_DATABASE_URL
# the direct one.
also_pgbouncer = pytest.mark.parametrize(
    "database_url", ["sqlite", "postgresql", "pgbouncer"], indirect=True
)
postgresql_and_pgbouncer = pytest.mark.parametrize(
    "database_url", ["postgresql", "pgbouncer"], indirect=True
)
# Two queues for the tests that start real worker processes, each run on one test process of
# `make test` (pytest -n, --dist loadgroup), one test at a time, the two queues side by side:
# - one_at_a_time: the tests whose workers race a bound of a few seconds (a lease against kill -9
#   or SIGSTOP, a wake-up within a bound): two of them side by side would starve each other's
#   workers of the CPU;
# - heavy_one_at_a_time: the tests that load the machine for long (the half minute of lock-order
#   races, a burst of workers) or whose workers race only a generous bound (a grace, a job's
#   timeout, a reconnection): one at a time among themselves, so that two loads never add up.
# A worker test that only waits for an outcome (a --burst worker, a start failure) is in neither.
one_at_a_time = pytest.mark.xdist_group("real-workers")
heavy_one_at_a_time = pytest.mark.xdist_group("heavy-workers")


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
            **pooler_settings(self.database_url),
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


def warnings_in(logs: str) -> list[str]:
    """The WARNING and ERROR lines of workers' logs: a statement that failed (behind PgBouncer,
    "prepared statement ... does not exist"), a database away, a round that failed."""
    return [line for line in logs.splitlines() if " WARNING " in line or " ERROR " in line]


def succeeded_ids(logs: str) -> list[int]:
    """The runs that key=value logs say succeeded: each id of each `runs_succeeded` line (one
    line per stored batch), as often as it is said."""
    return [
        int(run_id)
        for line in logs.splitlines()
        if " action=runs_succeeded " in line
        for run_id in line.partition(" run_ids=")[2].split()[0].split(",")
    ]


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        db.session.rollback()  # a fresh snapshot each time
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
