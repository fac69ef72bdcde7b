"""two-factor login: users.totp_secret wide enough for a sealed (encrypted) secret

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 11:00:00

Secrets stored in plain text before stay readable (services/sealing.py reads a value without
its prefix as it is) and are sealed at their next use; nothing here needs the app's key.
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("users", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.alter_column(
            "totp_secret", existing_type=sa.String(32), type_=sa.String(255), existing_nullable=True
        )


def downgrade():
    # A sealed secret does not fit the old width: those users set two-factor login up again.
    op.execute(
        sa.text(
            "DELETE FROM recovery_codes WHERE user_id IN "
            "(SELECT id FROM users WHERE length(totp_secret) > 32)"
        )
    )
    op.execute(
        sa.text(
            "UPDATE users SET totp_secret = NULL, totp_last_step = NULL, "
            "two_factor_enabled_at = NULL WHERE length(totp_secret) > 32"
        )
    )
    with op.batch_alter_table("users", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.alter_column(
            "totp_secret", existing_type=sa.String(255), type_=sa.String(32), existing_nullable=True
        )
