"""schedules.calendar_id and calendar_policy: a schedule's business calendar and its policy

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 10:45:00

Expand only: `calendar_id` is nullable and `calendar_policy` has a server default, so the
previous release keeps writing schedules while this is applied (its rows get no calendar and
the policy `skip`, which does nothing without one). A calendar still named by a schedule cannot
be deleted: the foreign key's NO ACTION, checked at the end of the statement, so that deleting a
tenant still removes its schedules and calendars together (the services refuse it first, naming
the schedules). SQLite cannot add a foreign key or a check in place: `schedules` is rebuilt there
(batch mode copies its rows, ids and indexes).
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

POLICIES = "calendar_policy IN ('skip', 'next_business_day', 'previous_business_day')"


def rebuilding_schedules():
    sqlite = op.get_bind().dialect.name == "sqlite"
    return op.batch_alter_table(
        "schedules",
        recreate="always" if sqlite else "auto",
        table_kwargs={"sqlite_autoincrement": True},
    )


def upgrade():
    with rebuilding_schedules() as batch:
        batch.add_column(sa.Column("calendar_id", sa.Integer(), nullable=True))
        batch.add_column(
            sa.Column("calendar_policy", sa.String(32), nullable=False, server_default="skip")
        )
        batch.create_foreign_key(
            op.f("fk_schedules_calendar_id_calendars"),
            "calendars",
            ["calendar_id"],
            ["id"],
        )
        batch.create_check_constraint(op.f("ck_schedules_calendar_policy"), POLICIES)


def downgrade():
    with rebuilding_schedules() as batch:
        batch.drop_constraint(op.f("ck_schedules_calendar_policy"), type_="check")
        batch.drop_constraint(op.f("fk_schedules_calendar_id_calendars"), type_="foreignkey")
        batch.drop_column("calendar_policy")
        batch.drop_column("calendar_id")
