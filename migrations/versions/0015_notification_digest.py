"""notifications.event: `digest`, what a tenant's hourly limit held back

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 05:20:00

A tenant sends at most SCHEDULER_NOTIFY_MAX_PER_HOUR notifications an hour; the ones over it are
written `suppressed`, and one `digest` row per recipient says how many, at the hour's end.
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

BEFORE = "event IN ('failure', 'recovery', 'overdue', 'paused')"
AFTER = "event IN ('failure', 'recovery', 'overdue', 'paused', 'digest')"


def events(allowed: str) -> None:
    with op.batch_alter_table(
        "notifications", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_constraint(op.f("ck_notifications_event"), type_="check")
        batch_op.create_check_constraint(op.f("ck_notifications_event"), allowed)


def upgrade():
    events(AFTER)


def downgrade():
    op.execute("DELETE FROM notifications WHERE event = 'digest'")
    events(BEFORE)
