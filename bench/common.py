"""What every benchmark shares: a PostgreSQL server, migrated databases, the app, result files.

Each benchmark starts its own throwaway PostgreSQL cluster (tests/pg_cluster.py, durable: fsync
on, as in production) unless DATABASE_URL names a server; then it creates and drops databases
named bench_* next to the given one (the user needs CREATEDB).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.engine import make_url

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(PROJECT_ROOT, "bench", "results")
SECRET = "bench-secret-key"

if PROJECT_ROOT not in sys.path:
    sys.path.insert(0, PROJECT_ROOT)


class VerificationFailed(Exception):
    """A benchmark's result is wrong: the figures mean nothing, the command exits 1."""


class Server:
    """A PostgreSQL server for one benchmark: databases cloned from a migrated template."""

    def __init__(self, admin_url: str, cluster: Any = None) -> None:
        self.admin_url = admin_url
        self.cluster = cluster
        self.template: str | None = None
        self.created: list[str] = []

    def conninfo(self, database: str | None = None) -> str:
        url = make_url(self.admin_url).set(drivername="postgresql")
        if database:
            url = url.set(database=database)
        return url.render_as_string(hide_password=False)

    def url(self, database: str) -> str:
        url = make_url(self.admin_url).set(drivername="postgresql+psycopg", database=database)
        return url.render_as_string(hide_password=False)

    def execute(self, sql: str) -> None:
        with psycopg.connect(self.conninfo(), autocommit=True) as connection:
            connection.execute(sql)  # type: ignore[arg-type]

    def version(self) -> str:
        with psycopg.connect(self.conninfo(), autocommit=True) as connection:
            row = connection.execute("SHOW server_version").fetchone()
            assert row is not None
            return str(row[0]).split()[0]

    def create_database(self, migrated: bool = True) -> str:
        if migrated and self.template is None:
            self.template = f"bench_template_{uuid.uuid4().hex[:8]}"
            self.execute(f'CREATE DATABASE "{self.template}"')
            self.created.append(self.template)
            migrate(self.url(self.template))
        name = f"bench_{uuid.uuid4().hex[:10]}"
        template = f' TEMPLATE "{self.template}"' if migrated else ""
        self.execute(f'CREATE DATABASE "{name}"{template}')
        self.created.append(name)
        return name

    def drop(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            return
        for name in reversed(self.created):
            self.drop(name)


@contextmanager
def postgres_server() -> Iterator[Server]:
    given = os.environ.get("DATABASE_URL", "")
    if given.startswith(("postgres://", "postgresql")):
        server = Server(given)
    else:
        from tests.pg_cluster import start_cluster

        cluster = start_cluster(durable=True)
        server = Server(cluster.admin_url, cluster)
    try:
        yield server
    finally:
        server.close()


def migrate(url: str) -> None:
    from flask_migrate import upgrade

    from webapp.extensions import db

    app = make_app(url)
    with app.app_context():
        upgrade()
        db.engine.dispose()


def make_app(url: str, **config: Any) -> Flask:
    from webapp import create_app

    return create_app(
        {
            "SQLALCHEMY_DATABASE_URI": url,
            "SECRET_KEY": SECRET,
            "SCHEDULER_JOB_MODULES": ["bench.jobs"],
            # The test client speaks plain HTTP: a Secure cookie would never come back.
            "SESSION_COOKIE_SECURE": False,
            **config,
        }
    )


def log_in(app: Flask, client: FlaskClient, user_id: int, **session_values: Any) -> None:
    """Gives the test client a real login session of the user, as the login form would."""
    from webapp.config import settings
    from webapp.database import utcnow, write_transaction
    from webapp.extensions import db
    from webapp.models import User
    from webapp.services import sessions

    with app.app_context(), write_transaction(db.session):
        user = db.session.get(User, user_id)
        assert user is not None, f"no user {user_id}"
        token = sessions.start(user, utcnow(), sessions.Lifetimes.of(settings(app))).get_id()
    with client.session_transaction() as session:
        session.update(_user_id=token, _fresh=True, **session_values)


def worker_env(url: str, **extra: str) -> dict[str, str]:
    """The environment of a worker process started by a benchmark."""
    env = dict(os.environ)
    env.update(
        DATABASE_URL=url,
        SECRET_KEY=SECRET,
        SCHEDULER_JOB_MODULES="bench.jobs",
        PYTHONPATH=PROJECT_ROOT + os.pathsep + env.get("PYTHONPATH", ""),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def sqlite_url(directory: str, name: str = "bench.db") -> str:
    return f"sqlite:///{os.path.join(directory, name)}"


# --- commits ------------------------------------------------------------------------------------


def wait_for_backends(conninfo: str, database: str, timeout: float = 10.0) -> None:
    """Waits until no session but ours is connected to `database` (their stats are flushed)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(conninfo, autocommit=True) as connection:
        while time.monotonic() < deadline:
            row = connection.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            ).fetchone()
            if row is not None and row[0] == 0:
                return
            time.sleep(0.05)


def commit_count(server: Server, database: str) -> int:
    """Transactions committed in `database` so far (pg_stat_database.xact_commit).

    Read from another database, after every session of `database` has ended: a backend flushes
    its counters when it exits, so the figure is exact then.
    """
    wait_for_backends(server.conninfo(), database)
    with psycopg.connect(server.conninfo(), autocommit=True) as connection:
        connection.execute("SELECT pg_stat_clear_snapshot()")
        row = connection.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)
        ).fetchone()
        assert row is not None
        return int(row[0])


# --- results ------------------------------------------------------------------------------------


def machine(server_version: str | None = None) -> dict[str, Any]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
    }
    if server_version:
        info["postgresql"] = server_version
    return info


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_results(bench: str, rows: Sequence[dict[str, Any]], info: dict[str, Any]) -> str:
    """Appends one JSON line per row to bench/results/<bench>.jsonl; returns the path."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{bench}.jsonl")
    stamp = now_iso()
    with open(path, "a") as out:
        for row in rows:
            out.write(json.dumps({"bench": bench, "date": stamp, "machine": info, **row}) + "\n")
    return path


def print_table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            if abs(value) >= 100:
                return f"{value:,.0f}"
            if abs(value) >= 1:
                return f"{value:.2f}"
            return f"{value:.4f}"
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value:,}"
        return "" if value is None else str(value)

    table = [[cell(row.get(column)) for column in columns] for row in rows]
    widths = [
        max(len(column), *(len(line[i]) for line in table)) for i, column in enumerate(columns)
    ]
    print(f"\n{title}")
    print("  ".join(column.ljust(width) for column, width in zip(columns, widths, strict=True)))
    print("  ".join("-" * width for width in widths))
    for line in table:
        print("  ".join(value.rjust(width) for value, width in zip(line, widths, strict=True)))
    sys.stdout.flush()


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def check(condition: bool, message: str, problems: list[str]) -> None:
    if not condition:
        problems.append(message)


