"""The tables of business calendars: a tenant's named calendars and their entries.

Beside `models.py` (which is at its size bound) and part of the same foundation: the names are
a public contract as there. A calendar's public holidays are not stored: they come from the
`holidays` package by its country and subdivision (`cron.business_days`)."""

from __future__ import annotations

from datetime import date, datetime
from typing import TYPE_CHECKING, Literal, get_args

from sqlalchemy import CheckConstraint, Date, DateTime, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from webapp.database import UTCDateTime, utcnow
from webapp.models import MAX_SCHEDULE_NAME, NEVER_REUSE_IDS, one_of

if TYPE_CHECKING:
    from webapp.extensions import Base as Model
else:
    from webapp.extensions import db

    Model = db.Model

# day_off: closed whole days, first_day to last_day (both included); window: a maintenance
# window, window_start to window_end (end excluded), wall-clock times in the tenant's zone.
EntryKind = Literal["day_off", "window"]
# Where an entry came from: typed (the panel, the API, the command line, an import) or an .ics.
EntrySource = Literal["manual", "ics"]
ENTRY_KINDS: tuple[EntryKind, ...] = get_args(EntryKind)
ENTRY_SOURCES: tuple[EntrySource, ...] = get_args(EntrySource)
MAX_LABEL = 200


class Calendar(Model):
    """A tenant's business calendar: its public holidays (country, subdivision), its closed
    weekdays and its entries. `key` is what a schedule names it by."""

    __tablename__ = "calendars"
    __table_args__ = (UniqueConstraint("tenant_id", "key"), NEVER_REUSE_IDS)

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(MAX_SCHEDULE_NAME))
    # ISO 3166 country code and subdivision as the `holidays` package names them; NULL: none.
    country: Mapped[str | None] = mapped_column(String(8))
    subdivision: Mapped[str | None] = mapped_column(String(64))
    # Closed days of the week, comma-separated in week order ("sat,sun"); empty: none.
    closed_weekdays: Mapped[str] = mapped_column(String(32), default="sat,sun")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    entries: Mapped[list[CalendarEntry]] = relationship(
        back_populates="calendar",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="(CalendarEntry.kind, CalendarEntry.first_day, CalendarEntry.window_start, "
        "CalendarEntry.id)",
    )


class CalendarEntry(Model):
    """A calendar's own closed days (a date or a range) or maintenance window, with its label."""

    __tablename__ = "calendar_entries"
    __table_args__ = (
        Index("ix_calendar_entries_calendar", "calendar_id", "id"),
        CheckConstraint(one_of("kind", ENTRY_KINDS), name="kind"),
        CheckConstraint(one_of("source", ENTRY_SOURCES), name="source"),
        CheckConstraint(
            "(kind = 'day_off' AND first_day IS NOT NULL AND last_day >= first_day"
            " AND window_start IS NULL AND window_end IS NULL)"
            " OR (kind = 'window' AND window_start IS NOT NULL AND window_end > window_start"
            " AND first_day IS NULL AND last_day IS NULL)",
            name="span",
        ),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    calendar_id: Mapped[int] = mapped_column(ForeignKey("calendars.id", ondelete="CASCADE"))
    kind: Mapped[EntryKind] = mapped_column(String(16))
    source: Mapped[EntrySource] = mapped_column(String(16), default="manual")
    label: Mapped[str] = mapped_column(String(MAX_LABEL), default="")
    first_day: Mapped[date | None] = mapped_column(Date)
    last_day: Mapped[date | None] = mapped_column(Date)
    # Wall-clock times in the tenant's zone, without an offset (a window stays at 01:00 local
    # whatever the offset that day).
    window_start: Mapped[datetime | None] = mapped_column(DateTime(timezone=False))
    window_end: Mapped[datetime | None] = mapped_column(DateTime(timezone=False))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    calendar: Mapped[Calendar] = relationship(back_populates="entries")
