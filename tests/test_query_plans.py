"""The panel's statements are served by the indexes made for them, on both databases.

Asserted on the plan, not on time: a partial index is used only when the statement's WHERE
implies the index's predicate, which a harmless-looking rewrite of a condition can break
without any result changing (Next runs scanned and sorted every schedule of the tenant for
that reason: 3.5 ms at 10,000 schedules instead of 0.05)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from flask import Flask
from sqlalchemy import event, insert, text

from tests.conftest import World
from tests.panel_helpers import Panel
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Schedule
from webapp.scheduler import claims


def plan_of(statement: str, parameters: Any) -> str:
    """The plan of a statement the panel sent, as one text (EXPLAIN on PostgreSQL, EXPLAIN
    QUERY PLAN on SQLite). On PostgreSQL, scans of the whole table, bitmap scans and sorts are
    priced out, so that the small test table gets the plan that a large one would: an index
    that hands the rows over in order."""
    connection = db.session.connection()
    if connection.dialect.name == "postgresql":
        for method in ("seqscan", "bitmapscan", "sort", "incremental_sort"):
            connection.execute(text(f"SET LOCAL enable_{method} = off"))
        rows = connection.exec_driver_sql("EXPLAIN " + statement, parameters).all()
        return "\n".join(row[0] for row in rows)
    rows = connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
    return "\n".join(row[-1] for row in rows)


def statements_of(action: Callable[[], object]) -> list[tuple[str, Any]]:
    """The SELECT statements (with their parameters) that `action` sends."""
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().startswith("SELECT"):
            sent.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        action()
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    return sent


def add_schedules(tenant_id: int, count: int) -> None:
    """`count` schedules, one in seven paused, firing at every minute of the next hour."""
    now = utcnow()
    db.session.execute(
        insert(Schedule),
        [
            {
                "tenant_id": tenant_id,
                "scope": "tenant",
                "key": f"s{n}",
                "name": f"Schedule {n}",
                "job": "demo.echo",
                "args": {"message": "m"},
                "cron": f"{n % 60} * * * *",
                "time_zone": "UTC",
                "active": n % 7 != 0,
                "next_run_at": now + timedelta(minutes=n % 60 + 1),
            }
            for n in range(count)
        ],
    )
    db.session.commit()
    # The planner's row counts, as autovacuum would have them for a table of this size.
    db.session.execute(text("ANALYZE schedules"))
    db.session.commit()


def test_next_runs_loads_schedules_through_the_upcoming_index(app: Flask, world: World) -> None:
    add_schedules(world.alpha.id, 300)
    panel = Panel(app, world.alice)
    sent = statements_of(lambda: panel.get("/upcoming"))
    loads = [(sql, params) for sql, params in sent if "ORDER BY schedules.next_run_at" in sql]
    assert loads, "Next runs sent no statement ordering schedules by next_run_at"
    for statement, parameters in loads:
        plan = plan_of(statement, parameters)
        assert "ix_schedules_tenant_upcoming" in plan, plan


def test_the_tick_finds_due_schedules_through_the_due_index(app: Flask, world: World) -> None:
    add_schedules(world.alpha.id, 300)
    now = utcnow()
    session = db.session()
    sent = statements_of(
        lambda: (
            claims.earliest_next_run(session),
            session.execute(claims.DUE, {"now": now, "horizon": now, "limit": 100}).all(),
        )
    )
    assert len(sent) == 2
    for statement, parameters in sent:
        plan = plan_of(statement, parameters)
        assert "ix_schedules_due" in plan, plan