def finish(bench: str, problems: list[str], targets: list[tuple[str, bool]]) -> int:
    """Prints the verification and target outcome; the exit status is 1 only for wrong results."""
    for name, met in targets:
        print(f"target {'met   ' if met else 'MISSED'}  {name}")
    if problems:
        for problem in problems:
            print(f"VERIFICATION FAILED ({bench}): {problem}", file=sys.stderr)
        return 1
    print(f"verified ({bench})")
    return 0


def run_python(
    module: str, args: list[str], env: dict[str, str], stderr: Any, root: str = PROJECT_ROOT
) -> subprocess.Popen[str]:
    """`python -m module` from the source tree `root` (its own webapp and bench packages)."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=root,
        env={**env, "PYTHONPATH": root},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


WORKER = [sys.executable, "-m", "flask", "--app", "webapp", "scheduler", "worker"]


def run_workers(
    args: list[str],
    count: int,
    env: dict[str, str],
    root: str = PROJECT_ROOT,
    started: Callable[[], None] | None = None,
) -> None:
    """`count` workers (`flask scheduler worker ARGS`, e.g. --burst) of the source tree `root`
    at once, until each has exited; `started` is called once they are all spawned. Each one's
    log goes to a file, as a worker's goes to its journal: a pipe read only once an earlier
    worker has exited fills after about 500 lines (64 KB) and then blocks the later worker's
    loop in its log call (execution's figures were 0.6-0.7x of themselves that way). Raises
    with the tail of a failed worker's log."""
    logs = [tempfile.TemporaryFile("w+") for _ in range(count)]
    try:
        workers = [
            subprocess.Popen(
                [*WORKER, *args],
                cwd=root,
                env={**env, "PYTHONPATH": root},
                stdout=subprocess.DEVNULL,
                stderr=log,
                text=True,
            )
            for log in logs
        ]
        if started is not None:
            started()
        for worker, log in zip(workers, logs, strict=True):
            if worker.wait() != 0:
                log.seek(0)
                raise RuntimeError(f"worker exited {worker.returncode}: {log.read()[-2000:]}")
    finally:
        for log in logs:
            log.close()


def ab_trees(
    doc: str, argv: list[str] | None, **counts: int
) -> tuple[argparse.Namespace, dict[str, str]]:
    """An A/B harness's command line: --a and --b (the source trees before and after a change)
    and an integer option for each of `counts` (its default); the options and the trees."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--a", required=True, help="source tree before")
    parser.add_argument("--b", required=True, help="source tree after")
    for name, default in counts.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    options = parser.parse_args(argv)
    return options, {"A": os.path.abspath(options.a), "B": os.path.abspath(options.b)}
