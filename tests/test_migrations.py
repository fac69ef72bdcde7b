"""The schema is made by Alembic alone, and `upgrade head` builds exactly what the models say."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask import Flask
from flask_migrate import downgrade, upgrade
from sqlalchemy import inspect

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


def schema_differences() -> list[object]:
    with db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, db.metadata))


def test_upgrade_head_matches_the_models(app: Flask) -> None:
    assert schema_differences() == []
    assert TABLES <= set(inspect(db.engine).get_table_names())


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
