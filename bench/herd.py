"""The midnight herd: 100,000 schedules of 1,000 tenants due at the same instant, real workers.

Part 1, the herd: N `flask scheduler worker` processes (their normal settings: the thread pool,
SCHEDULER_CONCURRENCY) run against schedules `0 0 * * *` in zones whose midnight is the same
instant all year (UTC, Africa/Abidjan, Atlantic/Reykjavik, America/Danmarkshavn, Etc/GMT), a
no-op job (bench.noop), every next_run_at set to one fire time T some seconds ahead (a pretend
midnight, as bench.fire does). The workers are up and idle before T; the benchmark waits until
every run of T has finished and reads the runs table: seconds from T to the last run queued and
to the last run finished, lag (queued_at and started_at minus the fire time) p50/p95/p99, runs/s,
commits per fire (pg_stat_database.xact_commit over the workers' whole life, start-up, idle
rounds and shut-down included, the benchmark's own statements subtracted). Once with 4 workers,
once with 8, each on a fresh database.

Where the time goes: the CPU seconds of the workers and of PostgreSQL's processes from T to the
last run finished (against the 2 CPUs' capacity), and, on the benchmark's own cluster (restarted
with shared_preload_libraries=pg_stat_statements), the statements by total execution time.

Part 2, a day's schedules: 1,000,000 schedules spread over the next 24 h against 100,000: the
idle tick (bench.idle_tick's Ticker: the real tick, nothing due) and the time the real tick takes
to fire a small due batch (1,000 schedules made due, spread over the table), in interleaved
rounds; the ratios show whether either grows with the table.

With `--fire-ahead SECONDS` (30 unless 0) each herd runs again on a fresh database with the
workers' SCHEDULER_FIRE_AHEAD set: the tick queues the runs before T, the jobs start at T; its
CPU and statements are counted from T - SECONDS, its times still from T.

With `--jitter SECONDS` each herd runs twice on fresh databases, without jitter (the baseline)
and with every schedule's jitter_seconds set: the same figures, plus the delay beyond each run's
planned start (started_at - available_at), the deepest ready queue seen (queued runs whose
available_at has come, sampled every second), PostgreSQL's CPU and statement time and the
commits; and every jittered run's available_at is checked to lie in [T, T + jitter].

Verified: exactly one run per schedule for T, none twice, none at another time, all succeeded,
each triggered by the schedule (or a catch-up of T when queued later than the misfire grace),
every next_run_at the cron module's next fire after T, every worker exited 0; in part 2 the
batch fired entirely and nothing else. A wrong result exits 1; a missed target prints
`target MISSED`.

    python -m bench.herd [--schedules 100000] [--tenants 1000] [--workers 4,8] [--lead 20]
                         [--large 1000000] [--small 100000] [--quick] [--no-day]
                         [--jitter SECONDS] [--fire-ahead SECONDS]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import IO, Any

import psycopg

from bench.common import (
    PROJECT_ROOT,
    WORKER,
    Server,
    check,
    commit_count,
    finish,
    machine,
    median,
    postgres_server,
    print_table,
    worker_env,
    write_results,
)
from webapp import cron

# Zones whose local midnight is the same instant all year (no daylight saving time).
ZONES = ("UTC", "Africa/Abidjan", "Atlantic/Reykjavik", "America/Danmarkshavn", "Etc/GMT")
EXPRESSION = "0 0 * * *"
QUEUED_TARGET_S = 5.0
FINISHED_TARGET_S = 30.0
# With fire ahead (issue 36): all finished this soon after T, and within this share of the time
# the same herd fired at T took in the same run.
AHEAD_FINISHED_TARGET_S = 7.0
AHEAD_SHARE_TARGET = 0.3
UNCHANGED_TARGET = 1.2
GRACE = timedelta(seconds=60)  # SCHEDULER_MISFIRE_GRACE's default

SEED_TENANTS = """
INSERT INTO tenants (slug, name, time_zone, created_at)
SELECT 'herd-' || t, 'Herd ' || t, (%(zones)s::text[])[1 + t %% %(zone_count)s], now()
FROM generate_series(0, %(tenants)s - 1) AS t
"""
# Schedule i belongs to tenant i mod tenants: the tenants' schedules interleave, as they would.
SEED_SCHEDULES = """
INSERT INTO schedules (tenant_id, scope, key, name, job, args, cron, time_zone, active,
                       misfire_policy, overlap_policy, next_run_at, jitter_seconds, created_at,
                       updated_at)
