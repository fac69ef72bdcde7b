"""Fair leasing: a small tenant's wait while another floods the queue, and what fairness costs.

Part 1, the wait: tenant A floods 10,000 queued runs (`demo.sleep` 0.05 s each); 2 real
`flask scheduler worker --concurrency 8` processes work through them; once they have started,
tenant B's 10 runs arrive one every 0.1 s. B's wait is started_at - queued_at (both the
database's clock), p50/p95/max. Three rounds on fresh data: fair leasing with A's flood, B alone
(no flood), and the same-run baseline: the flood with the previous unfair lease (oldest first,
whatever the tenant: bench/unfair_lease.py, loaded into the workers as a job module).

Part 2, leasing throughput: one process leasing the flood (10,000 of A, 10 of B) in batches of
100 and of 8 through the project's `lease_once`, each batch then marked succeeded (so that
running counts stay as a worker pool keeps them); runs leased per second of lease statement
time, fair against unfair, interleaved rounds. Then the deep queue: 100,000 queued runs over
1,000 tenants and 10,000 of one tenant, a lease's statement time for 8 and 100 runs (fair: the
window of tenants, then the lease), and their EXPLAIN ANALYZE.

Verified: every run of B started, each once (attempt 1); each throughput round leased every run
once. Targets: B's p95 wait < 2 s under the flood; fair leasing's runs/s within 20 % of unfair.

    python -m bench.fairness [--flood 10000] [--quick]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from typing import IO, Any

import psycopg

from bench.common import (
    PROJECT_ROOT,
    WORKER,
    Server,
    check,
    finish,
    machine,
    make_app,
    median,
    percentile,
    postgres_server,
    print_table,
    worker_env,
    write_results,
)

SMALL = 10
TENANTS = """
INSERT INTO tenants (slug, name, time_zone, created_at)
SELECT %(prefix)s || t, %(prefix)s || t, 'UTC', now() FROM generate_series(0, %(n)s - 1) AS t
"""
FLOOD = """
INSERT INTO runs (tenant_id, job, args, "trigger", scheduled_for, idempotency_key, status,
                  attempt, max_attempts, fires_covered, queued_at, available_at)
SELECT %(tenant)s, %(job)s, %(args)s::jsonb, 'manual', now(), %(prefix)s || ':' || i, 'queued',
       0, 1, 1, now() - %(age)s * interval '1 second', now() - %(age)s * interval '1 second'
FROM generate_series(1, %(n)s) AS i
"""
ONE = """
INSERT INTO runs (tenant_id, job, args, "trigger", scheduled_for, idempotency_key, status,
                  attempt, max_attempts, fires_covered, queued_at, available_at)
VALUES (%(tenant)s, 'demo.sleep', '{"seconds": 0.05}', 'manual', now(), %(key)s, 'queued', 0, 1,
        1, now(), now())
