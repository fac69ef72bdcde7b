"""Idle tick: the cost of one tick when nothing is due, at 1,000,000 and at 10,000 schedules,
half of them following a business calendar.

The project's real tick (database clock, claim, commit) is timed many times on each database,
in interleaved blocks, and compared with a raw psycopg floor (one transaction with the same
index probe) measured in the same run. The claim's query plan is printed.

    python -m bench.idle_tick [--large 1000000] [--small 10000] [--ticks 1000] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import psycopg

from bench.common import (
    Server,
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

# Half the schedules follow a business calendar (issue 34): with calendars present the idle
# tick must stay flat (its claim reads a calendar's version only for the schedules it claims).
CALENDAR = """
INSERT INTO calendars (tenant_id, key, name, country, closed_weekdays, created_at, updated_at)
VALUES (%(tenant)s, 'us-business', 'US business days', 'US', 'sat,sun', now(), now())
RETURNING id
"""
CALENDAR_ENTRIES = """
INSERT INTO calendar_entries (calendar_id, kind, source, label, first_day, last_day, created_at)
SELECT %(calendar)s, 'day_off', 'manual', 'Closed ' || d, d, d, now()
FROM generate_series(date '2027-01-04', date '2027-01-08', interval '1 day') AS d
"""
SEED = """
INSERT INTO schedules (tenant_id, scope, key, name, job, args, cron, time_zone, active,
                       misfire_policy, overlap_policy, calendar_id, calendar_policy, next_run_at,
                       created_at, updated_at)
SELECT %(tenant)s, 'tenant', 's' || i, 'Schedule ' || i, 'bench.noop', '{}'::jsonb, '0 * * * *',
       'UTC', i %% 10 <> 0, 'fire_once', 'allow',
       CASE WHEN i %% 2 = 0 THEN %(calendar)s END,
       (ARRAY['skip', 'next_business_day', 'previous_business_day'])[i %% 3 + 1],
       -- active ones are due from tomorrow on; the paused tenth are long overdue (the partial
       -- index must keep them out of the probe)
       CASE WHEN i %% 10 <> 0 THEN now() + interval '1 day' + (i %% 86400) * interval '1 second'
            ELSE now() - interval '30 days' END,
       now(), now()
