"""fairness: per-tenant caps, jitter, backfill and cancelled runs

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 19:30:00

Expand only: every new column is nullable, and the two widened vocabularies (a run's status
gains `cancelled`, its trigger `backfill`) accept everything the previous release writes, so
its workers keep running while this is applied. On PostgreSQL the new checks are added NOT
VALID and validated afterwards (validation does not block writes); SQLite cannot change a check
in place, so `runs` is rebuilt there (batch mode copies its rows, ids and indexes).
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime(timezone=True)
OLD_STATUSES = "status IN ('queued', 'running', 'succeeded', 'failed', 'skipped')"
NEW_STATUSES = "status IN ('queued', 'running', 'succeeded', 'failed', 'skipped', 'cancelled')"
OLD_TRIGGERS = "\"trigger\" IN ('schedule', 'manual', 'catchup')"
NEW_TRIGGERS = "\"trigger\" IN ('schedule', 'manual', 'catchup', 'backfill')"


def on_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def replace_run_checks(batch, statuses: str, triggers: str) -> None:
    """In a batch on `runs`: SQLite rebuilds the table once for the columns and the checks."""
    if on_postgresql():
        for name, condition in (("ck_runs_status", statuses), ("ck_runs_trigger", triggers)):
            op.drop_constraint(op.f(name), "runs", type_="check")
            op.create_check_constraint(op.f(name), "runs", condition, postgresql_not_valid=True)
            op.execute(f"ALTER TABLE runs VALIDATE CONSTRAINT {name}")
        return
    batch.drop_constraint(op.f("ck_runs_status"), type_="check")
    batch.drop_constraint(op.f("ck_runs_trigger"), type_="check")
    batch.create_check_constraint(op.f("ck_runs_status"), statuses)
    batch.create_check_constraint(op.f("ck_runs_trigger"), triggers)


def rebuilding_runs():
    return op.batch_alter_table(
        "runs",
        recreate="auto" if on_postgresql() else "always",
        table_kwargs={"sqlite_autoincrement": True},
    )


def upgrade():
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("max_running", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("jitter_seconds", sa.Integer(), nullable=True))
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("jitter_seconds", sa.Integer(), nullable=True))
    with rebuilding_runs() as batch:
        batch.add_column(sa.Column("cancel_requested_at", UTC_DATETIME, nullable=True))
        batch.add_column(sa.Column("cancelled_by", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("cancelled_at", UTC_DATETIME, nullable=True))
        batch.create_foreign_key(
            op.f("fk_runs_cancelled_by_users"), "users", ["cancelled_by"], ["id"], ondelete="SET NULL"
        )
        replace_run_checks(batch, NEW_STATUSES, NEW_TRIGGERS)
    op.create_index(
        "ix_runs_tenant_queue",
        "runs",
        ["tenant_id", "available_at", "id"],
        postgresql_where=sa.text("status = 'queued'"),
        sqlite_where=sa.text("status = 'queued'"),
    )


def downgrade():
    op.drop_index("ix_runs_tenant_queue", table_name="runs")
    # The narrower vocabularies cannot hold what this revision allowed: those runs become
    # what the previous release understands (a cancelled run failed, a backfill a manual run).
    op.execute("UPDATE runs SET status = 'failed' WHERE status = 'cancelled'")
    op.execute("UPDATE runs SET \"trigger\" = 'manual' WHERE \"trigger\" = 'backfill'")
    with rebuilding_runs() as batch:
        replace_run_checks(batch, OLD_STATUSES, OLD_TRIGGERS)
        batch.drop_constraint(op.f("fk_runs_cancelled_by_users"), type_="foreignkey")
        batch.drop_column("cancelled_at")
        batch.drop_column("cancelled_by")
        batch.drop_column("cancel_requested_at")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("jitter_seconds")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("jitter_seconds")
        batch.drop_column("max_running")