"""
SLEEP_ARGS = '{"seconds": 0.05}'
LOGS: dict[int, IO[str]] = {}  # each worker's log file, by pid


def connect(server: Server, database: str) -> psycopg.Connection[Any]:
    return psycopg.connect(server.conninfo(database), autocommit=True)


def tenant_ids(connection: psycopg.Connection[Any]) -> list[int]:
    return [row[0] for row in connection.execute("SELECT id FROM tenants ORDER BY id")]


def start_workers(server: Server, database: str, unfair: bool) -> list[subprocess.Popen[str]]:
    modules = "bench.jobs,bench.unfair_lease" if unfair else "bench.jobs"
    env = worker_env(
        server.url(database),
        SCHEDULER_JOB_MODULES=modules,
        SCHEDULER_DEMO_JOBS="1",
        SCHEDULER_POLL_INTERVAL="0.2",
    )
    # Their logs go to files: a pipe nobody reads fills up (a log line per run start and end)
    # and blocks the worker.
    workers = []
    for _ in range(2):
        log = tempfile.TemporaryFile("w+")
        worker = subprocess.Popen(
            [*WORKER, "--concurrency", "8"],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
        LOGS[worker.pid] = log
        workers.append(worker)
    return workers


def stop(workers: list[subprocess.Popen[str]], problems: list[str]) -> None:
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(timeout=120)
        log = LOGS.pop(worker.pid)
        log.seek(0)
        check(
            worker.returncode == 0,
            f"worker exited {worker.returncode}: {log.read()[-500:]}",
            problems,
        )
        log.close()


def wait_round(
    server: Server, database: str, flood: int, unfair: bool, problems: list[str]
) -> dict[str, Any]:
    """One round of part 1 on fresh runs: B's waits in seconds."""
    with connect(server, database) as connection:
        connection.execute("DELETE FROM runs")
        a, b = tenant_ids(connection)[:2]
        if flood:
            parameters = {"tenant": a, "job": "demo.sleep", "args": SLEEP_ARGS, "n": flood}
            connection.execute(FLOOD, {**parameters, "prefix": "a", "age": 0})
        connection.execute("ANALYZE runs")
        workers = start_workers(server, database, unfair)
        try:
            deadline = time.monotonic() + 120
            ready = False
            while not ready and time.monotonic() < deadline:  # workers up; the flood is on
                time.sleep(0.1)
                ready = connection.execute(
                    "SELECT (SELECT count(*) FROM workers WHERE stopped_at IS NULL "
                    "        AND last_heartbeat_at > now() - interval '5 seconds') >= 2 "
                    "AND (SELECT count(*) FROM runs WHERE started_at IS NOT NULL) >= %s",
                    (16 if flood else 0,),
                ).fetchone()[0]  # type: ignore[index]
            for i in range(SMALL):
                connection.execute(ONE, {"tenant": b, "key": f"b:{i}"})
                time.sleep(0.1)
            # Unfair leasing starts B only once A's flood has drained: it is given a minute.
            deadline = time.monotonic() + (60 if unfair else 300)
            while time.monotonic() < deadline:
                waiting = connection.execute(
                    "SELECT count(*) FROM runs WHERE tenant_id = %s AND started_at IS NULL", (b,)
                ).fetchone()[0]  # type: ignore[index]
                if not waiting:
                    break
                time.sleep(0.1)
            rows = connection.execute(
                "SELECT extract(epoch FROM coalesce(started_at, clock_timestamp()) - queued_at), "
                "attempt, started_at IS NOT NULL FROM runs WHERE tenant_id = %s",
                (b,),
            ).fetchall()
            a_done = connection.execute(
                "SELECT count(*) FROM runs WHERE tenant_id = %s AND started_at IS NOT NULL", (a,)
            ).fetchone()[0]  # type: ignore[index]
        finally:
            stop(workers, problems)
    # A run not started yet counts as waiting until now: a lower bound of its wait.
    waits = [float(wait) for wait, _, _ in rows]
    mode = "unfair (previous)" if unfair else "fair"
    started = sum(1 for _, _, began in rows if began)
    if not unfair:
        check(started == SMALL, f"{mode}: {started} of B's {SMALL} runs started", problems)
    check(
        all(attempt == 1 for _, attempt, began in rows if began),
        f"{mode}: a run of B started twice",
        problems,
    )
    return {
        "part": "wait",
        "leasing": mode,
        "flood": flood,
        "b_wait_p50_s": median(waits),
        "b_wait_p95_s": percentile(waits, 0.95),
        "b_wait_max_s": max(waits),
        "a_started_meanwhile": a_done,
        "b_started": started,
    }


def throughput_round(app: Any, server: Server, database: str, batch: int, unfair: bool) -> float:
    """Part 2: the flood leased in batches by one process; runs/s of lease statement time."""
    from bench import unfair_lease
    from webapp.extensions import db
    from webapp.scheduler import runs
    from webapp.scheduler.leases import lease_once

    with connect(server, database) as connection:
        connection.execute(
            "UPDATE runs SET status = 'queued', attempt = 0, worker_id = NULL, "
            "started_at = NULL, finished_at = NULL, locked_until = NULL"
        )
        total = connection.execute("SELECT count(*) FROM runs").fetchone()[0]  # type: ignore[index]
        connection.execute("VACUUM ANALYZE runs")
    fair = runs.lease_runs
    runs.lease_runs = unfair_lease.lease_runs if unfair else fair  # type: ignore[assignment]
    leased, spent = 0, 0.0
    try:
        with app.app_context():
            worker = db.session.execute(
                db.text(
                    "INSERT INTO workers (hostname, pid, concurrency, started_at, "
                    "last_heartbeat_at, abandoned_jobs) VALUES ('bench', 0, 1, now(), now(), 0) "
                    "RETURNING id"
                )
            ).scalar_one()
            db.session.commit()
            while True:
                started = time.perf_counter()
                taken = lease_once(db.session(), worker, None, timedelta(seconds=60), batch)
                spent += time.perf_counter() - started
                if not taken:
                    break
                leased += len(taken)
                db.session.execute(
                    db.text(
                        "UPDATE runs SET status = 'succeeded', locked_until = NULL "
                        "WHERE id = ANY(:ids)"
                    ),
                    {"ids": [run.id for run in taken]},
                )
                db.session.commit()
    finally:
        runs.lease_runs = fair
    if leased != total:
        raise RuntimeError(f"leased {leased} of {total} runs")
    return leased / spent


