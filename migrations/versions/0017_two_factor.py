"""two-factor login: users' TOTP secret, recovery codes, a tenant's "require two-factor for admins"

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 08:40:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade():
    # Nullable or with a server default: the previous release keeps writing these tables.
    with op.batch_alter_table("users", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("totp_secret", sa.String(32), nullable=True))
        batch.add_column(sa.Column("totp_last_step", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("two_factor_enabled_at", UTC_DATETIME, nullable=True))
    with op.batch_alter_table("tenants", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(
            sa.Column(
                "require_two_factor_admins",
                sa.Boolean(),
                nullable=False,
                server_default=sa.false(),
            )
        )
    op.create_table(
        "recovery_codes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("code_hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_recovery_codes_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_recovery_codes")),
    )
    op.create_index(op.f("ix_recovery_codes_user_id"), "recovery_codes", ["user_id"])


def downgrade():
    op.drop_index(op.f("ix_recovery_codes_user_id"), table_name="recovery_codes")
    op.drop_table("recovery_codes")
    with op.batch_alter_table("tenants", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("require_two_factor_admins")
    with op.batch_alter_table("users", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("two_factor_enabled_at")
        batch.drop_column("totp_last_step")
        batch.drop_column("totp_secret")
