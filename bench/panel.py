"""Panel latency: a tenant with 1,000,000 runs and 10,000 schedules, through the real app.

Requests go through Flask's test client (the whole app: login, tenancy, SQLAlchemy, Jinja;
no HTTP socket), logged in as an admin through a real server-side session. Each page is timed
N times after a warm-up, each request followed by one of the *lean page*: a route registered
on this app by the benchmark only (never in the product) that selects the history's 50 rows
with one keyset query (row tuples) and renders them with a bare template, no login. Both see
the same noise, so the ratio of their p95 means something on a busy machine.
Also counted: SQL statements per request (at most 4: the session's one and 3 for the page's
data; a page over that budget fails the run, exit status 1), compared with the same page of a
tenant holding 200 runs (the count must not grow with the data), and the page's bytes, which
are the same at phone width (the layout changes with CSS only; the benchmark checks that a
phone's User-Agent gets the same bytes and that no element id appears twice, as a table plus
a card list would).

Two more pages of this benchmark only stand for the floor that every panel page stands on: the
login and the layout with nothing in them, and the lean page's own query and rows inside them
(the current tenant's). Figures only; `vs_floor_p95` divides each page's p95 ratio by the
second one's: what a page costs beyond the lean rows behind a login. Targets: every page within
2x of that floor, the schedule page (settings, charts, history, fires) within 2.5x.

    python -m bench.panel [--runs 1000000] [--schedules 10000] [--requests 100] [--quick]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from typing import Any

import psycopg
from flask import Flask, request
from sqlalchemy import event, select

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

# Hourly at minute i % 60 (Berlin is a whole number of hours from UTC). next_run_at is on the
# cron's grid, as the scheduler keeps it: the first fire at least 15 minutes ahead, so that no
# schedule falls overdue while the benchmark runs without a worker.
SEED_SCHEDULES = """
INSERT INTO schedules (tenant_id, scope, key, name, job, args, cron, time_zone, active,
                       misfire_policy, overlap_policy, next_run_at, created_at, updated_at)
SELECT %(tenant)s, 'tenant', 's' || i, 'Schedule ' || lpad(i::text, 6, '0'), 'bench.noop',
       '{}'::jsonb, (i %% 60) || ' * * * *', 'Europe/Berlin', i %% 17 <> 0, 'fire_once', 'allow',
       CASE WHEN fire > soon THEN fire ELSE fire + interval '1 hour' END, now(), now()
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT now() + interval '15 minutes' AS soon) AS s,
     LATERAL (SELECT date_trunc('hour', soon) + (i %% 60) * interval '1 minute' AS fire) AS f
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


# Audit events of the schedules: Run now, an edit of the cron expression and name, pause, resume.
SEED_AUDIT = """
INSERT INTO audit_events (tenant_id, actor_id, actor_label, action, object_type, object_id,
                          object_label, before, after, created_at)
SELECT %(tenant)s, %(user)s, 'admin@bench.example',
       (ARRAY['schedule.run_now', 'schedule.update', 'schedule.pause',
              'schedule.resume'])[i %% 4 + 1],
       'schedule', s.first + (i %% %(schedules)s),
       'Schedule ' || lpad((i %% %(schedules)s + 1)::text, 6, '0'),
       CASE i %% 4 WHEN 1 THEN '{"cron": "0 * * * *", "name": "Old name"}'::jsonb
                   WHEN 2 THEN '{"active": true}' WHEN 3 THEN '{"active": false}' END,
       CASE i %% 4 WHEN 0 THEN jsonb_build_object('run_id', i, 'at', '2026-12-01T10:00:00+00:00')
                   WHEN 1 THEN '{"cron": "*/5 * * * *", "name": "New name"}'
                   WHEN 2 THEN '{"active": false}' ELSE '{"active": true}' END,
       now() - (%(n)s - i) * interval '1 minute'
FROM generate_series(1, %(n)s) AS i,
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
        for tenant, events, count in ((big, runs // 10, schedules), (small, 200, 50)):
            connection.execute(
                SEED_AUDIT,
                {"tenant": tenant, "user": user, "n": events, "schedules": count},  # type: ignore[arg-type]
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


# The benchmark's own floor pages (install_floor_pages).
FLOOR_LABELS = ("floor: login and layout, no data", "floor: login, layout and the lean rows")
FLOOR_URLS = ("/_bench/floor/empty", "/_bench/floor/lean")


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
        ("next runs", "/upcoming", False),
        ("audit log", "/audit", False),
        (
            "cron preview fragment",
            "/schedules/form/preview?cron=*/15+9-17+*+*+1-5&time_zone=Europe/Berlin",
            True,
        ),
        *((label, url, False) for label, url in zip(FLOOR_LABELS, FLOOR_URLS, strict=True)),
    ]


# Pages held to the targets (the cron preview is a fragment without data, the floor pages are
# the benchmark's own: figures only).
UNTARGETED = {"cron preview fragment", *FLOOR_LABELS}
MAX_VS_FLOOR = 2.0  # page p95 ratio / the floor page's p95 ratio (both to the lean page)
MAX_VS_FLOOR_SCHEDULE_PAGE = 2.5  # settings, charts, history and fires on one page
MAX_STATEMENTS = 4  # the session's one (user, membership, tenant) + 3 for the page's data
PHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1"
)

# The lean page: what a minimal Flask + SQLAlchemy + Jinja page costs for the history's rows.
LEAN_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Run history</title></head><body>
<table>
<tr><th>Run</th><th>Schedule</th><th>Trigger</th><th>Scheduled for</th><th>Started</th>
<th>Duration</th><th>Attempt</th><th>Status</th></tr>
{% for run in runs %}
<tr><td><a href="/runs/{{ run.id }}">#{{ run.id }}</a></td><td>{{ run.name }}</td>
<td>{{ run.trigger }}</td><td>{{ run.scheduled_for }}</td><td>{{ run.started_at }}</td>
<td>{{ run.finished_at - run.started_at if run.finished_at and run.started_at else '-' }}</td>
<td>{{ run.attempt }}</td><td>{{ run.status }}</td></tr>
{% endfor %}
</table>
{% if next_before %}<a href="?before={{ next_before }}">Older runs</a>{% endif %}
</body></html>
"""
LEAN_URL = "/_bench/lean"


