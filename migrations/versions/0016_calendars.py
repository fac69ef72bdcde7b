"""calendars and calendar_entries: a tenant's business calendars

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 07:40:00

A calendar names a country and subdivision (public holidays, computed from the `holidays`
package, not stored), its closed weekdays, and its entries: closed days and maintenance windows.
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

SPAN = (
    "(kind = 'day_off' AND first_day IS NOT NULL AND last_day >= first_day"
    " AND window_start IS NULL AND window_end IS NULL)"
    " OR (kind = 'window' AND window_start IS NOT NULL AND window_end > window_start"
    " AND first_day IS NULL AND last_day IS NULL)"
)


def upgrade():
    op.create_table(
        "calendars",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("country", sa.String(length=8), nullable=True),
        sa.Column("subdivision", sa.String(length=64), nullable=True),
        sa.Column("closed_weekdays", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_calendars_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calendars")),
        sa.UniqueConstraint("tenant_id", "key", name=op.f("uq_calendars_tenant_id_key")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "calendar_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("calendar_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=False),
        sa.Column("first_day", sa.Date(), nullable=True),
        sa.Column("last_day", sa.Date(), nullable=True),
        sa.Column("window_start", sa.DateTime(timezone=False), nullable=True),
        sa.Column("window_end", sa.DateTime(timezone=False), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('day_off', 'window')", name=op.f("ck_calendar_entries_kind")),
        sa.CheckConstraint("source IN ('manual', 'ics')", name=op.f("ck_calendar_entries_source")),
        sa.CheckConstraint(SPAN, name=op.f("ck_calendar_entries_span")),
        sa.ForeignKeyConstraint(
            ["calendar_id"],
            ["calendars.id"],
            name=op.f("fk_calendar_entries_calendar_id_calendars"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calendar_entries")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_calendar_entries_calendar", "calendar_entries", ["calendar_id", "id"], unique=False
    )


def downgrade():
    op.drop_index("ix_calendar_entries_calendar", table_name="calendar_entries")
    op.drop_table("calendar_entries")
    op.drop_table("calendars")
