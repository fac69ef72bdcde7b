"""The command line as typed in a checkout: real `flask` and `scheduler-worker` processes."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
import urllib.request
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from flask import Flask

from tests.conftest import World, make_run
from tests.pg_cluster import free_port
from webapp.extensions import db
from webapp.models import Run

pytestmark = pytest.mark.slow
PROJECT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FLASK = [str(BIN / "flask"), "--app", "webapp"]
WORKER = [str(BIN / "scheduler-worker")]
SETTINGS = re.compile(r"^(SECRET_KEY|DATABASE_URL|SESSION_COOKIE_SECURE|SCHEDULER_.*)$")


def bare_environment(instance: Path, **settings: str) -> dict[str, str]:
    """The environment of a shell in which nothing was exported but `settings`."""
    kept = {name: value for name, value in os.environ.items() if not SETTINGS.match(name)}
    return {**kept, "SCHEDULER_INSTANCE_PATH": str(instance), **settings}


def serve_database(sqlite_template: str, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A migrated SQLite database of its own for `flask serve`, and the environment naming it."""
    database = tmp_path / "serve.db"
    shutil.copy(sqlite_template, database)
    return database, bare_environment(
        tmp_path, SECRET_KEY="k", DATABASE_URL=f"sqlite:///{database}"
    )


def run(
    command: list[str], env: dict[str, str], cwd: Path = PROJECT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "command",
    [
        [*FLASK, "tenant", "list"],
        [*FLASK, "db", "upgrade"],
        [*FLASK, "scheduler", "worker", "--burst"],
        [*FLASK, "scheduler-worker", "--burst"],
        [*WORKER, "--burst"],
    ],
    ids=["tenant list", "db upgrade", "scheduler worker", "scheduler-worker", "console script"],
)
def test_a_missing_secret_key_is_one_line_not_a_traceback(
    tmp_path: Path, command: list[str]
) -> None:
    result = run(command, bare_environment(tmp_path), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"Error: SECRET_KEY is not set: export SECRET_KEY or set it in {tmp_path}/config.py "
        "(see docs/reference/settings.md)"
    ]


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        ({"SCHEDULER_BATCH_SIZE": "many"}, "Error: SCHEDULER_BATCH_SIZE='many' is not a valid int"),
        (
            {"DATABASE_URL": "nosuch://user:secret@host/db"},
            "Error: DATABASE_URL cannot be used: Can't load plugin: sqlalchemy.dialects:nosuch",
        ),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(
    tmp_path: Path, settings: dict[str, str], line: str
) -> None:
    env = bare_environment(tmp_path, SECRET_KEY="k", **settings)
    for command in ([*FLASK, "tenant", "list"], [*WORKER, "--burst"]):
        result = run(command, env)
        assert (result.returncode, result.stderr.splitlines()) == (1, [line])


