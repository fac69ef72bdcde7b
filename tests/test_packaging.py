"""The package installs as `make run` installs it, without setuptools' warnings."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_an_editable_install_prints_no_warning_and_ships_the_console_script(
    tmp_path: Path,
) -> None:
    # --prefix: a real `pip install -e .` (build isolation, the setuptools that pyproject.toml
    # asks for) into another place; --ignore-installed, or pip would first uninstall the
    # checkout from the environment running the tests.
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--ignore-installed"]
    command += ["--no-warn-script-location"]
    result = subprocess.run(
        [*command, "--prefix", str(tmp_path), "--editable", str(ROOT)],
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "BuildBackendWarning" not in output
    assert "same name as your package" not in " ".join(output.split())
    assert (tmp_path / "bin" / "scheduler-worker").exists()
    # The checkout is what gets imported: templates/ and static/ are found beside webapp/.
    (pth,) = tmp_path.glob("lib/python*/site-packages/__editable__.tenantcron-*.pth")
    assert pth.read_text().split() == [str(ROOT)]
    # A distinctive distribution name ("webapp" is too generic to be ours on a package index),
    # with the extras the README installs: `pip install '.[celery]'`.
    (metadata,) = tmp_path.glob("lib/python*/site-packages/tenantcron-*.dist-info/METADATA")
    fields = metadata.read_text().splitlines()
    assert "Name: tenantcron" in fields
    assert {"Provides-Extra: celery", "Provides-Extra: production"} <= set(fields)


def imported_roots(folder: Path) -> set[str]:
    """The top-level names that the modules under `folder` import absolutely."""
    roots = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                roots |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots.add(node.module.split(".")[0])
    return roots


def test_every_distribution_the_code_imports_is_declared() -> None:
    # A name imported only through another package's dependency (Flask-WTF's WTForms) breaks
    # the day that package drops it: what the code imports, pyproject.toml declares.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        requirements += extra  # Celery: imported only when SCHEDULER_EXECUTOR=celery
    declared = {canonical(re.split(r"[\[<>=~ ;]", item, maxsplit=1)[0]) for item in requirements}
    distributions = packages_distributions()
    imported = imported_roots(ROOT / "webapp") | imported_roots(ROOT / "migrations")
    third_party = sorted(imported - set(sys.stdlib_module_names) - {"webapp"})
    undeclared = {
        root: distributions.get(root)
        for root in third_party
        if not {canonical(name) for name in distributions.get(root, [])} & declared
    }
    assert undeclared == {}


def canonical(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()
