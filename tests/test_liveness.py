"""A worker's own liveness (`scheduler alive`, the Kubernetes example's livenessProbe): this
process goes round its loop, whatever the rest of the installation does. A database outage or
an overdue schedule fails `scheduler health` (the fleet's check, for alerts) but must not get
every worker pod restarted; a worker frozen in its loop must."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from flask import Flask
from flask.testing import FlaskCliRunner

from tests.pg_cluster import free_port
from tests.worker_support import PROJECT, Workers, wait_for
from webapp.config import EXTENSION_KEY, settings

sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def alive(cli: FlaskCliRunner, *args: str) -> tuple[int, str]:
    result = cli.invoke(args=["scheduler", "alive", *args])
    return result.exit_code, result.output.strip()


@pytest.fixture
def liveness_file(app: Flask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "alive"
    chosen = settings().model_copy(update={"SCHEDULER_LIVENESS_FILE": str(path)})
    monkeypatch.setitem(app.extensions, EXTENSION_KEY, chosen)
    return path


def test_a_running_worker_is_alive_and_a_frozen_one_is_not(
    app: Flask, workers: Workers, cli: FlaskCliRunner, liveness_file: Path
) -> None:
    assert alive(cli) == (1, f"fail {liveness_file} does not exist: no worker has started here")
    worker = workers.start(SCHEDULER_LIVENESS_FILE=str(liveness_file))
    wait_for(liveness_file.exists, 30, "the worker to touch its liveness file")
    code, line = alive(cli, "--max-age", "2")
    assert code == 0 and line.startswith("ok the worker went round its loop"), line
    os.kill(worker.pid, signal.SIGSTOP)  # frozen: its loop goes round no more
    try:
        wait_for(lambda: alive(cli, "--max-age", "2")[0] == 1, 10, "the probe to fail")
        assert "has not gone round its loop for" in alive(cli, "--max-age", "2")[1]
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    wait_for(lambda: alive(cli, "--max-age", "2")[0] == 0, 10, "the probe to pass again")


@sqlite_only  # the worker's own database is out of reach either way
def test_a_worker_whose_database_is_away_stays_alive_while_the_fleet_check_fails(
    app: Flask, workers: Workers, cli: FlaskCliRunner, liveness_file: Path
) -> None:
    away = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres"
    environment = {"DATABASE_URL": away, "SCHEDULER_LIVENESS_FILE": str(liveness_file)}
    workers.start(**environment)
    wait_for(lambda: "action=database_unavailable" in workers.logs(), 30, "a refused connection")
    wait_for(lambda: alive(cli, "--max-age", "3")[0] == 0, 10, "the worker to stay alive")
    fleet = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "webapp", "scheduler", "health"],
        cwd=PROJECT,
        env={**os.environ, "SECRET_KEY": "test", **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert fleet.returncode == 1 and fleet.stdout.startswith("fail database unreachable")


def test_without_a_liveness_file_the_probe_says_so(app: Flask, cli: FlaskCliRunner) -> None:
    assert alive(cli) == (1, "fail SCHEDULER_LIVENESS_FILE is not set: the worker touches no file")


def test_the_kubernetes_workers_liveness_is_their_own_and_the_fleet_check_only_shows() -> None:
    documents = list(yaml.safe_load_all((PROJECT / "deploy/kubernetes/scheduler.yaml").read_text()))
    (worker,) = [d for d in documents if d["metadata"]["name"] == "scheduler-worker"]
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["exec"]["command"][-2:] == ["scheduler", "alive"]
    assert container["readinessProbe"]["exec"]["command"][-2:] == ["scheduler", "health"]
    environment = {each["name"]: each["value"] for each in container["env"]}
    assert environment["SCHEDULER_LIVENESS_FILE"].startswith("/")