def test_the_readme_commands_work_in_the_checkout_that_make_run_set_up(tmp_path: Path) -> None:
    # The Makefile's own recipe, run in a scratch directory instead of the checkout.
    made = run(
        ["make", "-f", str(PROJECT / "Makefile"), "instance/config.py"], {**os.environ}, tmp_path
    )
    assert made.returncode == 0, made.stderr
    config = tmp_path / "instance" / "config.py"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    env = bare_environment(tmp_path / "instance")  # nothing exported, as a new admin types them
    for command in (
        [*FLASK, "db", "upgrade"],
        [*FLASK, "tenant", "create", "acme", "--name", "Acme"],
        [*FLASK, "catalog", "list"],  # the demo jobs are on, as in `make run`
    ):
        result = run(command, env)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    listed = run([*FLASK, "tenant", "list"], env)
    assert (listed.returncode, listed.stdout) == (
        0,
        "acme\tUTC\tAcme\tmax running no cap (default)\n",
    )
    assert "demo.echo" in result.stdout
    # Made again, the file is kept: the secret key (the sessions it signs) survives.
    before = config.read_text()
    again = run(
        ["make", "-f", str(PROJECT / "Makefile"), "instance/config.py"], {**os.environ}, tmp_path
    )
    assert again.returncode == 0 and config.read_text() == before


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def serving_worker(database: Path, port: int, served: subprocess.Popen[bytes]) -> int:
    """The pid of the worker that `flask serve` started, once the panel answers and the
    worker has registered."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert served.poll() is None, "flask serve exited"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                healthy = answer.status == 200
            with closing(sqlite3.connect(database)) as connection:
                running = "SELECT pid FROM workers WHERE stopped_at IS NULL"
                row = connection.execute(running).fetchone()
        except OSError:
            healthy, row = False, None
        if healthy and row is not None:
            return int(row[0])
        time.sleep(0.2)
    raise AssertionError("flask serve did not start its panel and worker within 60 s")


@pytest.mark.parametrize(
    ("signal_number", "ignored_before"),
    [
        (signal.SIGTERM, False),
        (signal.SIGHUP, False),
        (signal.SIGINT, False),
        # A command a script starts in the background gets SIGINT ignored, and Python keeps a
        # signal ignored that way, whereas the worker handles it: the worker stopped and its
        # panel went on serving, without one.
        (signal.SIGINT, True),
    ],
    ids=["TERM", "HUP", "INT", "INT-ignored-by-its-parent"],
)
def test_stopping_flask_serve_with_a_signal_stops_its_worker_too(
    sqlite_template: str, tmp_path: Path, signal_number: int, ignored_before: bool
) -> None:
    # `make run`'s panel stopped by kill, a supervisor, a closed terminal or Ctrl-C: its worker
    # must not go on firing schedules alone, nor the panel go on without a worker.
    database, env = serve_database(sqlite_template, tmp_path)
    port = free_port()
    log = tmp_path / "serve.log"
    ignore = "trap '' INT; " if ignored_before else ""  # inherited through exec, as from bash
    with log.open("w") as output:
        served = subprocess.Popen(
            ["bash", "-c", f"{ignore}exec {shlex.join(FLASK)} serve --port {port}"],
            env=env,
            cwd=PROJECT,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    worker_pid = None
    try:
        worker_pid = serving_worker(database, port, served)
        served.send_signal(signal_number)
        assert served.wait(timeout=60) == 0, log.read_text()
        worker_alive = alive(worker_pid)
    finally:
        if served.poll() is None:
            served.kill()
            served.wait()
        if worker_pid is not None and alive(worker_pid):
            os.kill(worker_pid, signal.SIGKILL)  # never left behind, whatever the outcome
    assert not worker_alive
    with closing(sqlite3.connect(database)) as connection:
        (stopped_at,) = connection.execute(
            "SELECT stopped_at FROM workers WHERE pid = ?", (worker_pid,)
        ).fetchone()
    assert stopped_at is not None  # it deregistered: a clean stop, not a killed process


def test_flask_serve_on_a_port_in_use_says_so_and_starts_no_worker(
    sqlite_template: str, tmp_path: Path
) -> None:
    """The port is bound before the worker starts and the URL is printed: a taken port ends
    the command with werkzeug's one line, and no worker is left behind firing schedules."""
    database, env = serve_database(sqlite_template, tmp_path)
    with closing(socket.socket()) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run([*FLASK, "serve", "--port", str(port)], env)
    time.sleep(3)  # a worker started before the bind would have registered by now
    with closing(sqlite3.connect(database)) as connection:
        workers = connection.execute("SELECT pid FROM workers").fetchall()
    for (pid,) in workers:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)  # never left behind, whatever the outcome
    assert result.returncode != 0
    assert f"Port {port} is in use" in result.stdout + result.stderr
    assert "Scheduler panel:" not in result.stdout
    assert workers == []


def options(help_text: str) -> str:
    return help_text[help_text.index("Options:") :]


def test_scheduler_worker_is_one_command_under_three_names(tmp_path: Path) -> None:
    env = bare_environment(tmp_path, SECRET_KEY="k")
    helps = [
        run([*FLASK, "scheduler", "worker", "--help"], env),
        run([*FLASK, "scheduler-worker", "--help"], env),
        run([*WORKER, "--help"], env),
    ]
    assert [result.returncode for result in helps] == [0, 0, 0]
    assert "--concurrency" in helps[0].stdout and "--burst" in helps[0].stdout
    assert options(helps[0].stdout) == options(helps[1].stdout) == options(helps[2].stdout)
    assert "Run a worker until SIGTERM/SIGINT." in helps[1].stdout


def test_flask_scheduler_worker_burst_runs_what_is_due(
    app: Flask, world: World, database_url: str, tmp_path: Path
) -> None:
    due = make_run(world.alpha, scheduled_for=datetime(2026, 1, 1, tzinfo=UTC))
    env = bare_environment(
        tmp_path, SECRET_KEY="k", DATABASE_URL=database_url, SCHEDULER_DEMO_JOBS="1"
    )
    result = run([*FLASK, "scheduler-worker", "--burst", "--concurrency", "2"], env)
    assert result.returncode == 0, result.stderr
    db.session.rollback()
    assert db.session.get_one(Run, due.id).status == "succeeded"


def test_flask_serve_logs_the_panels_requests_apart_without_static_files_or_banner(
    sqlite_template: str, tmp_path: Path
) -> None:
    database, env = serve_database(sqlite_template, tmp_path)
    port = free_port()
    out, err = tmp_path / "serve.out", tmp_path / "serve.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        command = [*FLASK, "serve", "--port", str(port)]
        served = subprocess.Popen(command, env=env, cwd=PROJECT, stdout=stdout, stderr=stderr)
    worker_pid = None
    try:
        worker_pid = serving_worker(database, port, served)
        for path in ("/login", "/static/app.css", "/static/app.js"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                assert answer.status == 200
        served.send_signal(signal.SIGTERM)
        assert served.wait(timeout=60) == 0
    finally:
        if served.poll() is None:
            served.kill()
            served.wait()
        if worker_pid is not None and alive(worker_pid):
            os.kill(worker_pid, signal.SIGKILL)
    panel, worker = out.read_text(), err.read_text()
    requests = [line for line in panel.splitlines() if line.startswith("panel ")]
    assert "panel GET /login 200" in requests and "panel GET /healthz 200" in requests
    assert not [line for line in requests if "/static/" in line]
    assert "development server" not in panel + worker and " * Running on" not in panel + worker
    assert "action=worker_started" in worker and "panel " not in worker
