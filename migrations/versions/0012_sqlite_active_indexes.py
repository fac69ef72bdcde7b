"""SQLite's partial indexes of active schedules: predicate `active = 1`

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 14:00:00

SQLite uses a partial index only when the query's WHERE holds the index's predicate as it is
written, and SQLAlchemy writes a boolean column's condition as `schedules.active = 1` there, so
`WHERE active` was never used: the tick's probe of due schedules and Next runs scanned the
table and sorted it. PostgreSQL simplifies `active = true` to `active` and used its indexes all
along: nothing changes there.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

INDEXES = (
    ("ix_schedules_due", ["next_run_at"]),
    ("ix_schedules_tenant_upcoming", ["tenant_id", "next_run_at", "id"]),
)


def sqlite_predicate(where: str) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for name, columns in INDEXES:
        op.drop_index(name, table_name="schedules")
        op.create_index(name, "schedules", columns, sqlite_where=sa.text(where))


def upgrade():
    sqlite_predicate("active = 1")


def downgrade():
    sqlite_predicate("active")