def deep_queue(server: Server, database: str) -> list[dict[str, Any]]:
    """A whole lease (rolled back) at 100,000 queued over 1,000 tenants plus 10,000 of one
    tenant: the fair lease's two statements (its window of tenants, from a cursor that moves on
    as a worker's does, then the lease) against the unfair lease's one; prints EXPLAIN ANALYZE
    of the fair ones."""
    from sqlalchemy.dialects import postgresql

    from bench import unfair_lease
    from webapp.scheduler import lease_query, runs

    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]

    def sql(statement: Any) -> tuple[str, dict[str, Any]]:
        """The statement's text and its constants (statuses, ...) as psycopg takes them."""
        compiled = statement.compile(dialect=dialect)
        return str(compiled), dict(compiled.params)

    window_sql, window_constants = sql(lease_query.LEASE_WINDOW)
    fair_sql, fair_constants = sql(runs.LEASE_POSTGRESQL)
    unfair_sql, unfair_constants = sql(unfair_lease.UNFAIR_LEASE)
    rows = []
    with connect(server, database) as connection:
        connection.execute("DELETE FROM runs")
        connection.execute(TENANTS, {"n": 1000, "prefix": "deep-"})
        ids = tenant_ids(connection)
        connection.execute(
            """
            INSERT INTO runs (tenant_id, job, args, "trigger", scheduled_for, idempotency_key,
                              status, attempt, max_attempts, fires_covered, queued_at,
                              available_at)
            SELECT t.id, 'bench.noop', '{}'::jsonb, 'manual', now(), 'deep:' || t.id || ':' || i,
                   'queued', 0, 1, 1, now() - i * interval '1 second',
                   now() - i * interval '1 second'
            FROM (SELECT id FROM tenants ORDER BY id DESC LIMIT 1000) AS t,
                 generate_series(1, 100) AS i
            """
        )
        flood = {"tenant": ids[0], "job": "bench.noop", "args": "{}", "n": 10_000}
        connection.execute(FLOOD, {**flood, "prefix": "deep-a", "age": 3600})
        connection.execute("VACUUM ANALYZE runs")
        worker = connection.execute(
            "INSERT INTO workers (hostname, pid, concurrency, started_at, last_heartbeat_at, "
            "abandoned_jobs) VALUES ('bench', 0, 1, now(), now(), 0) RETURNING id"
        ).fetchone()[0]  # type: ignore[index]
        cursor: int | None = None

        def served(tenants: list[Any]) -> dict[str, list[int]]:
            """The window statement's rows as the lease statement's parameters."""
            return {
                "window": [tenant for tenant, open_, _ in tenants if open_],
                "locked": [tenant for tenant, _, locked in tenants if locked],
            }

        def fair_lease(parameters: dict[str, Any]) -> list[Any]:
            """The window, then the lease; the cursor moves on as a worker's does."""
            nonlocal cursor
            window = {**window_constants, **parameters, "after": cursor}
            tenants = connection.execute(window_sql, window).fetchall()  # type: ignore[arg-type]
            cursor = tenants[-1][0]
            lease = {**fair_constants, **parameters, **served(tenants)}
            return connection.execute(fair_sql, lease).fetchall()  # type: ignore[arg-type]

        def explain_fair_lease(parameters: dict[str, Any]) -> list[str]:
            window = {**window_constants, **parameters, "after": cursor}
            explain = "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "
            plan = connection.execute(explain + window_sql, window).fetchall()  # type: ignore[arg-type]
            tenants = connection.execute(window_sql, window).fetchall()  # type: ignore[arg-type]
            lease = {**fair_constants, **parameters, **served(tenants)}
            plan += [("",), *connection.execute(explain + fair_sql, lease).fetchall()]  # type: ignore[arg-type]
            return [line for (line,) in plan]

        for limit in (8, 100):
            parameters = {
                "limit": limit,
                "worker_id": worker,
                "lock_ttl": timedelta(seconds=60),
                "max_running": None,
            }
            times: dict[str, list[float]] = {"fair": [], "unfair": []}
            for _ in range(7):
                for name in ("fair", "unfair"):
                    with connection.transaction(force_rollback=True):
                        started = time.perf_counter()
                        if name == "fair":
                            leased = fair_lease(parameters)
                        else:
                            leased = connection.execute(
                                unfair_sql,  # type: ignore[arg-type]
                                {**unfair_constants, **parameters},
                            ).fetchall()
                        times[name].append(time.perf_counter() - started)
                    if len(leased) != limit:
                        raise RuntimeError(f"{name}: leased {len(leased)} of {limit}")
            rows.append(
                {
                    "part": "deep",
                    "limit": limit,
                    "fair_ms": median(times["fair"]) * 1000,
                    "unfair_ms": median(times["unfair"]) * 1000,
                }
            )
            if limit == 8:
                with connection.transaction(force_rollback=True):
                    plan = explain_fair_lease(parameters)
                print("\nEXPLAIN ANALYZE, fair lease of 8 runs (window, lease), deep queue:")
                print("\n".join(plan))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a flood of 2,000, one round")
    options = parser.parse_args(argv)
    flood = 2_000 if options.quick else options.flood
    rounds = 1 if options.quick else options.rounds
    problems: list[str] = []
    with postgres_server() as server:
        version = server.version()
        database = server.create_database()
        with connect(server, database) as connection:
            connection.execute(TENANTS, {"n": 2, "prefix": "fair-"})
        waits = [
            wait_round(server, database, flood, unfair=False, problems=problems),
            wait_round(server, database, 0, unfair=False, problems=problems),
            wait_round(server, database, flood, unfair=True, problems=problems),
        ]
        with connect(server, database) as connection:
            connection.execute("DELETE FROM runs")
            a, b = tenant_ids(connection)[:2]
            for tenant, n, prefix, age in ((a, flood, "a", 60), (b, SMALL, "b", 30)):
                parameters = {"tenant": tenant, "job": "bench.noop", "args": "{}", "n": n}
                connection.execute(FLOOD, {**parameters, "prefix": prefix, "age": age})
        app = make_app(server.url(database))
        speeds = []
        for batch in (100, 8):
            measured: dict[str, list[float]] = {"fair": [], "unfair": []}
            for _ in range(rounds):
                for name in ("fair", "unfair"):
                    measured[name].append(
                        throughput_round(app, server, database, batch, name == "unfair")
                    )
            fair, unfair = median(measured["fair"]), median(measured["unfair"])
            speeds.append(
                {
                    "part": "throughput",
                    "batch": batch,
                    "runs": flood + SMALL,
                    "fair_runs_per_s": fair,
                    "unfair_runs_per_s": unfair,
                    "ratio": fair / unfair,
                }
            )
        deep = deep_queue(server, database)
    info = machine(version)
    write_results("fairness", [*waits, *speeds, *deep], info)
    print_table(
        f"B's wait (queued -> started), {SMALL} runs arriving while A's {flood:,} queued runs "
        f"are worked through by 2 workers x 8 ({info['nproc']} CPUs, PostgreSQL {version})",
        waits,
        (
            "leasing",
            "flood",
            "b_started",
            "b_wait_p50_s",
            "b_wait_p95_s",
            "b_wait_max_s",
            "a_started_meanwhile",
        ),
    )
    print_table(
        "Leasing throughput, one process, runs leased per second of lease statement time",
        speeds,
        ("batch", "runs", "fair_runs_per_s", "unfair_runs_per_s", "ratio"),
    )
    print_table(
        "Deep queue (100,000 over 1,000 tenants + 10,000 of one): one lease's statements, "
        "median ms",
        deep,
        ("limit", "fair_ms", "unfair_ms"),
    )
    fair_wait = waits[0]["b_wait_p95_s"]
    targets = [
        (f"B's p95 wait under the flood {fair_wait:.2f} s < 2 s", fair_wait < 2.0),
        *(
            (
                f"fair leasing, batches of {row['batch']}: {row['ratio']:.2f}x unfair >= 0.8x",
                row["ratio"] >= 0.8,
            )
            for row in speeds
        ),
    ]
    return finish("fairness", problems, targets)


if __name__ == "__main__":
    sys.exit(main())
