"""Panel latency: a tenant with 1,000,000 runs and 10,000 schedules, through the real app.

Requests go through Flask's test client (the whole app: login, tenancy, SQLAlchemy, Jinja;
no HTTP socket), logged in as an admin. Each page is timed N times after a warm-up; p50/p95
are printed beside the same-run figure of a bare route (registered on this app only: no
login, no query, no template) and the number of SQL statements per request, compared with the
same page of a tenant holding 200 runs: the count must not grow with the data.

    python -m bench.panel [--runs 1000000] [--schedules 10000] [--requests 100] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import psycopg
from flask import Flask
from sqlalchemy import event

from bench.common import (
    Server,
    check,
    finish,
    log_in,
    machine,
    make_app,
    median,
    percentile,
    postgres_server,
    print_table,
    write_results,
)

SEED_SCHEDULES = """
INSERT INTO schedules (tenant_id, scope, key, name, job, args, cron, time_zone, active,
                       misfire_policy, overlap_policy, next_run_at, created_at, updated_at)
SELECT %(tenant)s, 'tenant', 's' || i, 'Schedule ' || lpad(i::text, 6, '0'), 'bench.noop',
       '{}'::jsonb, (i %% 60) || ' * * * *', 'Europe/Berlin', i %% 17 <> 0, 'fire_once', 'allow',
       now() + interval '1 hour' + (i %% 3600) * interval '1 second', now(), now()
FROM generate_series(1, %(n)s) AS i
"""

# Runs spread over the schedules, newest last; 5 % failed, 2 % skipped, 1 % manual.
SEED_RUNS = """
INSERT INTO runs (tenant_id, schedule_id, job, args, "trigger", scheduled_for, idempotency_key,
                  status, attempt, max_attempts, fires_covered, queued_at, available_at,
                  started_at, finished_at, output, error)
SELECT %(tenant)s, s.first + (i %% %(schedules)s), 'bench.noop', '{}'::jsonb,
       CASE WHEN i %% 100 = 0 THEN 'manual' ELSE 'schedule' END,
       at, %(prefix)s || i,
       CASE WHEN i %% 20 = 0 THEN 'failed' WHEN i %% 50 = 1 THEN 'skipped' ELSE 'succeeded' END,
       1, 1, 1, at, at, at + interval '1 second', at + interval '2 seconds',
       'line one of the output' || chr(10) || 'line two',
       CASE WHEN i %% 20 = 0 THEN 'RuntimeError: failed on purpose' END
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT now() - interval '1 hour' - (%(n)s - i) * interval '10 seconds' AS at) AS t,
     (SELECT min(id) AS first FROM schedules WHERE tenant_id = %(tenant)s) AS s
