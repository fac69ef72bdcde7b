"""lean run indexes: the idempotency key and history filter indexes hold only the rare runs

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 14:30:00

Every run is written three times (insert, lease, outcome) and each write adds an entry to each
index whose predicate it matches. Most runs are scheduled fires that succeed; these indexes now
leave them out:
- uq_runs_idempotency_key (a unique constraint until now) holds manual runs only: any other
  run's key is `schedule:<id>:<fire time>`, one per fire time, which
  uq_runs_schedule_id_scheduled_for already makes unique. It was the costliest index of a fire.
- ix_runs_tenant_status_history leaves out succeeded runs, ix_runs_tenant_trigger_history the
  schedule's own fires: a filter on those walks ix_runs_tenant_history, where most runs match.
  The predicates are ORs of equalities, the form SQLite matches a query's `status = ?` to.

Old workers keep running: only indexes change, and their inserts (ON CONFLICT DO NOTHING on
any unique index) and updates are the same. PostgreSQL holds the runs table's lock while the
three indexes are built (one scan of the table each); SQLite rebuilds `runs` to drop the
constraint (batch mode copies its rows, ids and other indexes).
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

MANUAL = "\"trigger\" = 'manual'"
RARE_STATUSES = (
    "status = 'queued' OR status = 'running' OR status = 'failed' OR status = 'skipped' "
    "OR status = 'cancelled'"
)
RARE_TRIGGERS = "\"trigger\" = 'manual' OR \"trigger\" = 'catchup' OR \"trigger\" = 'backfill'"


def on_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def history_indexes(status_where: str | None, trigger_where: str | None) -> None:
    for name, column, where in (
        ("ix_runs_tenant_status_history", "status", status_where),
        ("ix_runs_tenant_trigger_history", "trigger", trigger_where),
    ):
        op.drop_index(name, table_name="runs")
        predicate = (
            {}
            if where is None
            else {"postgresql_where": sa.text(where), "sqlite_where": sa.text(where)}
        )
        op.create_index(name, "runs", ["tenant_id", column, "id"], **predicate)


def rebuilding_runs():
    return op.batch_alter_table(
        "runs",
        recreate="auto" if on_postgresql() else "always",
        table_kwargs={"sqlite_autoincrement": True},
    )


def upgrade():
    with rebuilding_runs() as batch:
        batch.drop_constraint("uq_runs_idempotency_key", type_="unique")
    op.create_index(
        "uq_runs_idempotency_key",
        "runs",
        ["idempotency_key"],
        unique=True,
        postgresql_where=sa.text(MANUAL),
        sqlite_where=sa.text(MANUAL),
    )
    history_indexes(RARE_STATUSES, RARE_TRIGGERS)


def downgrade():
    history_indexes(None, None)
    op.drop_index("uq_runs_idempotency_key", table_name="runs")
    with rebuilding_runs() as batch:
        batch.create_unique_constraint("uq_runs_idempotency_key", ["idempotency_key"])
