"""ids are never reused: AUTOINCREMENT on every SQLite table with a surrogate id

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 10:40:00

Without AUTOINCREMENT, SQLite gives a new row max(id) + 1, so deleting the newest schedule and
creating another hands the new one the old id (and with it the old audit trail, links and log
lines). SQLite cannot add AUTOINCREMENT to a table in place, so each table is rebuilt: create
the new table, copy the rows (ids included: sqlite_sequence starts at the current max id),
drop the old one, rename, recreate its indexes. env.py turns foreign keys off for migrations on
SQLite, so the drop cascades to nothing, and checks them before committing.

PostgreSQL needs nothing: SERIAL ids come from sequences, and a sequence never hands out a value
twice (not even after a rollback), so this revision is a no-op there.

The tables are spelled out as they are at this revision (not imported from the models), so that
later changes to the models cannot change what this migration does.
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
TIME = sa.DateTime(timezone=True)


def tables(metadata: sa.MetaData, autoincrement: bool) -> list[sa.Table]:
    """The tables with a surrogate id, as at revision 0003."""
    options = {"sqlite_autoincrement": autoincrement}
    id_column = lambda: sa.Column("id", sa.Integer(), primary_key=True)  # noqa: E731
    return [
        sa.Table(
            "tenants", metadata, id_column(),
            sa.Column("slug", sa.String(63), nullable=False),
            sa.Column("name", sa.String(200), nullable=False),
            sa.Column("time_zone", sa.String(64), nullable=False),
            sa.Column("max_schedules", sa.Integer(), nullable=True),
            sa.Column("min_interval_seconds", sa.Integer(), nullable=True),
            sa.Column("created_at", TIME, nullable=False),
            sa.UniqueConstraint("slug", name="uq_tenants_slug"),
            **options,
        ),
        sa.Table(
            "users", metadata, id_column(),
            sa.Column("email", sa.String(254), nullable=False),
            sa.Column("password_hash", sa.String(255), nullable=False),
            sa.Column("is_operator", sa.Boolean(), nullable=False),
            sa.Column("created_at", TIME, nullable=False),
            sa.Column("last_login_at", TIME, nullable=True),
            sa.UniqueConstraint("email", name="uq_users_email"),
            **options,
        ),
        sa.Table(
            "workers", metadata, id_column(),
            sa.Column("hostname", sa.String(255), nullable=False),
            sa.Column("pid", sa.Integer(), nullable=False),
            sa.Column("concurrency", sa.Integer(), nullable=False),
            sa.Column("started_at", TIME, nullable=False),
            sa.Column("last_heartbeat_at", TIME, nullable=False),
            sa.Column("stopped_at", TIME, nullable=True),
            **options,
        ),
        sa.Table(
            "audit_events", metadata, id_column(),
            sa.Column("tenant_id", sa.Integer(), nullable=True),
            sa.Column("actor_id", sa.Integer(), nullable=True),
            sa.Column("actor_label", sa.String(254), nullable=False),
            sa.Column("action", sa.String(64), nullable=False),
            sa.Column("object_type", sa.String(32), nullable=False),
            sa.Column("object_id", sa.Integer(), nullable=True),
            sa.Column("object_label", sa.String(200), nullable=True),
            sa.Column("before", JSON, nullable=True),
            sa.Column("after", JSON, nullable=True),
            sa.Column("created_at", TIME, nullable=False),
            sa.ForeignKeyConstraint(["actor_id"], ["users.id"], name="fk_audit_events_actor_id_users", ondelete="SET NULL"),
            sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name="fk_audit_events_tenant_id_tenants", ondelete="CASCADE"),
            sa.Index("ix_audit_events_tenant_history", "tenant_id", "id"),
            **options,
        ),
        sa.Table(
            "memberships", metadata, id_column(),
            sa.Column("user_id", sa.Integer(), nullable=False),
            sa.Column("tenant_id", sa.Integer(), nullable=False),
            sa.Column("role", sa.String(16), nullable=False),
            sa.CheckConstraint("role IN ('admin', 'viewer')", name="ck_memberships_role"),
            sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name="fk_memberships_tenant_id_tenants", ondelete="CASCADE"),
            sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_memberships_user_id_users", ondelete="CASCADE"),
            sa.UniqueConstraint("user_id", "tenant_id", name="uq_memberships_user_id_tenant_id"),
            sa.Index("ix_memberships_tenant_id", "tenant_id"),
            **options,
        ),
        sa.Table(
            "schedules", metadata, id_column(),
            sa.Column("tenant_id", sa.Integer(), nullable=True),
            sa.Column("scope", sa.String(16), nullable=False),
            sa.Column("key", sa.String(64), nullable=False),
            sa.Column("name", sa.String(200), nullable=False),
            sa.Column("job", sa.String(200), nullable=False),
            sa.Column("args", JSON, nullable=False),
            sa.Column("cron", sa.String(200), nullable=False),
            sa.Column("time_zone", sa.String(64), nullable=False),
            sa.Column("active", sa.Boolean(), nullable=False),
            sa.Column("inactive_reason", sa.Text(), nullable=True),
            sa.Column("misfire_policy", sa.String(16), nullable=False),
            sa.Column("overlap_policy", sa.String(16), nullable=False),
            sa.Column("next_run_at", TIME, nullable=True),
            sa.Column("last_run_at", TIME, nullable=True),
            sa.Column("created_by", sa.Integer(), nullable=True),
            sa.Column("created_at", TIME, nullable=False),
            sa.Column("updated_at", TIME, nullable=False),
            sa.CheckConstraint("(scope = 'system' AND tenant_id IS NULL) OR (scope = 'tenant' AND tenant_id IS NOT NULL)", name="ck_schedules_scope_tenant"),
            sa.CheckConstraint("misfire_policy IN ('fire_once', 'fire_all', 'skip')", name="ck_schedules_misfire_policy"),
            sa.CheckConstraint("overlap_policy IN ('allow', 'skip')", name="ck_schedules_overlap_policy"),
            sa.CheckConstraint("scope IN ('tenant', 'system')", name="ck_schedules_scope"),
            sa.ForeignKeyConstraint(["created_by"], ["users.id"], name="fk_schedules_created_by_users", ondelete="SET NULL"),
            sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name="fk_schedules_tenant_id_tenants", ondelete="CASCADE"),
            sa.UniqueConstraint("tenant_id", "key", name="uq_schedules_tenant_id_key"),
            sa.Index("ix_schedules_due", "next_run_at", sqlite_where=sa.text("active")),
            sa.Index("uq_schedules_system_key", "key", unique=True, sqlite_where=sa.text("tenant_id IS NULL")),
            sa.Index("ix_schedules_tenant_name", "tenant_id", "name", "id"),
            **options,
        ),
        sa.Table(
            "runs", metadata, id_column(),
            sa.Column("tenant_id", sa.Integer(), nullable=True),
            sa.Column("schedule_id", sa.Integer(), nullable=True),
            sa.Column("job", sa.String(200), nullable=False),
            sa.Column("args", JSON, nullable=False),
            sa.Column("trigger", sa.String(16), nullable=False),
            sa.Column("scheduled_for", TIME, nullable=False),
            sa.Column("idempotency_key", sa.String(200), nullable=False),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("attempt", sa.Integer(), nullable=False),
            sa.Column("fires_covered", sa.Integer(), nullable=False),
            sa.Column("queued_at", TIME, nullable=False),
            sa.Column("available_at", TIME, nullable=False),
            sa.Column("started_at", TIME, nullable=True),
            sa.Column("finished_at", TIME, nullable=True),
            sa.Column("worker_id", sa.Integer(), nullable=True),
            sa.Column("locked_until", TIME, nullable=True),
            sa.Column("error", sa.Text(), nullable=True),
            sa.Column("output", sa.Text(), nullable=True),
            sa.Column("requested_by", sa.Integer(), nullable=True),
            sa.Column("max_attempts", sa.Integer(), server_default="1", nullable=False),
            sa.CheckConstraint("status IN ('queued', 'running', 'succeeded', 'failed', 'skipped')", name="ck_runs_status"),
            sa.CheckConstraint("\"trigger\" IN ('schedule', 'manual', 'catchup')", name="ck_runs_trigger"),
            sa.ForeignKeyConstraint(["requested_by"], ["users.id"], name="fk_runs_requested_by_users", ondelete="SET NULL"),
            sa.ForeignKeyConstraint(["schedule_id"], ["schedules.id"], name="fk_runs_schedule_id_schedules", ondelete="SET NULL"),
            sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name="fk_runs_tenant_id_tenants", ondelete="CASCADE"),
            sa.ForeignKeyConstraint(["worker_id"], ["workers.id"], name="fk_runs_worker_id_workers", ondelete="SET NULL"),
            sa.UniqueConstraint("idempotency_key", name="uq_runs_idempotency_key"),
            sa.Index("ix_runs_leases", "locked_until", sqlite_where=sa.text("status = 'running'")),
            sa.Index("ix_runs_queue", "available_at", sqlite_where=sa.text("status = 'queued'")),
            sa.Index("ix_runs_schedule_history", "schedule_id", "id"),
            sa.Index("ix_runs_tenant_history", "tenant_id", "id"),
            sa.Index("ix_runs_tenant_status_history", "tenant_id", "status", "id"),
            sa.Index("ix_runs_tenant_trigger_history", "tenant_id", "trigger", "id"),
            sa.Index("uq_runs_schedule_id_scheduled_for", "schedule_id", "scheduled_for", unique=True, sqlite_where=sa.text("\"trigger\" <> 'manual'")),
            **options,
        ),
        sa.Table(
            "login_attempts", metadata, id_column(),
            sa.Column("subject", sa.String(300), nullable=False),
            sa.Column("attempted_at", TIME, nullable=False),
            sa.Index("ix_login_attempts_subject", "subject", "attempted_at"),
            **options,
        ),
    ]


def rebuild(table: sa.Table) -> None:
    """SQLite's way to change a table's definition: new table, copy, drop, rename, indexes."""
    bind = op.get_bind()
    name = table.name
    columns = ", ".join(f'"{column.name}"' for column in table.columns)
    indexes = list(table.indexes)
    for index in indexes:  # index names are global in SQLite: created after the old table goes
        table.indexes.remove(index)
    table.name = f"{name}__rebuilt"
    table.create(bind)
    bind.exec_driver_sql(f'INSERT INTO "{table.name}" ({columns}) SELECT {columns} FROM "{name}"')
    bind.exec_driver_sql(f'DROP TABLE "{name}"')
    bind.exec_driver_sql(f'ALTER TABLE "{table.name}" RENAME TO "{name}"')
    table.name = name
    for index in indexes:
        index.create(bind)


def rebuild_all(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return  # PostgreSQL sequences never reuse a value
    for table in tables(sa.MetaData(), autoincrement):
        rebuild(table)
    problems = op.get_bind().exec_driver_sql("PRAGMA foreign_key_check").all()
    if problems:
        raise RuntimeError(f"foreign keys broken by the rebuild: {problems[:5]}")


def upgrade():
    rebuild_all(autoincrement=True)


def downgrade():
    rebuild_all(autoincrement=False)
