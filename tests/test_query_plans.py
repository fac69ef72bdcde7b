"""The panel's statements are served by the indexes made for them, on both databases.

Asserted on the plan, not on time: a partial index is used only when the statement's WHERE
implies the index's predicate, which a harmless-looking rewrite of a condition can break
without any result changing (Next runs scanned and sorted every schedule of the tenant for
that reason: 3.5 ms at 10,000 schedules instead of 0.05). Beyond the statements whose index
is named, no page and no worker round may read runs, schedules or audit events whole."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import event, func, insert, select, text

from tests.conftest import World, make_run
from tests.panel_helpers import Panel
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Notification, Run, Schedule
from webapp.scheduler import claims, outbox, runs
from webapp.scheduler.executor import register_worker
from webapp.services import history


def plan_of(statement: str, parameters: Any, priced_out: bool = True) -> str:
    """The plan of a statement the panel sent, as one text (EXPLAIN on PostgreSQL, EXPLAIN
    QUERY PLAN on SQLite). With `priced_out` (PostgreSQL), scans of the whole table, bitmap
    scans and sorts are priced out, so that the small test table gets the plan that a large one
    would: an index that hands the rows over in order. Without it, the plan the database
    chooses."""
    connection = db.session.connection()
    if connection.dialect.name == "postgresql":
        if priced_out:
            for method in ("seqscan", "bitmapscan", "sort", "incremental_sort"):
                connection.execute(text(f"SET LOCAL enable_{method} = off"))
        rows = connection.exec_driver_sql("EXPLAIN " + statement, parameters).all()
        return "\n".join(row[0] for row in rows)
    rows = connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
    return "\n".join(row[-1] for row in rows)


def statements_of(action: Callable[[], object]) -> list[tuple[str, Any]]:
    """The statements (with their parameters) that `action` sends, but for BEGIN, COMMIT and
    the like."""
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().startswith(("SELECT", "UPDATE", "DELETE", "INSERT", "WITH")):
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


# Tables that grow with a tenant's use; the others hold a row per user, tenant or worker.
GROWING = ("runs", "schedules", "audit_events")


def full_scans(plan: str) -> list[str]:
    """The lines of a plan that read a growing table whole: a sequential scan on PostgreSQL
    (priced out by plan_of, so one appears only where no index can serve), a scan of the table
    or of an index that is not partial on SQLite (a partial index holds only the rows its
    condition names: the queue, the running runs, the flagged schedules)."""
    partial = {
        str(index.name)
        for table in GROWING
        for index in db.metadata.tables[table].indexes
        if index.dialect_options["sqlite"]["where"] is not None
    }
    lines = []
    for line in (line.strip() for line in plan.splitlines()):
        for table in GROWING:
            if line.startswith(f"SCAN {table}"):
                index = line.rsplit(" INDEX ", 1)[-1] if " INDEX " in line else None
                if index not in partial:
                    lines.append(line)
            elif f"Seq Scan on {table} " in line:
                lines.append(line)
    return lines


def test_no_page_or_worker_round_reads_runs_schedules_or_audit_events_whole(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    add_schedules(world.alpha.id, 300)
    due = db.session.scalars(select(Schedule).where(Schedule.key.in_(["s1", "s2", "s3"]))).all()
    for each in due:
        each.next_run_at = utcnow() - timedelta(seconds=5)
    due[0].overdue_since = utcnow() - timedelta(minutes=5)  # recovered once it fires
    runs = {status: make_run(due[1], status, 5) for status in ("succeeded", "failed", "queued")}
    db.session.commit()
    schedule, failed = due[1].id, runs["failed"].id
    panel = Panel(app, world.alice)
    pages = (
        "/",
        "/?q=Schedule",
        "/runs",
        "/runs?status=failed",
        "/runs?trigger=manual",
        f"/runs?schedule={schedule}",
        f"/runs?before={failed}",
        f"/runs/{failed}",
        f"/schedules/{schedule}",
        f"/schedules/{schedule}/edit",
        "/upcoming",
        "/audit",
    )
    sent = statements_of(lambda: [panel.get(page) for page in pages])
    sent += statements_of(lambda: cli.invoke(args=["scheduler", "worker", "--burst"]))
    # The worker fired the three and ran them and the queued one.
    assert db.session.scalar(select(func.count(Run.id)).where(Run.status == "succeeded")) == 5
    plans = {
        statement: plan_of(statement, parameters)
        for statement, parameters in sent
        # An INSERT of values reads nothing; its plan lists the foreign keys' checks for
        # deferred violations, which never run here.
        if not (statement.startswith("INSERT") and "VALUES" in statement)
    }
    scans = {statement: full_scans(plan) for statement, plan in plans.items()}
    assert {statement: lines for statement, lines in scans.items() if lines} == {}


def test_a_batch_of_outcomes_finds_each_run_by_its_primary_key(app: Flask, world: World) -> None:
    """The outcome UPDATE reads the runs of its batch by primary key, never through
    ix_runs_leases (the running runs): PostgreSQL took that index whenever its statistics
    counted few runs running, and the statement's cost then grew with every run finished since
    the table's last vacuum (the index's dead entries, which a bitmap scan visits and never
    marks) and with this worker's running runs times the batch (the join compared each with
    each): 100-190 ms a batch of 400 in the midnight herd instead of 11-17."""
    worker_id = register_worker(db.session(), 4, "thread")
    db.session.commit()
    held = [make_run(world.alpha, "running", worker_id=worker_id) for _ in range(3)]
    finished_at = utcnow()
    rows = [
        {
            "id": run.id,
            "attempt": run.attempt,
            "status": "succeeded",
            "output": "",
            "error": None,
            "error_detail": None,
            "started_at": run.started_at,
            "finished_at": finished_at,
            "available_at": None,
        }
        for run in held
    ]
    # One statement for the batch on PostgreSQL, one per run on SQLite.
    sent = statements_of(lambda: runs.record_outcomes(db.session(), worker_id, rows))
    db.session.commit()
    assert (
        db.session.scalars(select(Run.status).where(Run.worker_id == worker_id)).all()
        == ["succeeded"] * 3
    )
    primary_key = "pk_runs" if db.engine.dialect.name == "postgresql" else "PRIMARY KEY"
    for statement, parameters in sent:
        plan = plan_of(statement, parameters)
        assert "ix_runs_leases" not in plan, plan
        assert primary_key in plan, plan


def generic_plans(action: Callable[[], object]) -> list[str]:
    """PostgreSQL: the generic plans of the statements `action` sends (psycopg prepares a
    statement from its fifth execution, and PostgreSQL may then run it on its generic plan,
    planned without the parameters' values): each prepared here from its first execution, then
    explained with `plan_cache_mode` forcing that plan (the NULL arguments do not matter to it)."""
    connection = db.session.connection()
    raw = connection.connection.driver_connection
    assert raw is not None
    raw.prepare_threshold = 0
    try:
        action()
        raw.prepare_threshold = None  # prepare none of what follows
        connection.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        prepared = connection.execute(
            text(
                "SELECT name, cardinality(parameter_types) FROM pg_prepared_statements"
                " WHERE statement LIKE '%runs%'"
            )
        ).all()
        plans = []
        for name, count in prepared:
            arguments = f"({', '.join(['NULL'] * count)})" if count else ""
            rows = connection.exec_driver_sql(f"EXPLAIN EXECUTE {name}{arguments}").all()
            plans.append("\n".join(row[0] for row in rows))
    finally:
        connection.invalidate()  # its prepared statements go with it
    db.session.rollback()
    return plans


def plans_on_any_plan(action: Callable[[], object]) -> list[str]:
    """The plans of the statements `action` sends: their generic plans on PostgreSQL; on
    SQLite, which keeps no plans, their plans as sent."""
    if db.engine.dialect.name == "postgresql":
        return generic_plans(action)
    plans = [plan_of(statement, parameters) for statement, parameters in statements_of(action)]
    db.session.rollback()
    return plans


def test_a_workers_round_reads_queued_and_running_runs_through_their_indexes_on_any_plan(
    app: Flask, world: World
) -> None:
    """The lease, the reaper and an idle worker's look at the queue (statements every worker
    round sends) read queued and running runs through their partial indexes, also on a prepared
    statement's generic plan, which can use a partial index only if the statement's text names
    the status: PostgreSQL ran about a third of the midnight herd's leases on that plan, which
    then read each tenant's whole history (ix_runs_tenant_history), 182 ms a lease instead of
    46; with 1,000 finished runs a tenant, 620-650 ms instead of 28-32. SQLite keeps no plans:
    there the same indexes are checked on the statements as sent."""
    worker_id = register_worker(db.session(), 4, "thread")
    db.session.commit()
    for tenant in (world.alpha, world.beta):
        for status in ("succeeded", "failed", "queued", "queued"):
            make_run(tenant, status, 5)
    session = db.session()
    queue = ("ix_runs_queue", "ix_runs_tenant_queue")  # the partial indexes of queued runs
    rounds: dict[str, tuple[Callable[[], object], tuple[str, ...]]] = {
        "lease": (
            lambda: runs.lease_runs(session, worker_id, None, timedelta(minutes=5), 10),
            queue,
        ),
        "reap": (lambda: runs.reap_expired(session, utcnow()), ("ix_runs_leases",)),
        "idle": (lambda: claims.any_run_available(session, utcnow()), queue),
    }
    for name, (action, indexes) in rounds.items():
        plans = plans_on_any_plan(action)
        assert plans and all(any(index in plan for index in indexes) for plan in plans), (
            name,
            plans,
        )
        for plan in plans:
            assert "ix_runs_tenant_history" not in plan and "Seq Scan on runs " not in plan, (
                name,
                plan,
            )


def test_the_historys_status_and_trigger_filters_use_their_indexes_on_any_plan(
    app: Flask, world: World
) -> None:
    """The history filtered by a rare status or trigger reads its partial index, also on a
    generic plan: with the value a parameter, that plan would walk the tenant's whole history
    (a tenant with 1,000,000 runs: 110-200 ms a page instead of 1.5-3 ms)."""
    make_run(world.alpha, "succeeded", 5, trigger="schedule")
    make_run(world.alpha, "failed", 5, trigger="manual")
    make_run(world.alpha, "queued", 5)
    session = db.session()
    filters = {
        "ix_runs_tenant_status_history": {"status": "failed"},
        "ix_runs_tenant_trigger_history": {"trigger": "manual"},
    }
    for index, values in filters.items():

        def page(values: dict[str, str] = values) -> object:
            return history.read_history(session, world.alpha.id, values, page_size=50)

        plans = plans_on_any_plan(page)
        assert any(index in plan for plan in plans), (values, plans)
        assert not any("ix_runs_tenant_history" in plan for plan in plans), (values, plans)


def test_a_look_for_an_available_run_reads_the_queue_index_where_most_runs_are_queued(
    app: Flask, world: World
) -> None:
    """The lease window's first question (is any run available?) and an idle worker's read the
    oldest available run through ix_runs_queue, also where the statistics say most runs are
    queued (a herd queued ahead of its time, analysed): asked as EXISTS or a bare LIMIT 1,
    PostgreSQL then read the table from its start, past every finished run: 96 ms for the
    question with 1,000,000 finished runs before 100,000 queued for later (a lease 104-141 ms),
    0.2 ms through the index.
    Planned as the database chooses here, nothing priced out (the lease's own statement is
    not asked: on this small table a scan of it is PostgreSQL's right choice)."""
    worker_id = register_worker(db.session(), 4, "thread")
    now = utcnow()
    finished = {"status": "succeeded", "attempt": 1, "finished_at": now - timedelta(days=1)}
    queued = {"status": "queued", "attempt": 0, "finished_at": None}
    db.session.execute(
        insert(Run),
        [
            {
                "tenant_id": world.alpha.id,
                "job": "demo.echo",
                "args": {},
                "trigger": "manual",
                "scheduled_for": now,
                "idempotency_key": f"plan:{n}",
                "max_attempts": 1,
                "fires_covered": 1,
                "queued_at": now,
                "available_at": now + timedelta(hours=1) if n >= 400 else now - timedelta(days=1),
                **(queued if n >= 400 else finished),
            }
            for n in range(800)
        ],
    )
    db.session.commit()
    connection = db.session.connection()
    postgresql = connection.dialect.name == "postgresql"
    if postgresql:
        connection.execute(text("ANALYZE runs"))
    session = db.session()
    lease = statements_of(lambda: runs.lease_runs(session, worker_id, None, timedelta(hours=1), 9))
    idle = statements_of(lambda: claims.any_run_available(session, now + timedelta(hours=2)))
    window = [sent for sent in lease if sent[0].lstrip().startswith("WITH RECURSIVE available")]
    assert len(window) == (1 if postgresql else 0) and len(idle) == 1
    for statement, parameters in window + idle:
        plan = plan_of(statement, parameters, priced_out=False)
        assert "ix_runs_queue" in plan and full_scans(plan) == [], plan
    db.session.rollback()


def test_a_look_for_a_due_notification_reads_the_outbox_index_where_most_are_pending(
    app: Flask, world: World
) -> None:
    """Each worker's outbox round first asks whether a notification is due: the oldest one,
    through ix_notifications_outbox, also where the statistics say most rows are pending (a
    flood queued, analysed), not a read of the table from its start past every message sent."""
    now = utcnow()
    sent = {"status": "sent", "available_at": now - timedelta(days=1), "sent_at": now}
    pending = {"status": "pending", "available_at": now + timedelta(hours=1), "sent_at": None}
    db.session.execute(
        insert(Notification),
        [
            {
                "tenant_id": world.alpha.id,
                "event": "failure",
                "channel": "email",
                "target": "ops@example.com",
                "subject": "failed",
                "body": "failed\n",
                "idempotency_key": f"plan.{n}",
                "created_at": now,
                **(pending if n >= 400 else sent),
            }
            for n in range(800)
        ],
    )
    db.session.commit()
    if db.engine.dialect.name == "postgresql":
        db.session.execute(text("ANALYZE notifications"))
    later = now + timedelta(hours=2)
    asked = statements_of(lambda: outbox.any_notification_due(db.session(), later))
    assert len(asked) == 1
    plan = plan_of(*asked[0], priced_out=False)
    assert "ix_notifications_outbox" in plan and "Seq Scan" not in plan, plan
    db.session.rollback()
