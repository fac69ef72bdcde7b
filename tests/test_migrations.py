"""The schema is made by Alembic alone, and `upgrade head` builds exactly what the models say."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask import Flask
from flask_migrate import downgrade, upgrade
from sqlalchemy import inspect, select, text

from tests.conftest import migrated_app, require_postgres
from webapp.extensions import db

TABLES = {
    "tenants",
    "users",
    "memberships",
    "schedules",
    "runs",
    "audit_events",
    "workers",
    "login_attempts",
}
# Tables added after revision 0003 (whose rows the upgrade test writes).
LATER_TABLES = {"api_tokens", "api_idempotency_keys"}


def schema_differences() -> list[object]:
    with db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, db.metadata))


def test_upgrade_head_matches_the_models(app: Flask) -> None:
    assert schema_differences() == []
    assert TABLES | LATER_TABLES <= set(inspect(db.engine).get_table_names())


def index_definitions(table: str) -> dict[str, str]:
    """Each index of `table` as the database stores it (its CREATE statement)."""
    if db.engine.dialect.name == "postgresql":
        query = "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = :t"
    else:
        query = "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = :t"
    with db.engine.connect() as connection:
        return {name: sql or "" for name, sql in connection.execute(text(query), {"t": table})}


def test_the_partial_indexes_of_runs_are_partial_after_upgrade_head(app: Flask) -> None:
    # compare_metadata ignores predicates: an index built without its predicate would hold
    # every run and be written on every insert, lease and outcome.
    stored = index_definitions("runs")
    for index in db.metadata.tables["runs"].indexes:
        where = index.dialect_options[db.engine.dialect.name]["where"]
        assert ("WHERE" in stored[str(index.name)]) == (where is not None), index.name


def test_constraint_and_index_names_follow_the_convention(app: Flask) -> None:
    inspector = inspect(db.engine)
    runs_indexes = {index["name"] for index in inspector.get_indexes("runs")}
    assert {"uq_runs_schedule_id_scheduled_for", "ix_runs_queue", "ix_runs_leases"} <= runs_indexes
    assert "ix_schedules_due" in {index["name"] for index in inspector.get_indexes("schedules")}
    schedule_uniques = {c["name"] for c in inspector.get_unique_constraints("schedules")}
    assert "uq_schedules_tenant_id_key" in schedule_uniques
    foreign_keys = {fk["name"] for fk in inspector.get_foreign_keys("runs")}
    assert "fk_runs_schedule_id_schedules" in foreign_keys


def test_downgrade_base_removes_every_table_and_upgrade_rebuilds_them(app: Flask) -> None:
    downgrade(revision="base")
    db.engine.dispose()
    assert set(inspect(db.engine).get_table_names()) <= {"alembic_version"}
    upgrade()
    db.engine.dispose()
    assert schema_differences() == []


def test_every_table_with_an_id_never_reuses_one(app: Flask) -> None:
    """compare_metadata does not see AUTOINCREMENT: ask the database itself."""
    with db.engine.connect() as connection:
        for table in TABLES | LATER_TABLES:
            if connection.dialect.name == "sqlite":
                sql = connection.scalar(
                    text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name"),
                    {"name": table},
                )
                assert "AUTOINCREMENT" in sql, table
            else:  # a SERIAL column: a sequence, which never hands out a value twice
                sequence = connection.scalar(
                    text("SELECT pg_get_serial_sequence(:table, 'id')"), {"table": table}
                )
                assert sequence == f"public.{table}_id_seq", table


@pytest.fixture(params=["sqlite", "postgresql"])
def url_at_0003(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[str]:
    """An empty database, for a test to migrate to an older revision."""
    if request.param == "sqlite":
        yield f"sqlite:///{os.path.join(tmp_path, 'old.db')}"
        return
    server = require_postgres(request.getfixturevalue("postgres_server"))
    name = server.create_database(migrated=False)
    try:
        yield server.sqlalchemy_url(name)
    finally:
        server.drop_database(name)


# Rows as a database at revision 0003 holds them (written in SQL: the models are at head).
ROWS_AT_0003 = """
INSERT INTO tenants (id, slug, name, time_zone, created_at) VALUES
  (1, 'alpha', 'Alpha', 'UTC', '2026-01-01 00:00:00'),
  (2, 'beta', 'Beta', 'UTC', '2026-01-01 00:00:00');
INSERT INTO users (id, email, password_hash, is_operator, created_at) VALUES
  (1, 'alice@example.com', 'x', false, '2026-01-01 00:00:00'),
  (2, 'bob@example.com', 'x', false, '2026-01-01 00:00:00');
INSERT INTO memberships (id, user_id, tenant_id, role) VALUES
  (1, 1, 1, 'admin'), (2, 2, 2, 'viewer');
INSERT INTO workers (id, hostname, pid, concurrency, started_at, last_heartbeat_at) VALUES
  (1, 'host-a', 4242, 2, '2026-01-01 00:00:00', '2026-01-01 00:00:00');
