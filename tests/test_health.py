"""/healthz and `flask scheduler health`: what they check, their answers and exit codes."""

from __future__ import annotations

import json
import os
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from flask_migrate import downgrade

from tests.conftest import WorkerFactory, World, make_schedule, migrated_app
from tests.pg_cluster import free_port

PASSWORD = "pa55-w0rd-never-shown"
# The newest migration and the one before it, as the files name them.
REVISIONS = sorted(
    path.name.split("_")[0]
    for path in (Path(__file__).parent.parent / "migrations" / "versions").glob("[0-9]*.py")
)
HEAD, PREVIOUS = REVISIONS[-1], REVISIONS[-2]
# The release the checkout declares, which an installed checkout reports.
PYPROJECT = Path(__file__).parent.parent / "pyproject.toml"
PYPROJECT_VERSION = tomllib.loads(PYPROJECT.read_text())["project"]["version"]


@pytest.fixture(params=["sqlite", "postgresql"])
def unreachable_app(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Flask:
    """An app whose database cannot be reached: a SQLite file in a folder that does not exist,
    or a PostgreSQL server that does not listen (with a password in the URL)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/missing-folder/{PASSWORD}.db"
    else:
        url = f"postgresql+psycopg://scheduler:{PASSWORD}@127.0.0.1:{free_port()}/scheduler"
    return migrated_app(url)


def seconds_ago(seconds: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)


def test_healthz_answers_200_with_its_checks(app: Flask) -> None:
    response = app.test_client().get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {
        "status": "ok",
        "version": PYPROJECT_VERSION,
        "checks": {
            "database": {"ok": True},
            "migrations": {"ok": True, "current": HEAD, "head": HEAD},
        },
    }
    assert "Set-Cookie" not in response.headers


def test_healthz_answers_503_when_the_migrations_are_behind(app: Flask) -> None:
    downgrade(revision=PREVIOUS)
    response = app.test_client().get("/healthz")
    assert response.status_code == 503
    body = response.get_json()
    assert body["status"] == "fail"
    assert body["checks"]["database"] == {"ok": True}
    assert body["checks"]["migrations"] == {"ok": False, "current": PREVIOUS, "head": HEAD}


def test_healthz_answers_503_without_a_traceback_or_the_password_when_the_database_is_down(
    unreachable_app: Flask,
) -> None:
    with unreachable_app.app_context():
        response = unreachable_app.test_client().get("/healthz")
    assert response.status_code == 503
    body = response.get_json()
    assert body["status"] == "fail"
    assert body["checks"]["database"] == {"ok": False, "error": "OperationalError"}
    assert body["checks"]["migrations"]["ok"] is False
    text = response.get_data(as_text=True)
    assert PASSWORD not in text and "Traceback" not in text and "127.0.0.1" not in text


def test_health_fails_without_a_worker(app: Flask, cli: FlaskCliRunner) -> None:
    result = cli.invoke(args=["scheduler", "health"])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert "ok database reachable" in lines
    assert f"ok migrations at head ({HEAD})" in lines
    assert "fail no worker heartbeat in the last 120 s (no worker is running)" in lines


def test_health_passes_with_a_fresh_heartbeat_and_nothing_overdue(
    app: Flask, world: World, cli: FlaskCliRunner, make_worker: WorkerFactory
) -> None:
    worker = make_worker(hostname="host-a", last_heartbeat_at=seconds_ago(5))
    make_schedule(world.alpha, "hourly", datetime.now(UTC) + timedelta(minutes=30))
    result = cli.invoke(args=["scheduler", "health"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert all(line.startswith("ok ") for line in lines), lines
    # 5 s ago when written; a second more if the machine is slow between the write and the check.
    fresh = [f"ok worker heartbeat fresh (worker {worker.id} on host-a, {s} s ago)" for s in (5, 6)]
    assert set(fresh) & set(lines), lines


def test_health_fails_when_the_newest_heartbeat_is_older_than_the_limit(
    app: Flask, cli: FlaskCliRunner, make_worker: WorkerFactory
) -> None:
    worker = make_worker(hostname="host-a", last_heartbeat_at=seconds_ago(300))
    make_worker(stopped_at=datetime.now(UTC))  # a clean exit: not alive
    result = cli.invoke(args=["scheduler", "health"])
    assert result.exit_code == 1
    assert (
        f"fail no worker heartbeat in the last 120 s (newest: worker {worker.id} on host-a, "
        "5 min ago)"
    ) in result.output.splitlines()
    assert cli.invoke(args=["scheduler", "health", "--max-heartbeat-age", "600"]).exit_code == 0


def test_health_fails_on_a_schedule_overdue_beyond_the_grace(
    app: Flask, world: World, cli: FlaskCliRunner, make_worker: WorkerFactory
) -> None:
    make_worker()
    make_schedule(world.alpha, "nightly", datetime.now(UTC) - timedelta(minutes=12, seconds=5))
    make_schedule(world.beta, "recent", datetime.now(UTC) - timedelta(minutes=6))
    make_schedule(world.beta, "within-grace", datetime.now(UTC) - timedelta(minutes=2))
    result = cli.invoke(args=["scheduler", "health"])
    assert result.exit_code == 1
    assert (
        "fail 2 schedules overdue beyond the 300 s grace (oldest: alpha/nightly due 12 min ago)"
    ) in result.output.splitlines()


def test_health_prints_json_on_request(
    app: Flask, cli: FlaskCliRunner, make_worker: WorkerFactory
) -> None:
    make_worker()
    result = cli.invoke(args=["scheduler", "health", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["status"] == "ok"
    assert report["checks"]["migrations"] == {
        "ok": True,
        "current": HEAD,
        "head": HEAD,
        "message": f"migrations at head ({HEAD})",
    }


def test_health_exits_1_with_one_line_when_the_database_is_unreachable(
    unreachable_app: Flask,
) -> None:
    result = unreachable_app.test_cli_runner().invoke(args=["scheduler", "health"])
    assert result.exit_code == 1
    (line,) = result.output.splitlines()
    assert line.startswith("fail database unreachable: ")
    assert PASSWORD not in line and "Traceback" not in result.output
