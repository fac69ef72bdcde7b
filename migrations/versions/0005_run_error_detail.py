"""runs.error_detail: the full traceback of a failed attempt, for operators only

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 10:50:00

"""
from alembic import op
import sqlalchemy as sa

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("error_detail", sa.Text(), nullable=True))


def downgrade():
    # SQLite drops a column by rebuilding the table: keep AUTOINCREMENT (revision 0004).
    with op.batch_alter_table(
        "runs", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_column("error_detail")
