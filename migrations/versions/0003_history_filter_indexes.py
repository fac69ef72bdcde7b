"""indexes for the history filters and the schedules list

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 17:40:00

"""
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade():
    op.create_index("ix_runs_tenant_status_history", "runs", ["tenant_id", "status", "id"])
    op.create_index("ix_runs_tenant_trigger_history", "runs", ["tenant_id", "trigger", "id"])
    op.create_index("ix_schedules_tenant_name", "schedules", ["tenant_id", "name", "id"])


def downgrade():
    op.drop_index("ix_schedules_tenant_name", table_name="schedules")
    op.drop_index("ix_runs_tenant_trigger_history", table_name="runs")
    op.drop_index("ix_runs_tenant_status_history", table_name="runs")
