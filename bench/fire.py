"""Fire throughput: N schedules all due at once, 2 processes running the project's real tick.

For each workload, rounds alternate the project's tick with the raw-SQL ceiling (the same
claim + insert + advance done in SQL, one statement per batch of 500) on the same database of
the same cluster, and the result is the ratio of the medians. Verified after every project
round: exactly N runs, no duplicate (schedule_id, scheduled_for), nothing left due, and every
next_run_at equal to the cron module's next fire time.

    python -m bench.fire [--n 10000] [--rounds 3] [--quick] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import create_engine, func, insert, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from bench.common import (
    check,
    commit_count,
    finish,
    machine,
    median,
    migrate,
    postgres_server,
    print_table,
    run_python,
    sqlite_url,
    worker_env,
    write_results,
)
from bench.workloads import realistic, worst_case
from webapp import cron
from webapp.models import Run, Schedule, Tenant

PROJECT_BATCH = 300  # SCHEDULER_BATCH_SIZE's default
CEILING_BATCH = 500


def fire_instant() -> datetime:
    """The common fire time: the last whole minute (all schedules are due at it)."""
    return datetime.now(UTC).replace(second=0, microsecond=0)


def seed(engine: Engine, schedules: list[tuple[str, str]], due: datetime) -> None:
    with engine.begin() as connection:
        tenant_id = connection.execute(
            insert(Tenant).values(slug="bench", name="Bench", time_zone="UTC").returning(Tenant.id)
        ).scalar_one()
        rows = [
            {
                "tenant_id": tenant_id,
                "scope": "tenant",
                "key": f"s{index}",
                "name": f"Schedule {index}",
                "job": "bench.noop",
                "args": {},
                "cron": expression,
                "time_zone": zone,
                "active": True,
                "misfire_policy": "fire_once",
                "overlap_policy": "allow",
                "next_run_at": due,
            }
            for index, (expression, zone) in enumerate(schedules)
        ]
        connection.execute(insert(Schedule), rows)


def reset(engine: Engine, due: datetime) -> None:
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM runs"))
        connection.execute(
            text("UPDATE schedules SET next_run_at = :due, last_run_at = NULL"), {"due": due}
        )
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text("VACUUM ANALYZE schedules, runs"))


def fire_once(url: str, processes: int, now: datetime, raw: bool) -> dict[str, Any]:
    """Starts the processes, lets them go at once, returns their combined figures."""
    batch = CEILING_BATCH if raw else PROJECT_BATCH
    args = ["--url", url, "--now", now.isoformat(), "--batch-size", str(batch)]
    if raw:
        args.append("--raw")
    workers = [run_python("bench.fire_worker", args, worker_env(url)) for _ in range(processes)]
    for worker in workers:
        assert worker.stdout is not None
        line = worker.stdout.readline().strip()
        if line != "ready":
            worker.wait()
            raise RuntimeError(f"fire worker failed: {line} {worker.stderr.read()}")  # type: ignore[union-attr]
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    results = []
    for worker in workers:
        out, err = worker.communicate()
        if worker.returncode != 0:
            raise RuntimeError(f"fire worker exited {worker.returncode}: {err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    start = min(r["start"] for r in results)
    end = max(r["end"] for r in results)
    fired = sum(r["fired"] for r in results)
    return {
        "fired": fired,
        "seconds": end - start,
        "fires_per_s": fired / (end - start),
        "split": [r["fired"] for r in results],
        "commits_in_process": sum(r["commits"] for r in results),
    }


def verify(
    engine: Engine,
    schedules: list[tuple[str, str]],
    due: datetime,
    now: datetime,
    problems: list[str],
    label: str,
) -> None:
    n = len(schedules)
    with engine.connect() as connection:
        runs = connection.scalar(select(func.count()).select_from(Run))
        check(runs == n, f"{label}: {runs} runs, expected exactly {n}", problems)
        duplicates = connection.scalar(
            text(
                "SELECT count(*) FROM (SELECT schedule_id, scheduled_for FROM runs "
                "GROUP BY schedule_id, scheduled_for HAVING count(*) > 1) AS d"
            )
        )
        check(duplicates == 0, f"{label}: {duplicates} duplicate fires", problems)
        wrong = connection.scalar(
            select(func.count())
            .select_from(Run)
            .where(
                (Run.scheduled_for != due) | (Run.status != "queued") | (Run.trigger != "schedule")
            )
        )
        check(wrong == 0, f"{label}: {wrong} runs not queued for the fire time", problems)
        left = connection.scalar(
            select(func.count())
            .select_from(Schedule)
            .where(Schedule.active, Schedule.next_run_at <= now)
        )
        check(left == 0, f"{label}: {left} schedules still due", problems)
        stored = dict(connection.execute(select(Schedule.key, Schedule.next_run_at)).all())
    mistakes = 0
    for index, (expression, zone) in enumerate(schedules):
        expected = cron.validate(expression, zone).next_fire_after(due)
        if stored.get(f"s{index}") != expected:
            mistakes += 1
    check(mistakes == 0, f"{label}: {mistakes} schedules with a wrong next_run_at", problems)


def bench_workload(
    name: str,
    url: str,
    engine: Engine,
    schedules: list[tuple[str, str]],
    processes: int,
    rounds: int,
    problems: list[str],
    server: Any = None,
    database: str | None = None,
) -> dict[str, Any]:
    due = fire_instant()
    now = due + timedelta(seconds=1)
    seed(engine, schedules, due)
    project: list[dict[str, Any]] = []
    ceiling: list[dict[str, Any]] = []
    for round_number in range(rounds):
        order = (True, False) if round_number % 2 == 0 else (False, True)
        for raw in order:
            reset(engine, due)
            before = commit_count(server, database) if server is not None else None
            figures = fire_once(url, processes, now, raw)
            if before is not None:
                figures["commits"] = commit_count(server, database) - before  # type: ignore[arg-type]
            else:
                figures["commits"] = figures["commits_in_process"]
            if raw:
                check(
                    figures["fired"] == len(schedules),
                    f"{name} ceiling fired {figures['fired']}",
                    problems,
                )
                ceiling.append(figures)
            else:
                verify(engine, schedules, due, now, problems, f"{name} round {round_number + 1}")
                project.append(figures)
    project_rate = median([f["fires_per_s"] for f in project])
    ceiling_rate = median([f["fires_per_s"] for f in ceiling])
    best = max(project, key=lambda f: f["fires_per_s"])
    return {
        "workload": name,
        "database": engine.dialect.name,
        "processes": processes,
        "n": len(schedules),
        "fires_per_s": project_rate,
        "ceiling_fires_per_s": ceiling_rate,
        "ratio": project_rate / ceiling_rate,
        "commits_per_fire": median([f["commits"] / f["fired"] for f in project]),
        "commits_in_process_per_fire": median(
            [f["commits_in_process"] / f["fired"] for f in project]
        ),
        "split": "/".join(str(s) for s in best["split"]),
        "rounds": rounds,
        "all_fires_per_s": [round(f["fires_per_s"]) for f in project],
        "all_ceiling_fires_per_s": [round(f["fires_per_s"]) for f in ceiling],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round, 2,000 schedules")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--only", choices=("realistic", "worst"), default=None)
    options = parser.parse_args(argv)
    n, rounds = (2_000, 1) if options.quick else (options.n, options.rounds)
    workloads = {"realistic": realistic(n), "worst": worst_case(n)}
    if options.only:
        workloads = {options.only: workloads[options.only]}
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    with postgres_server() as server:
        version = server.version()
        for name, schedules in workloads.items():
            database = server.create_database()
            url = server.url(database)
            engine = create_engine(url, poolclass=NullPool)
            rows.append(
                bench_workload(name, url, engine, schedules, 2, rounds, problems, server, database)
            )
            engine.dispose()
            server.drop(database)
    if not options.no_sqlite:
        for processes in (1, 2):
            with tempfile.TemporaryDirectory(prefix="bench-fire-") as directory:
                url = sqlite_url(directory)
                migrate(url)
                engine = create_engine(url, poolclass=NullPool)
                rows.append(
                    bench_workload(
                        "realistic",
                        url,
                        engine,
                        workloads.get("realistic", realistic(n)),
                        processes,
                        rounds,
                        problems,
                    )
                )
                engine.dispose()
    info = machine(version)
    write_results("fire", rows, info)
    print_table(
        f"Fire throughput: {n:,} schedules due at once "
        f"({info['nproc']} CPUs, PostgreSQL {version})",
        rows,
        (
            "workload",
            "database",
            "processes",
            "fires_per_s",
            "ceiling_fires_per_s",
            "ratio",
            "commits_per_fire",
            "split",
        ),
    )
    targets = []
    for row in rows:
        if row["database"] != "postgresql":
            continue
        floor = 0.25 if row["workload"] == "realistic" else 0.15
        targets.append(
            (f"fire {row['workload']}: ratio {row['ratio']:.2f} >= {floor}", row["ratio"] >= floor)
        )
        targets.append(
            (
                f"fire {row['workload']}: {row['commits_per_fire']:.4f} commits/fire <= 0.01",
                row["commits_per_fire"] <= 0.01,
            )
        )
    return finish("fire", problems, targets)


if __name__ == "__main__":
    sys.exit(main())
