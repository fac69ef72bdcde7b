"""Soak (`make soak`, minutes): 8 real worker processes, 10,000 schedules, three fire times each.

The schedules fire in real time, on the wall clock: each has the cron `M1,M2,M3 * * * *` (UTC) for
the next three whole minutes M1 < M2 < M3 (the first at least --lead seconds away, so that the
workers are up and idle before it), so every minute 10,000 runs are due at once, and then nothing
until the next hour. 8 `flask scheduler worker` processes (the real loop: tick, lease, run
bench.noop, store, reap, renew) run from before M1 until every run of M3 has ended; then they get
SIGTERM and must exit 0.

Verified: one run per (schedule, fire time) for each of the 3 fire times, none twice (0
duplicates), none missing (0 missed), no run at another time, every run succeeded, no worker
died. Printed: each worker's RSS (VmRSS) when it has registered and is idle, after the first fire
time's runs have ended, and at the end; duration and runs/s. Exits 1 on any wrong result.

    python -m bench.soak [--schedules 10000] [--workers 8] [--lead 45]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import IO, Any

from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from bench.common import (
    PROJECT_ROOT,
    WORKER,
    check,
    finish,
    machine,
    postgres_server,
    print_table,
    worker_env,
    write_results,
)
from bench.fire import seed
from webapp.models import Run, Worker

MINUTE = timedelta(minutes=1)


def rss_kb(pid: int) -> int:
    """The process's resident set (VmRSS), in kB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def fire_times(lead: float) -> list[datetime]:
    start = datetime.now(UTC) + timedelta(seconds=lead)
    first = start.replace(second=0, microsecond=0) + MINUTE
    return [first, first + MINUTE, first + 2 * MINUTE]


def start_worker(url: str, log: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        WORKER,
        cwd=PROJECT_ROOT,
        env=worker_env(url),
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def scalar(engine: Engine, query: Any) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(query) or 0)


