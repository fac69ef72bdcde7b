"""The deployment examples in deploy/ name only commands, files and URLs that exist: an example
that has rotted is worse than none."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import click
import yaml
from flask import Flask

PROJECT = Path(__file__).resolve().parent.parent
DEPLOY = PROJECT / "deploy"
CONSOLE_SCRIPTS = set(tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["scripts"])


def check_command(app: Flask, argv: list[str]) -> None:
    """`argv` runs something this project ships, with options its command accepts."""
    program = Path(argv[0]).name
    if program == "gunicorn":
        assert argv[1:3] == ["-c", argv[2]] and (PROJECT / Path(argv[2]).name).exists(), argv
    elif program in CONSOLE_SCRIPTS:
        assert argv[1:] == [], argv
    else:
        assert program == "flask" and argv[1:3] == ["--app", "webapp"], argv
        command: click.Command = app.cli
        words = argv[3:]
        while isinstance(command, click.Group) and words:
            found = command.get_command(click.Context(command), words[0])
            assert found is not None, f"{argv}: no command {words[0]!r}"
            command, words = found, words[1:]
        assert not isinstance(command, click.Group), argv
        command.make_context(command.name, list(words))  # its options parse


def kubernetes_documents() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((DEPLOY / "kubernetes" / "scheduler.yaml").read_text()))


def test_the_kubernetes_example_runs_shipped_commands_and_probes_real_urls(app: Flask) -> None:
    documents = kubernetes_documents()
    assert [d["kind"] for d in documents] == ["Job", "Deployment", "Service", "Deployment"]
    client = app.test_client()
    probes = 0
    for document in documents:
        pod = document["spec"].get("template", {}).get("spec", {})
        for container in pod.get("containers", []):
            check_command(app, container["command"])
            for probe_name in ("readinessProbe", "livenessProbe"):
                probe = container.get(probe_name)
                if probe is None:
                    continue
                probes += 1
                if "httpGet" in probe:
                    assert client.get(probe["httpGet"]["path"]).status_code == 200
                else:
                    check_command(app, probe["exec"]["command"])
    assert probes == 4


def test_the_systemd_units_run_shipped_commands(app: Flask) -> None:
    units = sorted((DEPLOY / "systemd").glob("*.service"))
    assert [unit.name for unit in units] == [
        "scheduler-health.service",
        "scheduler-web.service",
        "scheduler-worker@.service",
    ]
    for unit in units:
        lines = re.findall(r"^Exec(?:Start|StartPre)=(.+)$", unit.read_text(), re.MULTILINE)
        assert lines, unit
        for line in lines:
            check_command(app, shlex.split(line))