SELECT t.id, 'tenant', 's' || i, 'Schedule ' || i, 'bench.noop', '{}'::jsonb, %(cron)s,
       t.time_zone, true, 'fire_once', 'allow', %(first)s + (i %% %(n)s) * %(step)s,
       %(jitter)s, now(), now()
FROM generate_series(0, %(n)s - 1) AS i
JOIN tenants AS t ON t.slug = 'herd-' || (i %% %(tenants)s)
"""


# Every run of T has ended: nothing due any more, nothing queued or running (a finished run stays
# `running` until its outcome is stored). Three probes of partial indexes: a count(*) of the runs
# every half second cost PostgreSQL as much as the workers' own statements. The schedules' probe
# is a min(), which PostgreSQL always reads from ix_schedules_due: as `next_run_at <= T` it was
# planned on the statistics of the seed (every schedule due) as a scan of all 100,000 schedules,
# 15-50 ms a probe, 0.9 s of a herd's probing after T (now 0.3 s, most of it the READY count).
DONE = """
SELECT COALESCE((SELECT min(next_run_at) FROM schedules WHERE active) > %(t)s, true)
   AND NOT EXISTS (SELECT 1 FROM runs WHERE status = 'queued')
   AND NOT EXISTS (SELECT 1 FROM runs WHERE status = 'running')