INSERT INTO schedules (id, tenant_id, scope, key, name, job, args, cron, time_zone, active,
  misfire_policy, overlap_policy, next_run_at, created_by, created_at, updated_at) VALUES
  (1, 1, 'tenant', 'one', 'One', 'demo.echo', '{"message": "1"}', '0 * * * *', 'UTC', true,
   'fire_once', 'allow', '2026-01-02 00:00:00', 1, '2026-01-01 00:00:00', '2026-01-01 00:00:00'),
  (2, 1, 'tenant', 'two', 'Two', 'demo.echo', '{"message": "2"}', '0 * * * *', 'UTC', false,
   'fire_once', 'allow', NULL, 1, '2026-01-01 00:00:00', '2026-01-01 00:00:00'),
  (3, 2, 'tenant', 'three', 'Three', 'demo.echo', '{"message": "3"}', '0 * * * *', 'UTC', true,
   'skip', 'skip', '2026-01-02 00:00:00', NULL, '2026-01-01 00:00:00', '2026-01-01 00:00:00');
INSERT INTO runs (id, tenant_id, schedule_id, job, args, "trigger", scheduled_for,
  idempotency_key, status, attempt, max_attempts, fires_covered, queued_at, available_at,
  worker_id, error, requested_by) VALUES
  (1, 1, 1, 'demo.echo', '{}', 'schedule', '2026-01-01 01:00:00', 'k1', 'succeeded', 1, 1, 1,
   '2026-01-01 01:00:00', '2026-01-01 01:00:00', 1, NULL, NULL),
  (2, 1, 1, 'demo.echo', '{}', 'manual', '2026-01-01 02:00:00', 'k2', 'failed', 2, 3, 1,
   '2026-01-01 02:00:00', '2026-01-01 02:00:00', 1, 'boom', 1),
  (3, 2, 3, 'demo.echo', '{}', 'schedule', '2026-01-01 03:00:00', 'k3', 'queued', 0, 1, 1,
   '2026-01-01 03:00:00', '2026-01-01 03:00:00', NULL, NULL, NULL);
INSERT INTO audit_events (id, tenant_id, actor_id, actor_label, action, object_type,
  object_id, created_at) VALUES
  (1, 1, 1, 'alice@example.com', 'schedule.created', 'schedule', 1, '2026-01-01 00:00:00'),
  (2, 1, 1, 'alice@example.com', 'schedule.created', 'schedule', 2, '2026-01-01 00:00:00'),
  (3, 2, NULL, 'cli', 'schedule.created', 'schedule', 3, '2026-01-01 00:00:00');
INSERT INTO login_attempts (id, subject, attempted_at) VALUES
  (1, 'ip:203.0.113.5', '2026-01-01 00:00:00');
"""
ID_TABLES = ("tenants", "users", "memberships", "workers", "schedules", "runs", "audit_events")


def snapshot() -> dict[str, list[dict[str, object]]]:
    with db.engine.connect() as connection:
        return {
            table: [
                dict(row._mapping)
                for row in connection.execute(text(f"SELECT * FROM {table} ORDER BY id"))
            ]
            for table in sorted(TABLES)
        }


def as_before(
    after: dict[str, list[dict[str, object]]], before: dict[str, list[dict[str, object]]]
) -> dict[str, list[dict[str, object]]]:
    """`after` with only the columns that existed `before` (later migrations add columns)."""
    return {
        table: [{name: row[name] for name in before[table][0]} for row in rows] if rows else rows
        for table, rows in after.items()
    }


def test_upgrading_a_database_with_rows_keeps_them_and_never_reuses_their_ids(
    url_at_0003: str,
) -> None:
    app = migrated_app(url_at_0003)
    with app.app_context():
        upgrade(revision="0003")
        with db.engine.begin() as connection:
            for statement in ROWS_AT_0003.split(";"):
                if statement.strip():
                    connection.execute(text(statement))
            if connection.dialect.name == "postgresql":  # explicit ids leave sequences behind
                for table in (*ID_TABLES, "login_attempts"):
                    connection.execute(
                        text(f"SELECT setval('{table}_id_seq', (SELECT max(id) FROM {table}))")
                    )
        before = snapshot()
        upgrade()
        db.engine.dispose()
        assert schema_differences() == []
        after = snapshot()
        # Every row, every value (foreign keys were not cascaded or nulled by the rebuild); the
        # columns added since start empty or at their defaults.
        assert as_before(after, before) == before
        assert {row["error_detail"] for row in after["runs"]} == {None}
        assert {row["consecutive_failures"] for row in after["schedules"]} == {0}
        assert {row["abandoned_jobs"] for row in after["workers"]} == {0}
        assert {str(row["notify_emails"]) for row in after["tenants"]} <= {"[]"}
        with db.engine.begin() as connection:
            for table in ID_TABLES:
                connection.execute(
                    text(f"DELETE FROM {table} WHERE id = (SELECT max(id) FROM {table})")
                )
            connection.execute(
                text(
                    "INSERT INTO tenants (slug, name, time_zone, created_at) "
                    "VALUES ('gamma', 'Gamma', 'UTC', '2026-02-01 00:00:00')"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO audit_events (tenant_id, actor_label, action, object_type, "
                    "created_at) VALUES (1, 'cli', 'tenant.created', 'tenant', '2026-02-01')"
                )
            )
            tenant_id = connection.scalar(select(text("max(id)")).select_from(text("tenants")))
            event_id = connection.scalar(select(text("max(id)")).select_from(text("audit_events")))
        assert (tenant_id, event_id) == (3, 4)  # not 2 and 3, the ids of the deleted rows
        db.engine.dispose()
