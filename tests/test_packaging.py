"""The package installs as `make run` installs it, without setuptools' warnings."""

from __future__ import annotations

import os
import subprocess
import sys
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
    (pth,) = tmp_path.glob("lib/python*/site-packages/__editable__.webapp-*.pth")
    assert pth.read_text().split() == [str(ROOT)]