def wait_until(
    what: str,
    condition: Callable[[], bool],
    deadline: float,
    workers: list[subprocess.Popen[bytes]],
) -> None:
    while not condition():
        dead = [worker.pid for worker in workers if worker.poll() is not None]
        if dead:
            raise RuntimeError(f"worker(s) {dead} died while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.5)


def ended(engine: Engine, fire: datetime, count: int) -> bool:
    """Every schedule has a run for `fire`, and no run is queued or running."""
    recorded = scalar(
        engine, select(func.count()).select_from(Run).where(Run.scheduled_for == fire)
    )
    unfinished = scalar(
        engine,
        select(func.count()).select_from(Run).where(Run.status.in_(("queued", "running"))),
    )
    return recorded >= count and unfinished == 0


def verify(engine: Engine, fires: list[datetime], problems: list[str]) -> dict[str, int]:
    params = {"m1": fires[0], "m2": fires[1], "m3": fires[2]}
    with engine.connect() as connection:
        figures = {
            "runs": connection.scalar(select(func.count()).select_from(Run)),
            "duplicates": connection.scalar(
                text(
                    "SELECT count(*) FROM (SELECT 1 FROM runs GROUP BY schedule_id, "
                    "scheduled_for HAVING count(*) > 1) AS twice"
                )
            ),
            "missed": connection.scalar(
                text(
                    "SELECT count(*) FROM schedules s CROSS JOIN (VALUES "
                    "(CAST(:m1 AS timestamptz)), (CAST(:m2 AS timestamptz)), "
                    "(CAST(:m3 AS timestamptz))) AS f(at) WHERE NOT EXISTS (SELECT 1 FROM runs r "
                    "WHERE r.schedule_id = s.id AND r.scheduled_for = f.at)"
                ),
                params,
            ),
            "other_times": connection.scalar(
                select(func.count()).select_from(Run).where(Run.scheduled_for.not_in(fires))
            ),
            "not_succeeded": connection.scalar(
                select(func.count()).select_from(Run).where(Run.status != "succeeded")
            ),
            "catchup": connection.scalar(
                select(func.count()).select_from(Run).where(Run.trigger != "schedule")
            ),
        }
    result = {name: int(value or 0) for name, value in figures.items()}
    for name in ("duplicates", "missed", "other_times", "not_succeeded"):
        check(result[name] == 0, f"{result[name]} {name.replace('_', ' ')}", problems)
    return result


def fire_spans(engine: Engine, fires: list[datetime]) -> list[float]:
    """Seconds from each fire time to the end of its last run."""
    with engine.connect() as connection:
        last = dict(
            connection.execute(
                select(Run.scheduled_for, func.max(Run.finished_at)).group_by(Run.scheduled_for)
            ).all()
        )
    return [(end - fire).total_seconds() for fire in fires if (end := last.get(fire))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--lead", type=float, default=45.0, help="seconds before the first fire")
    options = parser.parse_args()
    problems: list[str] = []
    with postgres_server() as server, tempfile.TemporaryDirectory(prefix="soak-") as logs:
        url = server.url(server.create_database())
        engine = create_engine(url, poolclass=NullPool)
        fires = fire_times(options.lead)
        minutes = ",".join(str(fire.minute) for fire in fires)
        seed(engine, [(f"{minutes} * * * *", "UTC")] * options.schedules, fires[0])
        print(
            f"soak: {options.schedules:,} schedules '{minutes} * * * *' (UTC), fire times "
            f"{', '.join(f'{fire:%H:%M}' for fire in fires)}; {options.workers} workers",
            flush=True,
        )
        log_files = [
            open(os.path.join(logs, f"worker-{n}.log"), "wb") for n in range(options.workers)
        ]
        workers = [start_worker(url, log) for log in log_files]
        rss: dict[int, dict[str, int]] = {worker.pid: {} for worker in workers}
        began = time.monotonic()
        try:
            wait_until(
                "the workers to register",
                lambda: scalar(engine, select(func.count()).select_from(Worker)) == options.workers,
                time.monotonic() + 120,
                workers,
            )
            time.sleep(2)  # past their first round
            for worker in workers:
                rss[worker.pid]["start"] = rss_kb(worker.pid)
            end_by = time.monotonic() + (fires[2] - datetime.now(UTC)).total_seconds() + 300
            for name, fire in (("after first", fires[0]), ("end", fires[2])):
                wait_until(
                    f"the runs of {fire:%H:%M}",
                    partial(ended, engine, fire, options.schedules),
                    end_by,
                    workers,
                )
                print(f"  runs of {fire:%H:%M} ended", flush=True)
                for worker in workers:
                    rss[worker.pid][name] = rss_kb(worker.pid)
            duration = time.monotonic() - began
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            codes = [worker.wait(60) for worker in workers]
            check(codes == [0] * len(workers), f"worker exit codes {codes}", problems)
        except RuntimeError as error:
            problems.append(str(error))
            duration = time.monotonic() - began
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait(10)
            for log in log_files:
                log.close()
        if problems and any("died" in problem for problem in problems):
            for name in sorted(os.listdir(logs)):
                with open(os.path.join(logs, name)) as log_text:
                    print(f"--- {name} (tail)\n{log_text.read()[-3000:]}", file=sys.stderr)
        figures = verify(engine, fires, problems)
        spans = fire_spans(engine, fires)
        engine.dispose()
        info = machine(server.version())
    busy = sum(spans)
    rows = [
        {
            "worker": f"pid {pid}",
            "rss_start_mb": values.get("start", 0) / 1024,
            "rss_after_first_mb": values.get("after first", 0) / 1024,
            "rss_end_mb": values.get("end", 0) / 1024,
            "growth_after_first_mb": (values.get("end", 0) - values.get("after first", 0)) / 1024,
        }
        for pid, values in rss.items()
    ]
    print_table(
        "Worker memory (VmRSS)",
        rows,
        ["worker", "rss_start_mb", "rss_after_first_mb", "rss_end_mb", "growth_after_first_mb"],
    )
    summary = {
        **figures,
        "schedules": options.schedules,
        "workers": options.workers,
        "duration_s": duration,
        "seconds_to_last_run_per_fire": [round(span, 2) for span in spans],
        "runs_per_s": figures["runs"] / busy if busy else 0.0,
    }
    print_table(
        "Soak",
        [summary],
        [
            "schedules",
            "workers",
            "runs",
            "duplicates",
            "missed",
            "other_times",
            "not_succeeded",
            "catchup",
            "duration_s",
            "runs_per_s",
        ],
    )
    print(
        "  seconds from each fire time to its last run's end: "
        + ", ".join(f"{span:.1f}" for span in spans)
        + " (runs/s = runs / their sum)"
    )
    write_results("soak", [{**summary, "rss_kb": list(rss.values())}], info)
    return finish("soak", problems, [])


if __name__ == "__main__":
    sys.exit(main())