"""
# The ready queue: queued runs whose available_at has come (the partial queue index).
READY = "SELECT count(*) FROM runs WHERE status = 'queued' AND available_at <= now()"


# --- processes and their CPU time ----------------------------------------------------------------

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def postmaster_pid(server: Server) -> int | None:
    if server.cluster is None:
        return None
    try:
        with open(os.path.join(server.cluster.data, "postmaster.pid")) as pidfile:
            return int(pidfile.readline())
    except (OSError, ValueError):
        return None


def server_processes(postmaster: int | None) -> list[int]:
    """The postmaster and its children (backends, WAL writer, checkpointer...)."""
    if postmaster is None:
        return []
    pids = [postmaster]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == postmaster:
            pids.append(int(entry))
    return pids


def load_average() -> str:
    with open("/proc/loadavg") as loadavg:
        return " ".join(loadavg.read().split()[:3])


# --- pg_stat_statements ---------------------------------------------------------------------------


def enable_statements(server: Server) -> bool:
    """pg_stat_statements in the admin database (it sees every database's statements): on our
    own cluster by restarting it with the library preloaded; on a given server only if it is
    preloaded there already."""
    cluster = server.cluster
    if cluster is not None and "pg_stat_statements" not in cluster.options:
        cluster.stop_server()
        cluster.options += (
            " -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.max=1000"
        )
        cluster.start_server()
    try:
        with psycopg.connect(server.conninfo(), autocommit=True) as connection:
            connection.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            connection.execute("SELECT count(*) FROM pg_stat_statements").fetchone()
        return True
    except psycopg.Error as error:
        print(f"pg_stat_statements not available ({str(error).strip()}): no statement figures")
        return False


def reset_statements(server: Server) -> None:
    with psycopg.connect(server.conninfo(), autocommit=True) as connection:
        connection.execute("SELECT pg_stat_statements_reset()")


def top_statements(server: Server, database: str, limit: int = 8) -> list[dict[str, Any]]:
    with psycopg.connect(server.conninfo(), autocommit=True) as connection:
        rows = connection.execute(
            "SELECT regexp_replace(query, '\\s+', ' ', 'g'), calls, total_exec_time, rows "
            "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
            "WHERE datname = %s) ORDER BY total_exec_time DESC",
            (database,),
        ).fetchall()
    total = sum(row[2] for row in rows) or 1.0
    statements = [
        {
            "statement": text[:88] + ("..." if len(text) > 88 else ""),
            "calls": calls,
            "total_ms": total_ms,
            "share": total_ms / total,
            "mean_ms": total_ms / calls if calls else 0.0,
            "rows": rows_count,
        }
        for text, calls, total_ms, rows_count in rows[:limit]
    ]
    commits = sum(row[1] for row in rows if row[0].strip().upper() == "COMMIT")
    statements.append(
        {
            "statement": f"(all {len(rows)} statements; COMMIT calls {commits:,})",
            "total_ms": total,
            "commits": commits,
        }
    )
    return statements


# --- part 1: the herd -----------------------------------------------------------------------------


class Monitor:
    """The benchmark's own connection to the herd's database; counts its transactions, which
    pg_stat_database counts with the workers'."""

    def __init__(self, conninfo: str) -> None:
        self.connection = psycopg.connect(conninfo, autocommit=True)
        self.transactions = 0

    def one(self, sql: str, params: Any = None) -> tuple[Any, ...]:
        self.transactions += 1
        row = self.connection.execute(sql, params).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return tuple(row)

    def close(self) -> None:
        self.connection.close()


def seed(
    server: Server, database: str, tenants: int, n: int, first: datetime, span_s: float
) -> None:
    """`tenants` tenants and `n` schedules, next_run_at spread evenly over [first, first+span)."""
    with psycopg.connect(server.conninfo(database), autocommit=True) as connection:
        connection.execute(
            SEED_TENANTS,  # type: ignore[arg-type]
            {"zones": list(ZONES), "zone_count": len(ZONES), "tenants": tenants},
        )
        if n:
            seed_schedules(connection, n, tenants, first, span_s)
        connection.execute("VACUUM ANALYZE tenants, schedules")


def seed_schedules(
    connection: psycopg.Connection[Any],
    n: int,
    tenants: int,
    first: datetime,
    span_s: float,
    jitter: int | None = None,
) -> None:
    connection.execute(
        SEED_SCHEDULES,  # type: ignore[arg-type]
        {
            "cron": EXPRESSION,
            "first": first,
            "n": n,
            "step": timedelta(seconds=span_s / n),
            "tenants": tenants,
            "jitter": jitter,
        },
    )


def start_worker(
    url: str, concurrency: int | None, log: IO[bytes], ahead: float = 0.0
) -> subprocess.Popen[bytes]:
    command = list(WORKER)
    if concurrency:
        command += ["--concurrency", str(concurrency)]
    env = worker_env(url, SCHEDULER_FIRE_AHEAD=str(ahead))
    return subprocess.Popen(
        command, cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )


def alive(workers: list[subprocess.Popen[bytes]]) -> None:
    dead = [worker.pid for worker in workers if worker.poll() is not None]
    if dead:
        raise RuntimeError(f"worker(s) {dead} exited early")


def herd_round(
    server: Server,
    count: int,
    n: int,
    tenants: int,
    lead: float,
    concurrency: int | None,
    statements: bool,
    problems: list[str],
    jitter: int | None = None,
    ahead: float = 0.0,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Workers first (their start-up is no part of the figures), then the schedules, due at
    T = `lead` seconds after the workers are all registered (plus `ahead`, the workers'
    SCHEDULER_FIRE_AHEAD: the CPU and statements are then counted from T - ahead)."""
    database = server.create_database()
    conninfo = server.conninfo(database)
    url = server.url(database)
    seed(server, database, tenants, 0, datetime.now(UTC), 0.0)
    commits_before = commit_count(server, database)
    postmaster = postmaster_pid(server)
    monitor = Monitor(conninfo)
    label = f"{count} workers" + (f", jitter {jitter} s" if jitter else "")
    label += f", fire-ahead {ahead:g} s" if ahead else ""
    with tempfile.TemporaryDirectory(prefix="bench-herd-") as logs:
        files = [open(os.path.join(logs, f"worker-{i}.log"), "wb") for i in range(count)]
        started = time.monotonic()
        workers = [start_worker(url, concurrency, log, ahead) for log in files]
        try:
            deadline = time.monotonic() + 300
            while monitor.one("SELECT count(*) FROM workers")[0] < count:
                alive(workers)
                if time.monotonic() > deadline:
                    raise RuntimeError("the workers did not register within 300 s")
                time.sleep(0.1)
            startup = time.monotonic() - started
            fire = (datetime.now(UTC) + timedelta(seconds=lead + ahead)).replace(microsecond=0)
            monitor.transactions += 2  # the INSERT and the ANALYZE
            seed_schedules(monitor.connection, n, tenants, fire, 0.0, jitter)
            monitor.connection.execute("ANALYZE schedules")
            margin = (fire - datetime.now(UTC)).total_seconds() - ahead
            if margin < 1.0:  # a worker sees the new T at its next poll (<= 1 s)
                print(
                    f"  {label}: the schedules were stored {abs(margin):.1f} s "
                    f"{'after' if margin < 0 else 'before'} T: the figures include the wait "
                    "(raise --lead)"
                )
            time.sleep(max(0.0, margin - 0.3))
            if statements:
                reset_statements(server)
            pids = [worker.pid for worker in workers]
            server_pids = server_processes(postmaster)
            cpu_workers = sum(cpu_seconds(pid) for pid in pids)
            cpu_server = sum(cpu_seconds(pid) for pid in server_pids)
            cpu_machine = machine_busy_seconds()
            load_before = load_average()
            deadline = time.monotonic() + 600 + (jitter or 0)
            peak_ready, probes = 0, 0
            at_t: tuple[float, float] | None = None  # the CPU seconds at T (fire ahead)
            while not monitor.one(DONE, {"t": fire})[0]:
                alive(workers)
                if time.monotonic() > deadline:
                    raise RuntimeError("the runs did not finish within 10 minutes")
                probes += 1
                if probes % 2 == 0:  # every second: a count costs PostgreSQL too
                    peak_ready = max(peak_ready, monitor.one(READY)[0])
                until_t = (fire - datetime.now(UTC)).total_seconds()
                if ahead and at_t is None and until_t <= 0.5:
                    time.sleep(max(0.0, until_t))
                    at_t = (
                        sum(cpu_seconds(pid) for pid in pids),
                        sum(cpu_seconds(pid) for pid in server_processes(postmaster)),
                    )
                    continue
                time.sleep(0.5)
            workers_now = sum(cpu_seconds(pid) for pid in pids)
            cpu_workers = workers_now - cpu_workers
            server_pids += [p for p in server_processes(postmaster) if p not in server_pids]
            server_now = sum(cpu_seconds(pid) for pid in server_pids)
            cpu_server = server_now - cpu_server
            # After T (fire ahead); a backend that ended since T takes its CPU with it (the
            # workers' own connections last).
            after_t = (workers_now - at_t[0], server_now - at_t[1]) if at_t else (None, None)
            cpu_machine = machine_busy_seconds() - cpu_machine
            load_after = load_average()
            top = top_statements(server, database) if statements else []
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            codes = [worker.wait(120) for worker in workers]
            check(codes == [0] * count, f"{label}: worker exit codes {codes}", problems)
        except RuntimeError as error:
            problems.append(f"{label}: {error}")
            for name in sorted(os.listdir(logs)):
                with open(os.path.join(logs, name), errors="replace") as log_text:
                    print(f"--- {name} (tail)\n{log_text.read()[-2000:]}", file=sys.stderr)
            raise
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait(10)
            for log in files:
                log.close()
    figures = measure(monitor, fire)
    late = verify(monitor, n, fire, problems, label)
    if jitter:
        verify_spread(monitor, n, fire, jitter, problems, label)
    monitor.close()
    commits = commit_count(server, database) - commits_before - monitor.transactions
    server.drop(database)
    wall = figures["finished_s"]
    commit_calls = top[-1]["commits"] if top else None
    row = {
        "workers": count,
        "jitter": jitter or 0,
        "fire_ahead": ahead,
        "concurrency": concurrency or "default",
        "schedules": n,
        "tenants": tenants,
        "startup_s": startup,
        "setup_margin_s": margin,
        **figures,
        "runs_per_s": n / wall if wall > 0 else 0.0,
        "catchup_runs": late,
        # COMMITs from just before T to the last run finished (pg_stat_statements) when known,
        # else every commit of the workers' life.
        "commits_per_fire": (commit_calls if commit_calls is not None else commits) / n,
        "commits_per_fire_life": commits / n,
        "worker_cpu_s": cpu_workers,
        "server_cpu_s": cpu_server,
        "worker_cpu_after_t_s": after_t[0],
        "server_cpu_after_t_s": after_t[1],
        "statements_ms": top[-1]["total_ms"] if top else None,
        "peak_ready": peak_ready,
        "machine_busy_s": cpu_machine,
        "others_cpu_s": max(0.0, cpu_machine - cpu_workers - cpu_server),
        "cpu_capacity_s": (os.cpu_count() or 1) * (wall + ahead),  # counted from T - ahead
        "load_before": load_before,
        "load_after": load_after,
    }
    return row, top


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy so far (all CPUs, /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / TICKS_PER_S


def measure(monitor: Monitor, fire: datetime) -> dict[str, float]:
    row = monitor.one(
        """
        SELECT extract(epoch FROM min(queued_at) - %(t)s),
               extract(epoch FROM max(queued_at) - %(t)s),
               extract(epoch FROM min(started_at) - %(t)s),
               extract(epoch FROM max(finished_at) - %(t)s),
               percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP
                   (ORDER BY extract(epoch FROM queued_at - scheduled_for)),
               percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP
                   (ORDER BY extract(epoch FROM started_at - scheduled_for)),
               percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP
                   (ORDER BY extract(epoch FROM started_at - available_at))
        FROM runs WHERE scheduled_for = %(t)s
        """,
        {"t": fire},
    )
    first_queued, queued, first_started, finished, queue_lag, start_lag, delay = row
    return {
        "first_queued_s": float(first_queued),
        "queued_s": float(queued),
        "first_started_s": float(first_started),
        "finished_s": float(finished),
        "queue_lag_p50": queue_lag[0],
        "queue_lag_p95": queue_lag[1],
        "queue_lag_p99": queue_lag[2],
        "start_lag_p50": start_lag[0],
        "start_lag_p95": start_lag[1],
        "start_lag_p99": start_lag[2],
        # Beyond the planned start: what the workers and the database add to the jitter.
        "delay_p50": delay[0],
        "delay_p95": delay[1],
        "delay_p99": delay[2],
    }


def verify(monitor: Monitor, n: int, fire: datetime, problems: list[str], label: str) -> int:
    # A fire queued later than the misfire grace (60 s by default: a loaded machine) is a
    # catch-up run of the same fire time, as it should be; any other trigger is wrong.
    runs, schedules_fired, at_fire, succeeded, scheduled, catchup = monitor.one(
        "SELECT count(*), count(DISTINCT schedule_id), count(*) FILTER (WHERE scheduled_for = %s),"
        " count(*) FILTER (WHERE status = 'succeeded' AND attempt = 1),"
        " count(*) FILTER (WHERE \"trigger\" = 'schedule'),"
        " count(*) FILTER (WHERE \"trigger\" = 'catchup' AND fires_covered = 1"
        "                  AND queued_at - scheduled_for > %s) FROM runs",
        (fire, GRACE),
    )
    check(runs == n, f"{label}: {runs} runs, expected exactly {n}", problems)
    check(schedules_fired == n, f"{label}: {schedules_fired} schedules fired of {n}", problems)
    check(at_fire == n, f"{label}: {runs - at_fire} runs at another time", problems)
    check(succeeded == n, f"{label}: {n - succeeded} runs not succeeded at once", problems)
    wrong_trigger = n - scheduled - catchup
    check(wrong_trigger == 0, f"{label}: {wrong_trigger} runs of another trigger", problems)
    expected = {zone: cron.validate(EXPRESSION, zone).next_fire_after(fire) for zone in ZONES}
    wrong = 0
    monitor.transactions += 1
    for zone, next_run_at, count in monitor.connection.execute(
        "SELECT time_zone, next_run_at, count(*) FROM schedules GROUP BY 1, 2"
    ).fetchall():
        if expected.get(zone) != next_run_at:
            wrong += count
    check(wrong == 0, f"{label}: {wrong} schedules with a wrong next_run_at", problems)
    return int(catchup)


def verify_spread(
    monitor: Monitor, n: int, fire: datetime, jitter: int, problems: list[str], label: str
) -> None:
    """Every run's planned start lies in [T, T + jitter] (or is the moment a late tick queued
    it), the fire time unchanged; and the spread used the window."""
    inside, late_ticks, spread = monitor.one(
        "SELECT count(*) FILTER (WHERE available_at BETWEEN %(t)s AND %(t)s + %(j)s),"
        " count(*) FILTER (WHERE available_at = queued_at AND available_at > %(t)s + %(j)s),"
        " extract(epoch FROM max(available_at) - min(available_at))"
        " FROM runs WHERE scheduled_for = %(t)s",
        {"t": fire, "j": timedelta(seconds=jitter)},
    )
    check(inside + late_ticks == n, f"{label}: {n - inside - late_ticks} runs outside", problems)
    check(float(spread) >= jitter * 0.9, f"{label}: starts spread over {spread} s", problems)


# --- part 2: a day's schedules --------------------------------------------------------------------


class Day:
    """One database of schedules spread over the next 24 h, a stash of `batch` of them spread
    over the table, the real tick (bench.idle_tick.Ticker) to time."""

    def __init__(self, server: Server, n: int, tenants: int, batch: int) -> None:
        from bench.idle_tick import Ticker

        self.n = n
        self.batch = batch
        self.database = server.create_database()
        # An hour ahead: nothing falls due while the benchmark runs.
        start = datetime.now(UTC) + timedelta(hours=1)
        seed(server, self.database, tenants, n, start, 86_400.0)
        self.admin = psycopg.connect(server.conninfo(self.database), autocommit=True)
        self.admin.execute(
            "CREATE TABLE herd_stash AS SELECT id, next_run_at FROM schedules "
            "WHERE id %% %s = 0 LIMIT %s",
            (max(1, n // batch), batch),
        )
        self.ticker = Ticker(server, self.database)
        self.fire_times: list[float] = []
        self.fired = 0
        self.other = 0

    def fire_batch(self) -> None:
        """Makes the batch due, times the real tick firing it, puts the schedules back."""
        from webapp.scheduler.tick import tick

        self.admin.execute(
            "UPDATE schedules AS s SET next_run_at = now() - interval '1 second' "
            "FROM herd_stash AS h WHERE s.id = h.id"
        )
        with self.ticker.app.app_context():
            session = self.ticker.db.session()
            start = time.perf_counter()
            result = tick(session, self.ticker.catalog, self.ticker.settings)
            self.fire_times.append(time.perf_counter() - start)
            self.ticker.db.session.remove()
        self.fired += result.queued
        self.other += result.claimed - result.queued
        self.admin.execute(
            "UPDATE schedules AS s SET next_run_at = h.next_run_at FROM herd_stash AS h "
            "WHERE s.id = h.id"
        )
        self.admin.execute("DELETE FROM runs")
        self.admin.execute("VACUUM schedules, runs")

    def close(self) -> None:
        self.ticker.close()
        self.admin.close()


def day_rounds(
    server: Server, large: int, small: int, tenants: int, batch: int, ticks: int, rounds: int
) -> tuple[list[dict[str, Any]], list[str]]:
    problems: list[str] = []
    started = time.monotonic()
    days = [Day(server, n, tenants, batch) for n in (large, small)]
    print(f"seeded {large:,} and {small:,} schedules in {time.monotonic() - started:.0f} s")
    for day in days:
        day.ticker.block(50)  # warm caches and connections
        day.ticker.times.clear()
        day.ticker.raw_times.clear()
        day.fire_batch()
        day.fire_times.clear()
        day.fired = 0
    for _ in range(rounds):
        for day in days:
            day.fire_batch()
            day.ticker.block(max(1, ticks // rounds))
    rows = []
    for day in days:
        check(
            day.fired == batch * rounds,
            f"day, {day.n:,}: {day.fired} fired, expected {batch * rounds}",
            problems,
        )
        check(day.ticker.claimed == 0, f"day, {day.n:,}: idle ticks fired", problems)
        check(day.other == 0, f"day, {day.n:,}: {day.other} fires not queued", problems)
        rows.append(
            {
                "schedules": day.n,
                "idle_tick_ms": median(day.ticker.times) * 1000,
                "raw_probe_ms": median(day.ticker.raw_times) * 1000,
                "batch": batch,
                "batch_fire_ms": median(day.fire_times) * 1000,
                "batch_fire_min_ms": min(day.fire_times) * 1000,
                "fires_per_s": batch / median(day.fire_times),
            }
        )
        day.close()
    large_row, small_row = rows
    large_row["idle_ratio"] = large_row["idle_tick_ms"] / small_row["idle_tick_ms"]
    large_row["fire_ratio"] = large_row["batch_fire_ms"] / small_row["batch_fire_ms"]
    return rows, problems


# --- main -----------------------------------------------------------------------------------------


HERD_COLUMNS = (
    "workers",
    "jitter",
    "fire_ahead",
    "schedules",
    "first_queued_s",
    "queued_s",
    "first_started_s",
    "finished_s",
    "queue_lag_p50",
    "queue_lag_p95",
    "queue_lag_p99",
    "start_lag_p50",
    "start_lag_p95",
    "start_lag_p99",
    "delay_p95",
    "delay_p99",
    "runs_per_s",
    "commits_per_fire",
    "catchup_runs",
)
CPU_COLUMNS = (
    "workers",
    "jitter",
    "fire_ahead",
    "startup_s",
    "setup_margin_s",
    "finished_s",
    "cpu_capacity_s",
    "machine_busy_s",
    "worker_cpu_s",
    "server_cpu_s",
    "worker_cpu_after_t_s",
    "server_cpu_after_t_s",
    "statements_ms",
    "peak_ready",
    "others_cpu_s",
    "commits_per_fire_life",
    "load_before",
    "load_after",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=1_000)
    parser.add_argument("--workers", default="4,8", help="worker counts, one herd each")
    parser.add_argument("--concurrency", type=int, default=None, help="default: the setting's")
    parser.add_argument(
        "--lead", type=float, default=15.0, help="seconds from the workers' registration to T"
    )
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000, help="due batch of part 2")
    parser.add_argument("--ticks", type=int, default=500, help="idle ticks timed per size")
    parser.add_argument("--rounds", type=int, default=10, help="part 2's interleaved rounds")
    parser.add_argument("--quick", action="store_true", help="10,000 schedules, 100 tenants")
    parser.add_argument("--no-day", action="store_true", help="skip part 2")
    parser.add_argument(
        "--fire-ahead",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="each herd also with the workers' SCHEDULER_FIRE_AHEAD set, beside the herd "
        "without (0: without only)",
    )
    parser.add_argument(
        "--jitter",
        type=int,
        default=None,
        metavar="SECONDS",
        help="each herd also with this jitter on every schedule, beside the herd without",
    )
    options = parser.parse_args(argv)
    if options.quick:
        options.schedules, options.tenants, options.lead = 10_000, 100, 5.0
        options.large, options.small, options.ticks, options.rounds = 100_000, 10_000, 200, 5
    counts = [int(count) for count in options.workers.split(",")]
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    day: list[dict[str, Any]] = []
    print(f"load average before: {load_average()}", flush=True)
    with postgres_server() as server:
        version = server.version()
        statements = enable_statements(server)
        variants: list[tuple[int | None, float]] = [(None, 0.0)]
        if options.jitter:
            variants.append((options.jitter, 0.0))
        if options.fire_ahead:
            variants.append((None, options.fire_ahead))
        for count, (jitter, ahead) in [(c, variant) for c in counts for variant in variants]:
            row, top = herd_round(
                server,
                count,
                options.schedules,
                options.tenants,
                options.lead,
                options.concurrency,
                statements,
                problems,
                jitter,
                ahead,
            )
            rows.append(row)
            print_table(
                f"Herd, {count} workers, jitter {jitter or 0} s, fire-ahead {ahead:g} s: "
                f"{options.schedules:,} schedules, "
                f"{options.tenants:,} tenants (seconds from the fire time T)",
                [row],
                HERD_COLUMNS,
            )
            if top:
                row["statements"] = top
                print_table(
                    f"Where PostgreSQL's time went, {count} workers, jitter {jitter or 0} s "
                    "(pg_stat_statements, "
                    "execution time; COMMIT's WAL flush is not in it)",
                    top,
                    ("statement", "calls", "total_ms", "share", "mean_ms", "rows"),
                )
        if not options.no_day:
            day, day_problems = day_rounds(
                server,
                options.large,
                options.small,
                options.tenants,
                options.batch,
                options.ticks,
                options.rounds,
            )
            problems += day_problems
    info = machine(version)
    info["load_average_end"] = load_average()
    write_results("herd", [{"part": "herd", **row} for row in rows], info)
    if day:
        write_results("herd", [{"part": "day", **row} for row in day], info)
    cpus = info["nproc"]
    print_table(
        f"Herd ({cpus} CPUs, PostgreSQL {version}): seconds from T; lag = time - T",
        rows,
        HERD_COLUMNS,
    )
    print_table(
        f"Herd: CPU seconds from T to the last run finished (capacity = {cpus} CPUs x wall)",
        rows,
        CPU_COLUMNS,
    )
    targets: list[tuple[str, bool]] = []
    for row in rows:
        if row["jitter"]:
            continue  # spread on purpose: its figures are read beside the herd without
        targets.append(
            (
                f"herd {row['workers']} workers: all queued {row['queued_s']:.2f} s "
                f"<= {QUEUED_TARGET_S:g} s after T",
                row["queued_s"] <= QUEUED_TARGET_S,
            )
        )
        targets.append(
            (
                f"herd {row['workers']} workers: all finished {row['finished_s']:.2f} s "
                f"<= {FINISHED_TARGET_S:g} s after T",
                row["finished_s"] <= FINISHED_TARGET_S,
            )
        )
    at_t = {row["workers"]: row for row in rows if not row["jitter"] and not row["fire_ahead"]}
    for row in rows:
        if row["jitter"] or not row["fire_ahead"]:
            continue
        targets.append(
            (
                f"herd {row['workers']} workers, fire ahead: all finished "
                f"{row['finished_s']:.2f} s <= {AHEAD_FINISHED_TARGET_S:g} s after T",
                row["finished_s"] <= AHEAD_FINISHED_TARGET_S,
            )
        )
        base = at_t.get(row["workers"])
        if base is not None:
            share = row["finished_s"] / base["finished_s"]
            targets.append(
                (
                    f"herd {row['workers']} workers, fire ahead: {share:.2f}x the herd fired "
                    f"at T <= {AHEAD_SHARE_TARGET}x",
                    share <= AHEAD_SHARE_TARGET,
                )
            )
    if day:
        print_table(
            f"A day's schedules: idle tick and a due batch of {options.batch:,} fired by the "
            "real tick (medians)",
            day,
            (
                "schedules",
                "idle_tick_ms",
                "raw_probe_ms",
                "batch_fire_ms",
                "batch_fire_min_ms",
                "fires_per_s",
                "idle_ratio",
                "fire_ratio",
            ),
        )
        large = day[0]
        targets.append(
            (
                f"idle tick at {options.large:,} within {UNCHANGED_TARGET}x of "
                f"{options.small:,}: {large['idle_ratio']:.2f}x",
                large["idle_ratio"] <= UNCHANGED_TARGET,
            )
        )
        targets.append(
            (
                f"batch fire at {options.large:,} within {UNCHANGED_TARGET}x of "
                f"{options.small:,}: {large['fire_ratio']:.2f}x",
                large["fire_ratio"] <= UNCHANGED_TARGET,
            )
        )
    print(f"load average at the end: {info['load_average_end']}")
    return finish("herd", problems, targets)


if __name__ == "__main__":
    sys.exit(main())
