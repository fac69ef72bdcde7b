"""Retention: `maintenance.prune_runs`'s folding and deletion of 1,000,000 runs on PostgreSQL.

One tenant, 300 schedules, 1,000,000 finished runs over the last 100 days (5 % failed, 2 %
skipped), plus 10,000 runs of deleted schedules. The project's `retention.prune` (not a copy)
runs with a retention of 10 days: about 90 % of the runs are folded into daily roll-ups and
deleted. Printed: total time, runs per second, batches, and the time each batch's transaction
(the DELETE ... RETURNING, the roll-ups, the commit: all the row locks it takes) was open: the
longest, p50 and p95.

Beside it, a writer in another process does what the tick does to the same tables, in a loop:
one transaction that advances a schedule (UPDATE schedules) and records a run (INSERT runs).
Its latency is measured for a few seconds without the prune (the baseline), then during the
prune; the maximum and p99 are printed with their ratio to the baseline's.

Verified: the runs left are exactly those not expired (and the writer's), and the roll-ups'
counts add up to the runs deleted.

    python -m bench.prune [--runs 1000000] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Event
from typing import Any

import psycopg

from bench.common import (
    check,
    finish,
    machine,
    make_app,
    median,
    percentile,
    postgres_server,
    print_table,
    write_results,
)

SCHEDULES = 300
DAYS = 100
RETENTION_DAYS = 10
ORPHANS = 10_000

SEED_SCHEDULES = """
INSERT INTO schedules (tenant_id, scope, key, name, job, args, cron, time_zone, active,
                       misfire_policy, overlap_policy, next_run_at, created_at, updated_at)
SELECT %(tenant)s, 'tenant', 's' || i, 'Schedule ' || i, 'bench.noop', '{}'::jsonb,
       '* * * * *', 'UTC', true, 'fire_once', 'allow', %(now)s + interval '1 hour', now(), now()
FROM generate_series(1, %(n)s) AS i
"""

# Run i fires at now - 100 days * i / n: spread evenly, each schedule's in order. Lag 0-6 s,
# duration 0-12 s; 5 % failed, 2 % skipped (never started).
SEED_RUNS = """
INSERT INTO runs (tenant_id, schedule_id, job, args, "trigger", scheduled_for, idempotency_key,
                  status, attempt, max_attempts, fires_covered, queued_at, available_at,
                  started_at, finished_at)
SELECT %(tenant)s, CASE WHEN %(orphans)s THEN NULL ELSE s.first + (i %% %(schedules)s) END,
       'bench.noop', '{}'::jsonb, 'schedule', at, %(prefix)s || i, status, 1, 1, 1, at, at,
       CASE WHEN status <> 'skipped' THEN at + (i %% 7) * interval '1 second' END,
       CASE WHEN status <> 'skipped' THEN at + (i %% 7 + i %% 13) * interval '1 second'
            ELSE at END
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT %(now)s - %(days)s * interval '1 day' * i / %(n)s AS at) AS t,
     LATERAL (SELECT CASE WHEN i %% 20 = 0 THEN 'failed' WHEN i %% 50 = 1 THEN 'skipped'
                          ELSE 'succeeded' END AS status) AS st,
     (SELECT min(id) AS first FROM schedules WHERE tenant_id = %(tenant)s) AS s
"""

WRITE = """
WITH advanced AS (
    UPDATE schedules SET next_run_at = next_run_at + interval '1 minute', updated_at = now()
    WHERE id = %(schedule)s RETURNING id, tenant_id
)
INSERT INTO runs (tenant_id, schedule_id, job, args, "trigger", scheduled_for, idempotency_key,
                  status, attempt, max_attempts, fires_covered, queued_at, available_at)
SELECT tenant_id, id, 'bench.noop', '{}'::jsonb, 'manual', now(), %(key)s, 'queued', 0, 1, 1,
       now(), now()
FROM advanced
"""


def write_loop(
    conninfo: str, first_schedule: int, label: str, stop: Event, out: Any
) -> None:  # pragma: no cover - runs in a child process
    """The tick-like writer: one transaction per iteration; sends its latencies (seconds)."""
    latencies = []
    with psycopg.connect(conninfo) as connection:
        n = 0
        while not stop.is_set():
            n += 1
            started = time.perf_counter()
            connection.execute(
                WRITE,
                {"schedule": first_schedule + n % SCHEDULES, "key": f"writer-{label}-{n}"},
            )
            connection.commit()
            latencies.append(time.perf_counter() - started)
            time.sleep(0.002)
    out.put(latencies)


class Writer:
    def __init__(self, conninfo: str, first_schedule: int, label: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.stop = context.Event()
        self.out = context.Queue()
        self.process = context.Process(
            target=write_loop, args=(conninfo, first_schedule, label, self.stop, self.out)
        )
        self.process.start()

    def finish(self) -> list[float]:
        self.stop.set()
        latencies: list[float] = self.out.get(timeout=60)
        self.process.join(timeout=60)
        return latencies


def seed(conninfo: str, runs: int, now: datetime) -> tuple[int, int]:
    """The tenant and its schedules and runs; returns (tenant id, first schedule id)."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        row = connection.execute(
            "INSERT INTO tenants (slug, name, time_zone, notify_emails, created_at) "
            "VALUES ('bench', 'Bench', 'UTC', '[]', now()) RETURNING id"
        ).fetchone()
        assert row is not None
        tenant = int(row[0])
        connection.execute(SEED_SCHEDULES, {"tenant": tenant, "n": SCHEDULES, "now": now})
        common = {"tenant": tenant, "schedules": SCHEDULES, "now": now, "days": DAYS}
        connection.execute(SEED_RUNS, {**common, "n": runs, "orphans": False, "prefix": "r"})
        connection.execute(SEED_RUNS, {**common, "n": ORPHANS, "orphans": True, "prefix": "o"})
        connection.execute("VACUUM ANALYZE")
        row = connection.execute("SELECT min(id) FROM schedules").fetchone()
        assert row is not None
        return tenant, int(row[0])


