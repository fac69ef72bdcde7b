"""A worker's stop signals never wait on a lock: Ctrl-C on `make run` once left workers hung."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The main thread holds the lock that setting the event needs (as it does inside Event.wait's
# bookkeeping, Event.set or Event.clear, or a first signal's handler inside Event.set when a
# second signal comes) while both stop signals arrive. A handler that set the event itself
# would wait for that lock forever; with on_stop_signals the handlers return at once and the
# signal thread sets the event once the lock is free.
SCRIPT = textwrap.dedent(
    """
    import os, signal, threading, time
    from webapp.scheduler.worker import on_stop_signals

    stopped = threading.Event()
    seen = []

    def stop(signum):
        seen.append(signum)
        stopped.set()

    on_stop_signals(stop)
    with stopped._cond:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.3)  # both handlers have run by now, between two steps of this thread
        print("handlers returned", flush=True)
    assert stopped.wait(10), "no stop"
    deadline = time.monotonic() + 10
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    print(sorted(seen) == sorted([signal.SIGINT, signal.SIGTERM]), flush=True)
    """
)


def test_stop_signals_reach_the_worker_while_its_main_thread_holds_the_lock_they_need() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["handlers returned", "True"], done.stdout
