"""sign_in_links: one-time sign-in links, stored as the hash of their token

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 10:40:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade():
    op.create_table(
        "sign_in_links",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("return_url", sa.String(length=2000), nullable=True),
        sa.Column("for_member", sa.Boolean(), nullable=False),
        sa.Column("created_by_label", sa.String(length=254), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("expires_at", UTC_DATETIME, nullable=False),
        sa.Column("used_at", UTC_DATETIME, nullable=True),
        sa.CheckConstraint("role IN ('admin', 'viewer')", name=op.f("ck_sign_in_links_role")),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_sign_in_links_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sign_in_links")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_sign_in_links_token_hash")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_sign_in_links_tenant_id"), "sign_in_links", ["tenant_id"])
    op.create_index(op.f("ix_sign_in_links_expires_at"), "sign_in_links", ["expires_at"])


def downgrade():
    op.drop_index(op.f("ix_sign_in_links_expires_at"), table_name="sign_in_links")
    op.drop_index(op.f("ix_sign_in_links_tenant_id"), table_name="sign_in_links")
    op.drop_table("sign_in_links")
