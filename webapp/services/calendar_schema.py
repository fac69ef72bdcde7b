"""`CalendarIn`: the one validation of a business calendar, for the panel, the API, the import
and the command line; and a calendar as a document (what the API answers, the export writes,
the audit log and the ETag cover)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, NoReturn, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from webapp.calendar_models import MAX_LABEL, Calendar, CalendarEntry
from webapp.cron import FIRST_YEAR, LAST_YEAR
from webapp.cron.business_days import (
    DEFAULT_CLOSED_WEEKDAYS,
    CalendarError,
    check_region,
    parse_weekdays,
)
from webapp.database import bad_text, name_problem
from webapp.services.schema import ScheduleIn, field_errors

# The most entries (closed dates and ranges, maintenance windows) one calendar holds: a range
# counts once, however many days it spans.
MAX_ENTRIES = 1000


class CalendarProblems(ValueError):
    """Bad input for a calendar: field name -> message, shown next to the field."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(f"{field}: {message}" for field, message in self.errors.items()))


def problem(message: str) -> NoReturn:
    raise PydanticCustomError("calendar", "{message}", {"message": message})


def check_label(label: str) -> str:
    label = label.strip()
    if len(label) > MAX_LABEL:
        problem(f"the label is longer than {MAX_LABEL} characters")
    unfit = name_problem(label)
    if unfit:
        problem(f"the label {unfit}")
    return label


def within_years(day: date) -> date:
    if not FIRST_YEAR <= day.year <= LAST_YEAR:
        problem(f"{day.isoformat()} is outside the years {FIRST_YEAR} to {LAST_YEAR}")
    return day


class DayOffIn(BaseModel):
    """Closed days: one date, or a range from `from` to `to` (both included)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    first: date = Field(alias="from")
    last: date | None = Field(default=None, alias="to", description="Omitted: `from` alone")
    label: StrictStr = ""

    _label = field_validator("label")(check_label)

    @field_validator("first", "last")
    @classmethod
    def check_year(cls, day: date | None) -> date | None:
        return None if day is None else within_years(day)

    @model_validator(mode="after")
    def check_order(self) -> Self:
        if self.last is not None and self.last < self.first:
            problem(
                f"the range ends ({self.last.isoformat()}) before it starts "
                f"({self.first.isoformat()})"
            )
        return self

    @property
    def until(self) -> date:
        return self.last or self.first


class WindowIn(BaseModel):
    """A maintenance window: wall-clock times in the tenant's zone, without an offset."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    start: datetime = Field(alias="from")
    end: datetime = Field(alias="to")
    label: StrictStr = ""

    _label = field_validator("label")(check_label)

    @field_validator("start", "end")
    @classmethod
    def check_local(cls, moment: datetime) -> datetime:
        if moment.tzinfo is not None:
            problem("a wall-clock time in the tenant's zone, without an offset (2027-01-10T01:00)")
        within_years(moment.date())
        return moment.replace(second=0, microsecond=0)

    @model_validator(mode="after")
    def check_order(self) -> Self:
        if self.end <= self.start:
            problem(
                f"the window ends ({self.end:%Y-%m-%d %H:%M}) before it starts "
                f"({self.start:%Y-%m-%d %H:%M})"
            )
        return self