def lean_rows(tenant_id: int, before: int | None) -> dict[str, Any]:
    """The lean page's query: the history's 50 rows of a tenant as row tuples, one keyset
    statement, and the id that the next page starts before (the template's context)."""
    from webapp.extensions import db
    from webapp.models import Run, Schedule

    query = (
        select(
            Run.id,
            Schedule.name,
            Run.trigger,
            Run.scheduled_for,
            Run.started_at,
            Run.finished_at,
            Run.attempt,
            Run.status,
        )
        .outerjoin(Schedule, Schedule.id == Run.schedule_id)
        .where(Run.tenant_id == tenant_id)
    )
    if before is not None:
        query = query.where(Run.id < before)
    rows = db.session.execute(query.order_by(Run.id.desc()).limit(51)).all()
    return {"runs": rows[:50], "next_before": rows[49].id if len(rows) > 50 else None}


def install_lean_page(app: Flask, tenant_id: int) -> None:
    """Registers the lean page on `app` (this benchmark's app only): lean_rows rendered by a
    bare template, no login."""
    template = app.jinja_env.from_string(LEAN_TEMPLATE)

    def lean() -> str:
        return template.render(**lean_rows(tenant_id, request.args.get("before", type=int)))

    app.add_url_rule(LEAN_URL, "bench_lean", lean)


# What every panel page pays before its own data: the login (the session's statement), the
# layout (navigation, tenant, times toggle, three forms), and around them the same per-request
# work as the lean page. Measured as two more pages of this benchmark only, each with the same
# alternating lean requests: the layout with nothing in it, and the lean page's own query and
# rows inside it: the floor that the targets are measured against.
FLOOR_TEMPLATE = (
    '{% extends "base.html" %}{% block content %}'
    + LEAN_TEMPLATE.split("<body>")[1].split("</body>")[0]
    + "{% endblock %}"
)


def install_floor_pages(app: Flask) -> None:
    """Registers the floor pages on `app` (this benchmark's app only): logged in as every panel
    page is, the current tenant's rows read as the lean page reads them."""
    from flask import render_template
    from flask_login import login_required

    from webapp.web import tenancy

    empty = app.jinja_env.from_string('{% extends "base.html" %}{% block content %}{% endblock %}')
    rows_page = app.jinja_env.from_string(FLOOR_TEMPLATE)

    @login_required
    def floor_empty() -> str:
        return render_template(empty)

    @login_required
    def floor_lean() -> str:
        return render_template(rows_page, **lean_rows(tenancy.current_tenant().id, None))

    app.add_url_rule(FLOOR_URLS[0], "bench_floor_empty", floor_empty)
    app.add_url_rule(FLOOR_URLS[1], "bench_floor_lean", floor_lean)


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

    def get(
        self, url: str, htmx: bool, user_agent: str | None = None
    ) -> tuple[int, bytes, float, int]:
        """(status, body, seconds, statements)."""
        headers = {"HX-Request": "true"} if htmx else {}
        if user_agent:
            headers["User-Agent"] = user_agent
        before = self.statements
        start = time.perf_counter()
        response = self.client.get(url, headers=headers)
        body = response.get_data()
        elapsed = time.perf_counter() - start
        return response.status_code, body, elapsed, self.statements - before


def figures(times: list[float]) -> dict[str, float]:
    return {"p50_ms": median(times) * 1000, "p95_ms": percentile(times, 0.95) * 1000}