"""


def seed(server: Server, runs: int, schedules: int) -> tuple[str, dict[str, Any]]:
    database = server.create_database()
    with psycopg.connect(server.conninfo(database), autocommit=True) as connection:

        def one(sql: str, params: dict[str, Any] | None = None) -> Any:
            row = connection.execute(sql, params).fetchone()  # type: ignore[arg-type]
            assert row is not None
            return row[0]

        big = one(
            "INSERT INTO tenants (slug, name, time_zone, created_at) "
            "VALUES ('big', 'Big Corp', 'Europe/Berlin', now()) RETURNING id"
        )
        small = one(
            "INSERT INTO tenants (slug, name, time_zone, created_at) "
            "VALUES ('small', 'Small Ltd', 'Europe/Berlin', now()) RETURNING id"
        )
        user = one(
            "INSERT INTO users (email, password_hash, is_operator, created_at) "
            "VALUES ('admin@bench.example', 'x', false, now()) RETURNING id"
        )
        for tenant in (big, small):
            connection.execute(
                "INSERT INTO memberships (user_id, tenant_id, role) VALUES (%s, %s, 'admin')",
                (user, tenant),
            )
        connection.execute(SEED_SCHEDULES, {"tenant": big, "n": schedules})  # type: ignore[arg-type]
        connection.execute(SEED_SCHEDULES, {"tenant": small, "n": 50})  # type: ignore[arg-type]
        connection.execute(
            SEED_RUNS,
            {
                "tenant": big,
                "n": runs,
                "schedules": schedules,  # type: ignore[arg-type]
                "prefix": "big:",
            },
        )
        connection.execute(
            SEED_RUNS,
            {
                "tenant": small,
                "n": 200,
                "schedules": 50,  # type: ignore[arg-type]
                "prefix": "small:",
            },
        )
        connection.execute("VACUUM ANALYZE")
        ids: dict[str, Any] = {"user": user, "big": big, "small": small}
        for name, tenant in (("big", big), ("small", small)):
            ids[name + "_min_run"] = one("SELECT min(id) FROM runs WHERE tenant_id = %s", (tenant,))  # type: ignore[arg-type]
            ids[name + "_max_run"] = one("SELECT max(id) FROM runs WHERE tenant_id = %s", (tenant,))  # type: ignore[arg-type]
            ids[name + "_schedule"] = one(
                "SELECT min(id) + 7 FROM schedules WHERE tenant_id = %s", (tenant,)
            )  # type: ignore[arg-type]
            ids[name + "_failed_run"] = one(
                "SELECT max(id) FROM runs WHERE tenant_id = %s AND status = 'failed'", (tenant,)
            )  # type: ignore[arg-type]
    return database, ids


def pages(ids: dict[str, Any], tenant: str) -> list[tuple[str, str, bool]]:
    """(label, URL, htmx) of the pages measured, for `tenant` ('big' or 'small')."""
    low = ids[f"{tenant}_min_run"]
    span = ids[f"{tenant}_max_run"] - low
    deep = low + max(60, span // 1000)  # a page near the oldest runs
    schedule = ids[f"{tenant}_schedule"]
    return [
        ("schedules list", "/", False),
        ("history, first page", "/runs", False),
        ("history, deep page", f"/runs?before={deep}", False),
        ("history, filtered: failed", "/runs?status=failed", False),
        (
            "history, filtered: failed, deep",
            f"/runs?status=failed&before={low + span // 20}",
            False,
        ),
        ("history, filtered: one schedule", f"/runs?schedule={schedule}", False),
        (
            "history, filtered: schedule, deep",
            f"/runs?schedule={schedule}&before={deep + 2000}",
            False,
        ),
        ("run detail", f"/runs/{ids[f'{tenant}_failed_run']}", False),
        ("schedule detail", f"/schedules/{schedule}", False),
        (
            "cron preview fragment",
            "/schedules/form/preview?cron=*/15+9-17+*+*+1-5&time_zone=Europe/Berlin",
            True,
        ),
    ]


TARGETS = {
    "schedules list",
    "history, first page",
    "history, deep page",
    "history, filtered: failed",
    "history, filtered: failed, deep",
    "history, filtered: one schedule",
    "history, filtered: schedule, deep",
    "run detail",
}


class Client:
    """A logged-in test client that counts the SQL statements of each request."""

    def __init__(self, app: Flask, user: int, tenant: int) -> None:
        from webapp.extensions import db

        self.client = app.test_client()
        log_in(app, self.client, user, tenant_id=tenant)
        self.statements = 0
        with app.app_context():
            event.listen(db.engine, "before_cursor_execute", self.count)

    def count(self, *_args: Any) -> None:
        self.statements += 1

    def get(self, url: str, htmx: bool) -> tuple[int, int, float, int]:
        """(status, body bytes, seconds, statements)."""
        headers = {"HX-Request": "true"} if htmx else {}
        before = self.statements
        start = time.perf_counter()
        response = self.client.get(url, headers=headers)
        body = response.get_data()
        elapsed = time.perf_counter() - start
        return response.status_code, len(body), elapsed, self.statements - before


def measure(client: Client, url: str, htmx: bool, requests: int) -> dict[str, Any]:
    for _ in range(5):
        client.get(url, htmx)
    times, statements, statuses, sizes = [], set(), set(), set()
    for _ in range(requests):
        status, size, elapsed, count = client.get(url, htmx)
        times.append(elapsed)
        statements.add(count)
        statuses.add(status)
        sizes.add(size)
    return {
        "p50_ms": median(times) * 1000,
        "p95_ms": percentile(times, 0.95) * 1000,
        "statements": max(statements),
        "statuses": sorted(statuses),
        "bytes": max(sizes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="100,000 runs, 30 requests")
    options = parser.parse_args(argv)
    if options.quick:
        options.runs, options.requests = 100_000, 30
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    with postgres_server() as server:
        version = server.version()
        started = time.monotonic()
        database, ids = seed(server, options.runs, options.schedules)
        print(
            f"seeded {options.runs:,} runs and {options.schedules:,} schedules "
            f"in {time.monotonic() - started:.0f} s"
        )
        app = make_app(server.url(database), WTF_CSRF_ENABLED=False)
        app.add_url_rule("/_bench/bare", "bench_bare", lambda: "ok")
        big = Client(app, ids["user"], ids["big"])
        small = Client(app, ids["user"], ids["small"])
        bare = measure(big, "/_bench/bare", False, options.requests)
        small_pages = {label: (url, htmx) for label, url, htmx in pages(ids, "small")}
        for label, url, htmx in pages(ids, "big"):
            figures = measure(big, url, htmx, options.requests)
            small_url, small_htmx = small_pages[label]
            small_figures = measure(small, small_url, small_htmx, max(5, options.requests // 5))
            check(
                figures["statuses"] == [200], f"{label}: answered {figures['statuses']}", problems
            )
            check(
                small_figures["statuses"] == [200],
                f"{label} (small tenant): answered {small_figures['statuses']}",
                problems,
            )
            rows.append(
                {
                    "page": label,
                    "url": url,
                    "p50_ms": figures["p50_ms"],
                    "p95_ms": figures["p95_ms"],
                    "bare_p50_ms": bare["p50_ms"],
                    "ratio_p50_to_bare": figures["p50_ms"] / bare["p50_ms"],
                    "statements": figures["statements"],
                    "statements_small_tenant": small_figures["statements"],
                    "kb": figures["bytes"] / 1024,
                    "target": label in TARGETS,
                }
            )
        with app.app_context():
            from webapp.extensions import db

            db.engine.dispose()
    info = machine(version)
    write_results("panel", rows, info)
    print_table(
        f"Panel latency: {options.runs:,} runs, {options.schedules:,} schedules "
        f"(test client; bare route p50 {bare['p50_ms']:.2f} ms; {info['nproc']} CPUs, "
        f"PostgreSQL {version})",
        rows,
        (
            "page",
            "p50_ms",
            "p95_ms",
            "ratio_p50_to_bare",
            "statements",
            "statements_small_tenant",
            "kb",
        ),
    )
    targets = []
    for row in rows:
        if row["target"]:
            targets.append(
                (f"panel {row['page']}: p95 {row['p95_ms']:.1f} ms <= 20 ms", row["p95_ms"] <= 20)
            )
        targets.append(
            (
                f"panel {row['page']}: {row['statements']} statements, "
                f"{row['statements_small_tenant']} for a small tenant",
                row["statements"] == row["statements_small_tenant"],
            )
        )
    return finish("panel", problems, targets)


if __name__ == "__main__":
    sys.exit(main())
