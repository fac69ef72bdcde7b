"""The suite's own time limit (pyproject.toml, [tool.pytest.ini_options] timeout): a test that
hangs fails with the stacks of its threads, and the tests after it still run. Without it, one
hung test (a worker process that never exits, a read that never returns) held CI until its 90
minutes were up."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]

HUNG_AND_FINE = """
import socket
import threading


def test_hangs_on_a_read_nobody_answers():
    never = threading.Event()
    threading.Thread(target=never.wait, name="waits-for-nothing", daemon=True).start()
    reader, writer = socket.socketpair()
    with reader, writer:
        reader.recv(1)


def test_after_it():
    assert True
"""


def test_a_hung_test_fails_with_its_stacks_and_the_suite_goes_on(tmp_path: Path) -> None:
    (tmp_path / "test_hung.py").write_text(textwrap.dedent(HUNG_AND_FINE))
    started = time.monotonic()
    # The project's settings (its timeout method), with a limit of 3 s instead of 600.
    settings = ["-c", str(PROJECT / "pyproject.toml"), "--timeout", "3", "--rootdir", str(tmp_path)]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *settings, "-p", "no:cacheprovider", "test_hung.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Failed: Timeout (>3.0s)" in output, output
    assert "reader.recv(1)" in output, output  # where it hung
    assert "waits-for-nothing" in output, output  # and the stacks of its other threads
    assert "1 failed, 1 passed" in output, output
    assert time.monotonic() - started < 60