def measure(client: Client, url: str, htmx: bool, requests: int, lean: bool) -> dict[str, Any]:
    """The page's figures; with `lean`, each request is followed by one of the lean page,
    whose figures come back as "lean" (the same minutes, the same noise)."""
    for _ in range(5):
        client.get(url, htmx)
        if lean:
            client.get(LEAN_URL, False)
    times, lean_times, statuses, sizes = [], [], set(), set()
    statements: Counter[int] = Counter()
    for _ in range(requests):
        status, body, elapsed, count = client.get(url, htmx)
        times.append(elapsed)
        # The most frequent count: the session's last_seen_at is written once a minute.
        statements[count] += 1
        statuses.add(status)
        sizes.add(len(body))
        if lean:
            lean_times.append(client.get(LEAN_URL, False)[2])
    result: dict[str, Any] = {
        **figures(times),
        "statements": statements.most_common(1)[0][0],
        "statuses": sorted(statuses),
        "bytes": max(sizes),
    }
    if lean:
        result["lean"] = figures(lean_times)
    return result


def markup_problems(label: str, client: Client, url: str, htmx: bool) -> list[str]:
    """A phone must get the same bytes as a desktop, and no element id may appear twice (a
    page that renders its rows twice, as a table and as cards, repeats them)."""
    _, desktop, _, _ = client.get(url, htmx)
    _, phone, _, _ = client.get(url, htmx, user_agent=PHONE)
    problems = []
    if len(phone) != len(desktop):
        problems.append(f"{label}: {len(phone)} bytes for a phone, {len(desktop)} for a desktop")
    ids = Counter(re.findall(rb'\sid="([^"]+)"', desktop))
    twice = sorted(name.decode() for name, count in ids.items() if count > 1)
    if twice:
        problems.append(f"{label}: ids appear more than once: {', '.join(twice[:5])}")
    return problems


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
        install_lean_page(app, ids["big"])
        install_floor_pages(app)
        big = Client(app, ids["user"], ids["big"])
        small = Client(app, ids["user"], ids["small"])
        lean = measure(big, LEAN_URL, False, options.requests, lean=False)
        small_pages = {label: (url, htmx) for label, url, htmx in pages(ids, "small")}
        for label, url, htmx in pages(ids, "big"):
            page = measure(big, url, htmx, options.requests, lean=True)
            small_url, small_htmx = small_pages[label]
            small_page = measure(small, small_url, small_htmx, max(5, options.requests // 5), False)
            check(page["statuses"] == [200], f"{label}: answered {page['statuses']}", problems)
            check(
                small_page["statuses"] == [200],
                f"{label} (small tenant): answered {small_page['statuses']}",
                problems,
            )
            # A statement budget is counted, not timed: a page over it fails the run, so that
            # a query added to a page is caught here rather than as a slowly growing ratio.
            check(
                label in UNTARGETED or page["statements"] <= MAX_STATEMENTS,
                f"{label}: {page['statements']} SQL statements, more than {MAX_STATEMENTS} "
                "(the session's one and 3 for the page's data)",
                problems,
            )
            problems.extend(markup_problems(label, big, url, htmx))
            rows.append(
                {
                    "page": label,
                    "url": url,
                    "p50_ms": page["p50_ms"],
                    "p95_ms": page["p95_ms"],
                    "lean_p50_ms": page["lean"]["p50_ms"],
                    "lean_p95_ms": page["lean"]["p95_ms"],
                    "ratio_p50": page["p50_ms"] / page["lean"]["p50_ms"],
                    "ratio_p95": page["p95_ms"] / page["lean"]["p95_ms"],
                    "statements": page["statements"],
                    "statements_small_tenant": small_page["statements"],
                    "kb": page["bytes"] / 1024,
                    "target": label not in UNTARGETED,
                }
            )
        with app.app_context():
            from webapp.extensions import db

            db.engine.dispose()
    # Each page against the lean rows behind the login and the layout (both ratios to the lean
    # page of their own minutes): what the page costs beyond the floor every page stands on.
    floor = next(row for row in rows if row["page"] == FLOOR_LABELS[1])
    for row in rows:
        row["vs_floor_p95"] = row["ratio_p95"] / floor["ratio_p95"]
    info = machine(version)
    write_results("panel", rows, info)
    print_table(
        f"Panel latency: {options.runs:,} runs, {options.schedules:,} schedules (test client; "
        f"lean page alone p50 {lean['p50_ms']:.2f} ms, p95 {lean['p95_ms']:.2f} ms, "
        f"{lean['bytes'] / 1024:.1f} KB; {info['nproc']} CPUs, PostgreSQL {version}; "
        "ratios to the lean page measured interleaved with each page; vs_floor_p95: the ratio "
        "over the floor's, the lean rows behind the login and the layout; KB at any width)",
        rows,
        (
            "page",
            "p50_ms",
            "p95_ms",
            "lean_p50_ms",
            "lean_p95_ms",
            "ratio_p50",
            "ratio_p95",
            "vs_floor_p95",
            "statements",
            "statements_small_tenant",
            "kb",
        ),
    )
    targets = []
    for row in rows:
        if row["target"]:
            bound = MAX_VS_FLOOR_SCHEDULE_PAGE if row["page"] == "schedule detail" else MAX_VS_FLOOR
            targets.append(
                (
                    f"panel {row['page']}: p95 {row['vs_floor_p95']:.2f}x the floor page "
                    f"<= {bound}x",
                    row["vs_floor_p95"] <= bound,
                )
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