class CalendarIn(BaseModel):
    """A calendar as asked for, checked: its key, name, region, closed weekdays and entries."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: StrictStr
    name: StrictStr
    country: StrictStr | None = Field(
        default=None, description="ISO 3166 code of the public holidays; null: none"
    )
    subdivision: StrictStr | None = Field(
        default=None, description="A subdivision of the country (a state, a province)"
    )
    closed_weekdays: list[StrictStr] | StrictStr = Field(
        default=DEFAULT_CLOSED_WEEKDAYS,
        description='Closed days of the week: ["sat", "sun"] (the default) or "sat,sun"',
    )
    days_off: list[DayOffIn] = Field(default_factory=list)
    windows: list[WindowIn] = Field(default_factory=list)

    @classmethod
    def check(cls, data: object) -> Self:
        """The calendar, or CalendarProblems with every problem by field."""
        unstorable = bad_text(data)
        if unstorable:
            raise CalendarProblems(unstorable)
        try:
            asked = cls.model_validate(data)
        except ValidationError as error:
            raise CalendarProblems(field_errors(error, cls)) from None
        entries = len(asked.days_off) + len(asked.windows)
        if entries > MAX_ENTRIES:
            raise CalendarProblems({"days_off": too_many(entries)})
        return asked

    # A calendar's key and name follow a schedule's rules (a schedule names a calendar by key).
    @field_validator("key")
    @classmethod
    def check_key(cls, key: str) -> str:
        return ScheduleIn.check_key(key) or key

    @field_validator("name")
    @classmethod
    def check_name(cls, name: str) -> str:
        return ScheduleIn.check_name(name)

    @field_validator("country")
    @classmethod
    def check_country(cls, country: str | None) -> str | None:
        try:
            return check_region(country, None)[0]
        except CalendarError as error:
            problem(str(error))

    @field_validator("subdivision")
    @classmethod
    def check_subdivision(cls, subdivision: str | None, info: ValidationInfo) -> str | None:
        if "country" not in info.data:
            return subdivision  # the country is wrong: that is what to fix first
        try:
            return check_region(info.data["country"], subdivision)[1]
        except CalendarError as error:
            problem(str(error))

    @field_validator("closed_weekdays")
    @classmethod
    def check_weekdays(cls, days: list[str] | str) -> str:
        try:
            return parse_weekdays(days)
        except CalendarError as error:
            problem(str(error))

    @property
    def weekdays(self) -> str:
        return str(self.closed_weekdays)

    def document(self) -> dict[str, Any]:
        """As calendar_document shows the calendar once stored (its entries in its order)."""
        days_off = sorted(self.days_off, key=lambda d: d.first)
        windows = sorted(self.windows, key=lambda w: w.start)
        return {
            "key": self.key,
            "name": self.name,
            "country": self.country,
            "subdivision": self.subdivision,
            "closed_weekdays": [day for day in self.weekdays.split(",") if day],
            "days_off": [
                {"from": d.first.isoformat(), "to": d.until.isoformat(), "label": d.label}
                for d in days_off
            ],
            "windows": [
                {
                    "from": w.start.isoformat(timespec="minutes"),
                    "to": w.end.isoformat(timespec="minutes"),
                    "label": w.label,
                }
                for w in windows
            ],
        }


def too_many(count: int) -> str:
    return (
        f"{count} dates, ranges and windows: a calendar holds at most {MAX_ENTRIES} "
        "(a range counts once)"
    )


def entry_document(entry: CalendarEntry) -> dict[str, Any]:
    if entry.kind == "day_off":
        assert entry.first_day is not None and entry.last_day is not None
        return {
            "from": entry.first_day.isoformat(),
            "to": entry.last_day.isoformat(),
            "label": entry.label,
        }
    assert entry.window_start is not None and entry.window_end is not None
    return {
        "from": entry.window_start.isoformat(timespec="minutes"),
        "to": entry.window_end.isoformat(timespec="minutes"),
        "label": entry.label,
    }


def calendar_document(calendar: Calendar) -> dict[str, Any]:
    """The calendar as CalendarIn reads it back: the export, the API, the audit log."""
    return {
        "key": calendar.key,
        "name": calendar.name,
        "country": calendar.country,
        "subdivision": calendar.subdivision,
        "closed_weekdays": [day for day in calendar.closed_weekdays.split(",") if day],
        "days_off": [entry_document(e) for e in calendar.entries if e.kind == "day_off"],
        "windows": [entry_document(e) for e in calendar.entries if e.kind == "window"],
    }


def calendar_version(calendar: Calendar) -> str:
    """A digest of what a user may change in the calendar: its ETag."""
    fields = json.dumps([calendar.id, calendar_document(calendar)], sort_keys=True)
    return hashlib.sha256(fields.encode()).hexdigest()[:32]
