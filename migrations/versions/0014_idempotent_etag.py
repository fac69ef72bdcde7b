"""The ETag of an idempotent POST's answer, replayed with it

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 04:30:00

A retry with the same Idempotency-Key answered the first body and Location but not the ETag
the first answer carried: a client that retried a create could not send If-Match.
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade():
    # Nullable: a worker or panel of the previous release keeps writing rows while this runs.
    with op.batch_alter_table("api_idempotency_keys") as batch:
        batch.add_column(sa.Column("etag", sa.String(64), nullable=True))


def downgrade():
    with op.batch_alter_table("api_idempotency_keys") as batch:
        batch.drop_column("etag")