def count(conninfo: str, sql: str, params: dict[str, Any] | None = None) -> int:
    with psycopg.connect(conninfo, autocommit=True) as connection:
        row = connection.execute(sql, params or {}).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return int(row[0] or 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--baseline-seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="100,000 runs")
    options = parser.parse_args(argv)
    runs = 100_000 if options.quick else options.runs

    from webapp.catalog.retention import midnight_before, prune
    from webapp.extensions import db

    problems: list[str] = []
    with postgres_server() as server:
        name = server.create_database()
        conninfo, url = server.conninfo(name), server.url(name)
        now = datetime.now(UTC)
        started = time.monotonic()
        _, first_schedule = seed(conninfo, runs, now)
        seed_seconds = time.monotonic() - started
        cutoff = midnight_before(now - timedelta(days=RETENTION_DAYS))
        expired = count(
            conninfo, "SELECT count(*) FROM runs WHERE scheduled_for < %(c)s", {"c": cutoff}
        )
        kept = count(conninfo, "SELECT count(*) FROM runs") - expired
        print(f"seeded {runs + ORPHANS:,} runs in {seed_seconds:.0f} s; {expired:,} expired")

        writer = Writer(conninfo, first_schedule, "baseline")
        time.sleep(options.baseline_seconds)
        baseline = writer.finish()

        app = make_app(url)
        with app.app_context():
            writer = Writer(conninfo, first_schedule, "during")
            time.sleep(0.5)
            started = time.monotonic()
            report = prune(db.session(), now, RETENTION_DAYS, 730)
            prune_seconds = time.monotonic() - started
            during = writer.finish()
            db.session.remove()
            db.engine.dispose()

        writes = len(baseline) + len(during)
        left = count(conninfo, "SELECT count(*) FROM runs")
        rolled_up = count(conninfo, "SELECT sum(runs) FROM run_rollups")
        check(
            report.runs_deleted == expired,
            f"deleted {report.runs_deleted:,}, expected {expired:,}",
            problems,
        )
        check(left == kept + writes, f"{left:,} runs left, expected {kept + writes:,}", problems)
        check(
            rolled_up == expired,
            f"roll-ups count {rolled_up:,} runs, expected {expired:,}",
            problems,
        )
        batches = [seconds * 1000 for seconds in report.batch_seconds]
        row = {
            "runs": runs + ORPHANS,
            "deleted": report.runs_deleted,
            "rollups": report.rollups_created,
            "seconds": prune_seconds,
            "runs_per_s": report.runs_deleted / prune_seconds,
            "batches": len(batches),
            "batch_max_ms": max(batches),
            "batch_p50_ms": median(batches),
            "batch_p95_ms": percentile(batches, 0.95),
            "writer_baseline_p50_ms": median(baseline) * 1000,
            "writer_baseline_p99_ms": percentile(baseline, 0.99) * 1000,
            "writer_baseline_max_ms": max(baseline) * 1000,
            "writer_p50_ms": median(during) * 1000,
            "writer_p99_ms": percentile(during, 0.99) * 1000,
            "writer_max_ms": max(during) * 1000,
        }
        row["writer_max_ratio"] = row["writer_max_ms"] / row["writer_baseline_max_ms"]
        row["writer_p99_ratio"] = row["writer_p99_ms"] / row["writer_baseline_p99_ms"]
        version = server.version()

    print_table(
        f"Prune: {row['runs']:,} runs, retention {RETENTION_DAYS} days of {DAYS}",
        [row],
        [
            "deleted",
            "rollups",
            "seconds",
            "runs_per_s",
            "batches",
            "batch_max_ms",
            "batch_p50_ms",
            "batch_p95_ms",
        ],
    )
    print_table(
        f"Tick-like writer (UPDATE schedules + INSERT runs per transaction): {len(baseline):,} "
        f"writes alone, {len(during):,} during the prune",
        [
            {
                "": "alone (baseline)",
                "p50_ms": row["writer_baseline_p50_ms"],
                "p99_ms": row["writer_baseline_p99_ms"],
                "max_ms": row["writer_baseline_max_ms"],
            },
            {
                "": "during the prune",
                "p50_ms": row["writer_p50_ms"],
                "p99_ms": row["writer_p99_ms"],
                "max_ms": row["writer_max_ms"],
            },
            {
                "": "ratio",
                "p50_ms": row["writer_p50_ms"] / row["writer_baseline_p50_ms"],
                "p99_ms": row["writer_p99_ratio"],
                "max_ms": row["writer_max_ratio"],
            },
        ],
        ["", "p50_ms", "p99_ms", "max_ms"],
    )
    write_results("prune", [row], machine(version))
    targets = [
        ("longest batch transaction <= 1 s", row["batch_max_ms"] <= 1000),
        ("writer's max latency during the prune <= 1 s", row["writer_max_ms"] <= 1000),
    ]
    return finish("prune", problems, targets)


if __name__ == "__main__":
    sys.exit(main())
