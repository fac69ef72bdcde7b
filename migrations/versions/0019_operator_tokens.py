"""operator tokens: api_tokens.kind ('tenant' or 'operator'), tenant_id NULL for an operator's

Revision ID: 0019
Revises: 0017
Create Date: 2026-12-06 10:40:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0017"
branch_labels = None
depends_on = None

KIND_TENANT = "(kind = 'tenant' AND tenant_id IS NOT NULL) OR (kind = 'operator' AND tenant_id IS NULL)"


def upgrade():
    # With a server default: the previous release keeps inserting tenant tokens without it.
    with op.batch_alter_table("api_tokens", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(
            sa.Column("kind", sa.String(length=16), nullable=False, server_default="tenant")
        )
        batch.alter_column("tenant_id", existing_type=sa.Integer(), nullable=True)
        batch.create_check_constraint(op.f("ck_api_tokens_kind"), "kind IN ('tenant', 'operator')")
        batch.create_check_constraint(op.f("ck_api_tokens_kind_tenant"), KIND_TENANT)


def downgrade():
    op.execute("DELETE FROM api_tokens WHERE kind = 'operator'")
    with op.batch_alter_table("api_tokens", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_constraint(op.f("ck_api_tokens_kind_tenant"), type_="check")
        batch.drop_constraint(op.f("ck_api_tokens_kind"), type_="check")
        batch.alter_column("tenant_id", existing_type=sa.Integer(), nullable=False)
        batch.drop_column("kind")
