"""workers.kind: thread, process, celery-sender or celery-worker

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06 04:30:00

The workers page says what each row is, `scheduler health` looks for a Celery worker's
heartbeat when runs are sent to Celery, and a run held by a Celery sender waits for a Celery
worker. Rows written before (and by a worker of the previous release during a rolling
upgrade) keep NULL: the page shows "-".
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

KINDS = "kind IN ('thread', 'process', 'celery-sender', 'celery-worker')"


def upgrade():
    with op.batch_alter_table(
        "workers", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(length=16), nullable=True))
        batch_op.create_check_constraint(op.f("ck_workers_kind"), KINDS)


def downgrade():
    with op.batch_alter_table(
        "workers", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_constraint(op.f("ck_workers_kind"), type_="check")
        batch_op.drop_column("kind")