FROM generate_series(1, %(n)s) AS i
"""

# now() (the transaction's start) rather than clock_timestamp(): a volatile function cannot
# bound an index scan.
RAW_PROBE = (
    "SELECT id FROM schedules WHERE active AND next_run_at <= now() "
    "ORDER BY next_run_at LIMIT 300 FOR UPDATE SKIP LOCKED"
)


def seed(server: Server, n: int) -> str:
    database = server.create_database()
    with psycopg.connect(server.conninfo(database), autocommit=True) as connection:
        row = connection.execute(
            "INSERT INTO tenants (slug, name, time_zone, created_at) "
            "VALUES ('bench', 'Bench', 'UTC', now()) RETURNING id"
        ).fetchone()
        assert row is not None
        calendar = connection.execute(CALENDAR, {"tenant": row[0]}).fetchone()  # type: ignore[arg-type]
        assert calendar is not None
        connection.execute(CALENDAR_ENTRIES, {"calendar": calendar[0]})  # type: ignore[arg-type]
        values = {"tenant": row[0], "n": n, "calendar": calendar[0]}
        connection.execute(SEED, values)  # type: ignore[arg-type]
        connection.execute("VACUUM ANALYZE schedules, calendars, calendar_entries")
    return database


class Ticker:
    """One app and session per database; `block(k)` times k ticks of the real tick."""

    def __init__(self, server: Server, database: str) -> None:
        from webapp import config
        from webapp.catalog.current import current_catalog
        from webapp.extensions import db
        from webapp.scheduler.tick import TickSettings

        self.app = make_app(server.url(database))
        with self.app.app_context():
            self.catalog = current_catalog()
        self.settings = TickSettings.of(config.settings(self.app))
        self.db = db
        self.times: list[float] = []
        self.raw_times: list[float] = []
        self.raw = psycopg.connect(server.conninfo(database))
        self.claimed = 0

    def block(self, ticks: int) -> None:
        from webapp.scheduler.tick import tick

        with self.app.app_context():
            session = self.db.session()
            for _ in range(ticks):
                start = time.perf_counter()
                result = tick(session, self.catalog, self.settings)
                self.times.append(time.perf_counter() - start)
                self.claimed += result.claimed
        for _ in range(ticks):
            start = time.perf_counter()
            with self.raw.transaction():
                self.raw.execute(RAW_PROBE).fetchall()
            self.raw_times.append(time.perf_counter() - start)

    def plan(self) -> str:
        from sqlalchemy.dialects import postgresql

        from webapp.database import database_now
        from webapp.scheduler import claims

        with self.app.app_context():
            session = self.db.session()
            now = database_now(session)
            query = claims.due_schedules_query(now, now, self.settings.batch_size).with_for_update(
                of=claims.Schedule, skip_locked=True
            )
            compiled = query.compile(dialect=postgresql.psycopg.dialect())
            rows = (
                session.connection()
                .exec_driver_sql(
                    "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + str(compiled), compiled.params
                )
                .all()
            )
            session.rollback()
        return "\n".join(row[0] for row in rows)

    def close(self) -> None:
        self.raw.close()
        with self.app.app_context():
            self.db.engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--ticks", type=int, default=1000, help="ticks timed per size")
    parser.add_argument("--quick", action="store_true", help="100,000 vs 10,000, 200 ticks")
    options = parser.parse_args(argv)
    if options.quick:
        options.large, options.ticks = 100_000, 200
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    with postgres_server() as server:
        version = server.version()
        started = time.monotonic()
        sizes = (options.large, options.small)
        tickers = {n: Ticker(server, seed(server, n)) for n in sizes}
        print(
            f"seeded {options.large:,} and {options.small:,} schedules "
            f"in {time.monotonic() - started:.0f} s"
        )
        for ticker in tickers.values():
            ticker.block(50)  # warm caches and connections
            ticker.times.clear()
            ticker.raw_times.clear()
        blocks = 10
        for _ in range(blocks):
            for ticker in tickers.values():
                ticker.block(max(1, options.ticks // blocks))
        print(
            f"\nplan of the claim at {options.large:,} schedules:\n{tickers[options.large].plan()}"
        )
        for n, ticker in tickers.items():
            check(ticker.claimed == 0, f"{ticker.claimed} schedules fired at {n:,}", problems)
            rows.append(
                {
                    "schedules": n,
                    "with_calendar": n // 2,
                    "tick_median_ms": median(ticker.times) * 1000,
                    "tick_p95_ms": percentile(ticker.times, 0.95) * 1000,
                    "raw_floor_median_ms": median(ticker.raw_times) * 1000,
                    "ticks": len(ticker.times),
                }
            )
            ticker.close()
    large, small = rows
    large["ratio_to_small"] = large["tick_median_ms"] / small["tick_median_ms"]
    large["ratio_to_raw"] = large["tick_median_ms"] / large["raw_floor_median_ms"]
    small["ratio_to_raw"] = small["tick_median_ms"] / small["raw_floor_median_ms"]
    info = machine(version)
    write_results("idle_tick", rows, info)
    print_table(
        f"Idle tick ({info['nproc']} CPUs, PostgreSQL {version})",
        rows,
        (
            "schedules",
            "tick_median_ms",
            "tick_p95_ms",
            "raw_floor_median_ms",
            "ratio_to_raw",
            "ratio_to_small",
        ),
    )
    targets = [
        (
            f"idle tick {large['tick_median_ms']:.3f} ms <= 1 ms at {options.large:,}",
            large["tick_median_ms"] <= 1.0,
        ),
        (
            f"idle tick within 1.5x of {options.small:,}: {large['ratio_to_small']:.2f}x",
            large["ratio_to_small"] <= 1.5,
        ),
    ]
    return finish("idle_tick", problems, targets)


if __name__ == "__main__":
    sys.exit(main())
