"""One firing process for bench.fire: the project's real tick, or the raw-SQL ceiling.

Started by bench.fire; prints "ready", waits for a line on stdin, fires until nothing is due,
prints one JSON line: what it fired, when it started and ended (wall clock), commits it made.

The project mode calls webapp.scheduler.tick.tick (the function the worker loop calls) with
`now` pinned to the benchmark's instant, so that the expected result is exact, and logs as a
worker does (INFO lines to stderr, a file here); the only thing this skips is reading the
database's clock, in the claim statement itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from datetime import datetime
from typing import Any, LiteralString

# PostgreSQL: claim, insert and advance a batch in one statement (the machine's ceiling).
RAW_POSTGRESQL = """
WITH due AS (
    SELECT id, tenant_id, job, args, next_run_at FROM schedules
    WHERE active AND next_run_at <= %(now)s
    ORDER BY next_run_at LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), fired AS (
    INSERT INTO runs (tenant_id, schedule_id, job, args, "trigger", scheduled_for,
                      idempotency_key, status, attempt, max_attempts, fires_covered,
                      queued_at, available_at)
    SELECT tenant_id, id, job, args, 'schedule', next_run_at,
           'schedule:' || id || ':' || to_char(next_run_at AT TIME ZONE 'UTC',
                                               'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
           'queued', 0, 1, 1, %(now)s, %(now)s
    FROM due
    ON CONFLICT DO NOTHING
)
UPDATE schedules AS s
SET next_run_at = due.next_run_at + interval '1 minute', last_run_at = due.next_run_at
FROM due WHERE s.id = due.id
"""

# PostgreSQL, the minimal schema (bench.fire creates it: schema `minimal`): the same statement
# on tables with only what it needs, runs with only the primary key and the unique
# (schedule_id, scheduled_for) index. Against RAW_POSTGRESQL it shows what the columns, indexes
# and constraints of our own schema cost.
RAW_MINIMAL = """
WITH due AS (
    SELECT id, tenant_id, job, args, next_run_at FROM minimal.schedules
    WHERE active AND next_run_at <= %(now)s
    ORDER BY next_run_at LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), fired AS (
    INSERT INTO minimal.runs (tenant_id, schedule_id, job, args, scheduled_for)
    SELECT tenant_id, id, job, args, next_run_at FROM due
    ON CONFLICT DO NOTHING
)
UPDATE minimal.schedules AS s SET next_run_at = due.next_run_at + interval '1 minute'
FROM due WHERE s.id = due.id
"""

# SQLite: the same in one transaction of two statements (SQLite has no data-modifying CTEs).
RAW_SQLITE_INSERT = """
INSERT INTO runs (tenant_id, schedule_id, job, args, "trigger", scheduled_for, idempotency_key,
                  status, attempt, max_attempts, fires_covered, queued_at, available_at)
SELECT tenant_id, id, job, args, 'schedule', next_run_at, 'schedule:' || id || ':' || next_run_at,
       'queued', 0, 1, 1, :now, :now
FROM schedules WHERE active AND next_run_at <= :now ORDER BY next_run_at, id LIMIT :batch
ON CONFLICT DO NOTHING
"""
RAW_SQLITE_ADVANCE = """
UPDATE schedules
SET last_run_at = next_run_at,
    next_run_at = strftime('%Y-%m-%d %H:%M:%f000', next_run_at, '+1 minute')
WHERE id IN (SELECT id FROM schedules WHERE active AND next_run_at <= :now
             ORDER BY next_run_at, id LIMIT :batch)
"""


def wait_for_go() -> None:
    print("ready", flush=True)
    sys.stdin.readline()


def project(url: str, now: datetime, batch_size: int) -> dict[str, Any]:
    from sqlalchemy import event, text

    from bench.common import make_app
    from webapp import config
    from webapp.catalog.current import current_catalog
    from webapp.extensions import db
    from webapp.scheduler.logs import configure_worker_logging
    from webapp.scheduler.tick import TickResult, TickSettings, tick
    from webapp.scheduler.worker import freeze_start_up

    app = make_app(url, SCHEDULER_BATCH_SIZE=batch_size)
    with app.app_context():
        configure_worker_logging()  # the worker's own: its lines at INFO to stderr
        commits = [0]
        event.listen(db.engine, "commit", lambda _conn: commits.__setitem__(0, commits[0] + 1))
        session = db.session()
        catalog = current_catalog()
        settings = TickSettings.of(config.settings(app))
        postgresql = db.engine.dialect.name == "postgresql"
        backend = session.execute(text("SELECT pg_backend_pid()")).scalar() if postgresql else None
        session.commit()
        commits[0] = 0
        freeze_start_up()  # as a worker's start-up ends
        wait_for_go()
        start = time.time()
        cpu_start, backend_start = time.process_time(), backend_cpu_seconds(backend)
        total = TickResult()
        ticks = 0
        while True:
            result = tick(session, catalog, settings, now)
            ticks += 1
            total.add(result)
            if result.claimed == 0:
                break
        end = time.time()
        cpu = time.process_time() - cpu_start
        backend_end = backend_cpu_seconds(backend)
        db.session.remove()
        db.engine.dispose()
    spent = None if backend_start is None or backend_end is None else backend_end - backend_start
    return {
        "cpu": cpu,
        "backend_cpu": spent,
        "fired": total.queued,
        "claimed": total.claimed,
        "failed": total.failed,
        "already_recorded": total.already_recorded,
        "start": start,
        "end": end,
        "commits": commits[0],
        "ticks": ticks,
    }


def raw_postgresql(
    url: str,
    now: datetime,
    batch: int,
    statement: LiteralString = RAW_POSTGRESQL,
    search_path: str | None = None,
) -> dict[str, Any]:
    import psycopg
    from sqlalchemy.engine import make_url

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    options = f"-c search_path={search_path.replace(' ', '')}" if search_path else None
    with psycopg.connect(conninfo, autocommit=True, options=options) as connection:
        row = connection.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        backend = int(row[0])
        wait_for_go()
        start = time.time()
        cpu_before = backend_cpu_seconds(backend)
        fired = statements = 0
        while True:
            cursor = connection.execute(statement, {"now": now, "batch": batch})
            statements += 1
            if cursor.rowcount == 0:
                break
            fired += cursor.rowcount
        end = time.time()
        cpu_after = backend_cpu_seconds(backend)
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return {"fired": fired, "start": start, "end": end, "commits": statements, "backend_cpu": cpu}


def backend_cpu_seconds(pid: int | None) -> float | None:
    """CPU time (user + system) of a PostgreSQL backend on this machine, from /proc; None where
    it cannot be read (or no backend: SQLite). On a busy machine it varies far less than wall
    time."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw_sqlite(url: str, now: datetime, batch: int) -> dict[str, Any]:
    path = url.removeprefix("sqlite:///")
    connection = sqlite3.connect(path, isolation_level=None, timeout=10)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    stamp = now.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
    params = {"now": stamp, "batch": batch}
    wait_for_go()
    start = time.time()
    fired = commits = 0
    while True:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(RAW_SQLITE_INSERT, params)
        count = connection.execute(RAW_SQLITE_ADVANCE, params).rowcount
        connection.execute("COMMIT")
        commits += 1
        if count == 0:
            break
        fired += count
    end = time.time()
    connection.close()
    return {"fired": fired, "start": start, "end": end, "commits": commits}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--now", required=True, help="ISO instant the tick reasons from")
    parser.add_argument("--batch-size", type=int, default=300)
    parser.add_argument("--raw", action="store_true", help="the raw-SQL ceiling instead")
    parser.add_argument("--minimal", action="store_true", help="with --raw: the minimal schema")
    parser.add_argument("--search-path", help="with --raw: the tables the statement names")
    options = parser.parse_args()
    now = datetime.fromisoformat(options.now)
    if not options.raw:
        result = project(options.url, now, options.batch_size)
    elif options.url.startswith("sqlite"):
        result = raw_sqlite(options.url, now, options.batch_size)
    else:
        statement = RAW_MINIMAL if options.minimal else RAW_POSTGRESQL
        result = raw_postgresql(
            options.url, now, options.batch_size, statement, options.search_path
        )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
