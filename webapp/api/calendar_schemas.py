"""The API's documents of business calendars: what the calendar views answer and what the
OpenAPI document describes. A calendar's input is `CalendarIn` itself (the one validation)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from pydantic import BaseModel, Field

from webapp.api.schemas import PageQuery, Strict
from webapp.calendar_models import Calendar
from webapp.cron import FIRST_YEAR, LAST_YEAR
from webapp.services.calendar_schema import DayOffIn, WindowIn, calendar_document
from webapp.services.calendars import CHANGE_APPLIES, YearView


class DayOffOut(BaseModel):
    from_: date = Field(alias="from")
    to: date = Field(description="The last closed day (the same as `from` for one date)")
    label: str


class WindowOut(BaseModel):
    from_: datetime = Field(alias="from", description="A wall-clock time in the tenant's zone")
    to: datetime = Field(description="Where the window ends (excluded), in the tenant's zone")
    label: str


class CalendarOut(BaseModel):
    """A business calendar: its public holidays (country, subdivision), closed weekdays, own
    closed days and maintenance windows (wall-clock times in `time_zone`, the tenant's)."""

    id: int
    key: str
    name: str
    country: str | None
    subdivision: str | None
    closed_weekdays: list[str]
    days_off: list[DayOffOut]
    windows: list[WindowOut]
    time_zone: str = Field(description="The tenant's zone, which the windows are in")
    created_at: datetime
    updated_at: datetime
    applies: str = Field(
        default=CHANGE_APPLIES,
        description="When a change to the calendar takes effect for the schedules that use it",
    )

    @classmethod
    def of(cls, calendar: Calendar, time_zone: str) -> CalendarOut:
        document: dict[str, Any] = calendar_document(calendar)
        return cls.model_validate(
            {
                **document,
                "id": calendar.id,
                "time_zone": time_zone,
                "created_at": calendar.created_at,
                "updated_at": calendar.updated_at,
            }
        )


class CalendarPage(BaseModel):
    items: list[CalendarOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null: last")


CalendarQuery = PageQuery


class CalendarPatch(Strict):
    """The fields to change; `days_off` or `windows`, when given, replace the calendar's."""

    key: str | None = None
    name: str | None = None
    country: str | None = None
    subdivision: str | None = None
    closed_weekdays: list[str] | str | None = None
    days_off: list[DayOffIn] | None = None
    windows: list[WindowIn] | None = None


class ClosedDayOut(BaseModel):
    day: date
    weekday: str
    reasons: list[str] = Field(
        description="Why it is closed: holidays, the tenant's labels, the closed weekday"
    )


class ClosedDaysOut(BaseModel):
    """A year's closed days with their reasons, and the maintenance windows that touch it."""

    year: int
    days: list[ClosedDayOut]
    windows: list[WindowOut]

    @classmethod
    def of(cls, view: YearView) -> ClosedDaysOut:
        return cls.model_validate(
            {
                "year": view.year,
                "days": [
                    {"day": d.day, "weekday": d.weekday, "reasons": list(d.reasons)}
                    for d in view.days
                ],
                "windows": [{"from": w.start, "to": w.end, "label": w.label} for w in view.windows],
            }
        )


class YearQuery(Strict):
    year: int | None = Field(
        None, ge=FIRST_YEAR, le=LAST_YEAR, description="Default: this year in the tenant's zone"
    )


class IcsImportOut(BaseModel):
    added: int = Field(description="Events added; those the calendar held already are left out")
    calendar: CalendarOut
