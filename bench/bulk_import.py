"""Bulk import: 10,000 schedules through `flask schedule import`, in seconds per 1,000.

Three imports of one file through the real command (a new process each, as an operator runs
it): every schedule new, the same file again (all unchanged), then every expression changed.
The command's start-up cost (`flask tenant list` in the same environment) is printed beside.
Verified: the tenant has exactly N schedules, each with the next fire time of its expression.

    python -m bench.bulk_import [--n 10000] [--quick] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import create_engine, select
from sqlalchemy.pool import NullPool

from bench.common import (
    PROJECT_ROOT,
    check,
    finish,
    machine,
    migrate,
    postgres_server,
    print_table,
    sqlite_url,
    worker_env,
    write_results,
)
from bench.workloads import realistic
from webapp import cron
from webapp.models import Schedule, Tenant


def flask(env: dict[str, str], *args: str) -> float:
    """Runs `flask --app webapp ARGS`, returns its wall time; fails loudly on a non-zero exit."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "webapp", *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"flask {' '.join(args)} failed: {done.stderr[-2000:]}")
    return elapsed


def items(n: int, shift: int = 0) -> list[dict[str, Any]]:
    schedules = realistic(n, seed=42 + shift)
    return [
        {
            "key": f"import-{i}",
            "name": f"Imported {i}",
            "job": "bench.noop",
            "args": {},
            "cron": expression,
            "time_zone": zone,
        }
        for i, (expression, zone) in enumerate(schedules)
    ]


def verify(
    url: str,
    data: list[dict[str, Any]],
    start: datetime,
    end: datetime,
    problems: list[str],
    label: str,
) -> None:
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as connection:
        stored = {
            key: (cron_text, zone, next_run_at)
            for key, cron_text, zone, next_run_at in connection.execute(
                select(Schedule.key, Schedule.cron, Schedule.time_zone, Schedule.next_run_at)
                .join(Tenant, Tenant.id == Schedule.tenant_id)
                .where(Tenant.slug == "bench")
            )
        }
    engine.dispose()
    check(
        len(stored) == len(data),
        f"{label}: {len(stored)} schedules, expected {len(data)}",
        problems,
    )
    wrong = 0
    for item in data:
        found = stored.get(item["key"])
        if found is None or found[0] != item["cron"] or found[1] != item["time_zone"]:
            wrong += 1
            continue
        spec = cron.validate(item["cron"], item["time_zone"])
        low, high = spec.next_fire_after(start), spec.next_fire_after(end)
        if found[2] is None or not low <= found[2] <= high:
            wrong += 1
    check(wrong == 0, f"{label}: {wrong} schedules stored wrong", problems)


def bench_database(url: str, n: int, problems: list[str], dialect: str) -> dict[str, Any]:
    env = worker_env(url)
    flask(env, "tenant", "create", "bench", "--name", "Bench")
    startup = min(flask(env, "tenant", "list") for _ in range(3))
    row: dict[str, Any] = {"database": dialect, "n": n, "startup_s": startup}
    with tempfile.TemporaryDirectory(prefix="bench-import-") as directory:
        first, changed = items(n), items(n, shift=1)
        created = datetime.now(UTC)
        for label, data in (("create", first), ("unchanged", first), ("update", changed)):
            path = os.path.join(directory, f"{label}.json")
            with open(path, "w") as out:
                json.dump(data, out)
            start = datetime.now(UTC)
            elapsed = flask(env, "schedule", "import", path, "--tenant", "bench")
            end = datetime.now(UTC)
            # An unchanged schedule keeps the next fire time its create computed, even once a
            # minute boundary has passed since (the tick fires it then): checked from there.
            since = created if label == "unchanged" else start
            verify(url, data, since, end, problems, f"{dialect} {label}")
            row[f"{label}_s"] = elapsed
            row[f"{label}_s_per_1000"] = elapsed / n * 1000
            row[f"{label}_s_per_1000_net"] = (elapsed - startup) / n * 1000
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="2,000 schedules")
    parser.add_argument("--no-sqlite", action="store_true")
    options = parser.parse_args(argv)
    n = 2_000 if options.quick else options.n
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    with postgres_server() as server:
        version = server.version()
        database = server.create_database()
        rows.append(bench_database(server.url(database), n, problems, "postgresql"))
    if not options.no_sqlite:
        with tempfile.TemporaryDirectory(prefix="bench-import-") as directory:
            url = sqlite_url(directory)
            migrate(url)
            rows.append(bench_database(url, n, problems, "sqlite"))
    info = machine(version)
    write_results("bulk_import", rows, info)
    print_table(
        f"Bulk import of {n:,} schedules with `flask schedule import` (seconds; per 1,000 net of "
        "start-up)",
        rows,
        (
            "database",
            "startup_s",
            "create_s",
            "create_s_per_1000_net",
            "unchanged_s",
            "unchanged_s_per_1000_net",
            "update_s",
            "update_s_per_1000_net",
        ),
    )
    return finish("bulk_import", problems, [])


if __name__ == "__main__":
    sys.exit(main())
