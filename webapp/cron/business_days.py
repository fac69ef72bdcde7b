"""Business calendars, pure: which local days and times a calendar closes, and why.

A calendar closes a day for three reasons, all told by name: a public holiday of its country
and subdivision (the `holidays` package's name, "Christmas Day (US holidays)"), one of its own
closed days or ranges (their label), a closed weekday ("Saturday"). A maintenance window closes
local wall-clock times, not days ("Database upgrade, 2027-01-10 01:00 to 05:00").

What the scheduler asks (the next slice's tick, preview and Next runs): `closure_at(local)`
(is this local date and time closed, why, and until when for a window), `shift(local,
forward)` (where a closed fire goes under next_business_day or previous_business_day),
`next_open_day(day)` and `previous_open_day(day)`. A year's closed days are computed once per
calendar and year and cached (`BusinessCalendar` is a frozen value: a changed calendar is
another key), as are a country's holidays per year. Nothing here reads the clock or the database.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from types import MappingProxyType

import holidays

from .errors import CronError

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# A business calendar closes on the weekend unless told otherwise.
DEFAULT_CLOSED_WEEKDAYS = "sat,sun"
# How far next_open_day and previous_open_day look before they give up: ten years.
MAX_SEARCH_DAYS = 3660


class CalendarError(CronError):
    """Bad calendar input a user must fix; `field` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def parse_weekdays(text: str | list[str] | tuple[str, ...]) -> str:
    """Closed weekdays as stored: "sat,sun" in week order, from "Sun, sat", ["sat"] or ""."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    wanted = {str(part).strip().lower()[:3] for part in parts if str(part).strip()}
    unknown = sorted(wanted - set(WEEKDAYS))
    if unknown:
        raise CalendarError(
            "closed_weekdays",
            f"{', '.join(unknown)} is not a day of the week: use {', '.join(WEEKDAYS)}",
        )
    return ",".join(day for day in WEEKDAYS if day in wanted)


def weekday_numbers(stored: str) -> frozenset[int]:
    """ "sat,sun" -> {5, 6} (date.weekday() numbers)."""
    return frozenset(WEEKDAYS.index(day) for day in stored.split(",") if day)


@functools.cache
def supported_regions() -> Mapping[str, tuple[str, ...]]:
    """Country code -> its subdivision codes, as the `holidays` package knows them."""
    found = holidays.list_supported_countries()
    return MappingProxyType({code: tuple(subs) for code, subs in sorted(found.items())})


def check_region(country: str | None, subdivision: str | None) -> tuple[str | None, str | None]:
    """A country code and subdivision as the package names them (any case accepted), or
    CalendarError listing the valid ones. No country: no public holidays (and no subdivision)."""
    country = (country or "").strip().upper() or None
    subdivision = (subdivision or "").strip() or None
    regions = supported_regions()
    if country is None:
        if subdivision is not None:
            raise CalendarError("subdivision", "choose a country first: a subdivision is of one")
        return None, None
    if country not in regions:
        raise CalendarError(
            "country",
            f"{country!r} is not a country the holidays package knows; the valid codes: "
            f"{', '.join(code for code in regions if len(code) == 2)}",
        )
    if subdivision is None:
        return country, None
    known = {code.upper(): code for code in regions[country]}
    if subdivision.upper() not in known:
        listed = ", ".join(regions[country]) or "none (this country has no subdivisions)"
        raise CalendarError(
            "subdivision",
            f"{subdivision!r} is not a subdivision of {country}; the valid ones: {listed}",
        )
    return country, known[subdivision.upper()]


def region_label(country: str, subdivision: str | None) -> str:
    return f"{country}-{subdivision}" if subdivision else country


@functools.lru_cache(maxsize=1024)
def public_holidays(country: str, subdivision: str | None, year: int) -> Mapping[date, str]:
    """The package's holidays of a year by date, with its names (several joined by "; ")."""
    found = holidays.country_holidays(country, subdiv=subdivision, years=year)
    return MappingProxyType(dict(sorted(found.items())))


@dataclass(frozen=True)
class DayOff:
    """Closed whole days, `first` to `last` included."""

    first: date
    last: date
    label: str


@dataclass(frozen=True)
class Window:
    """A maintenance window: local wall-clock times, `start` included, `end` excluded."""

    start: datetime
    end: datetime
    label: str

    def describe(self) -> str:
        end = self.end.strftime(
            "%H:%M" if self.end.date() == self.start.date() else "%Y-%m-%d %H:%M"
        )
        span = f"{self.start:%Y-%m-%d %H:%M} to {end}"
        return f"{self.label}, {span}" if self.label else f"Maintenance window, {span}"


@dataclass(frozen=True)
class Closure:
    """Why a local time is closed; `until`: the window's end (None: the whole day is closed)."""

    reason: str
    until: datetime | None = None


@dataclass(frozen=True)
class BusinessCalendar:
    """A calendar's rules as a value: hashable, so its years are cached by it."""

    key: str
    country: str | None = None
    subdivision: str | None = None
    closed_weekdays: frozenset[int] = frozenset({5, 6})
    days_off: tuple[DayOff, ...] = ()
    windows: tuple[Window, ...] = ()

    def __hash__(self) -> int:
        # Computed once: a calendar holds up to 1,000 entries, and every question hashes it
        # (the per-year cache's key).
        if "_hash" not in self.__dict__:
            fields = (self.key, self.country, self.subdivision, self.closed_weekdays)
            object.__setattr__(self, "_hash", hash((*fields, self.days_off, self.windows)))
        value: int = self.__dict__["_hash"]
        return value

    def closed_days(self, year: int) -> Mapping[date, tuple[str, ...]]:
        """The year's closed days in date order, each with its reasons (the most specific
        first: a holiday, the tenant's own label, the weekday)."""
        return year_closures(self, year)

    def closed_reasons(self, day: date) -> tuple[str, ...]:
        return year_closures(self, day.year).get(day, ())

    def is_open(self, day: date) -> bool:
        return not self.closed_reasons(day)

    def window_at(self, local: datetime) -> Window | None:
        """The maintenance window that holds the local wall-clock time, if any (the latest
        ending of overlapping ones)."""
        holding = [w for w in self.windows if w.start <= local < w.end]
        return max(holding, key=lambda w: w.end) if holding else None

    def closure_at(self, local: datetime) -> Closure | None:
        """Whether the local wall-clock time is closed, and why: a closed day first, then a
        maintenance window (with its end, where a shifted run goes)."""
        reasons = self.closed_reasons(local.date())
        if reasons:
            return Closure(reasons[0])
        window = self.window_at(local)
        if window is not None:
            return Closure(window.describe(), until=window.end)
        return None

    def shift(self, local: datetime, forward: bool = True) -> datetime:
        """Where a fire at a closed local time goes: the same local time on the next open day
        (`forward`, the policy next_business_day) or the previous one (previous_business_day);
        out of a maintenance window to the window's end. An open time stays where it is."""
        for _ in range(MAX_SEARCH_DAYS):
            closure = self.closure_at(local)
            if closure is None:
                return local
            if closure.until is not None:
                local = closure.until
                continue
            step = 1 if forward else -1
            day = self.open_day(local.date() + timedelta(days=step), step)
            local = datetime.combine(day, local.time())
        raise CalendarError(
            "calendar", f"calendar {self.key!r} has no open time within {MAX_SEARCH_DAYS} steps"
        )

    def next_open_day(self, day: date) -> date:
        """The first open day on or after `day`."""
        return self.open_day(day, 1)

    def previous_open_day(self, day: date) -> date:
        """The last open day on or before `day`."""
        return self.open_day(day, -1)

    def open_day(self, day: date, step: int) -> date:
        for offset in range(MAX_SEARCH_DAYS):
            candidate = day + timedelta(days=offset * step)
            if self.is_open(candidate):
                return candidate
        raise CalendarError(
            "calendar", f"calendar {self.key!r} has no open day within {MAX_SEARCH_DAYS} days"
        )


@functools.lru_cache(maxsize=4096)
def year_closures(calendar: BusinessCalendar, year: int) -> Mapping[date, tuple[str, ...]]:
    """Every closed day of the year with its reasons; computed once per calendar and year."""
    reasons: dict[date, list[str]] = {}
    if calendar.country:
        region = region_label(calendar.country, calendar.subdivision)
        for day, name in public_holidays(calendar.country, calendar.subdivision, year).items():
            reasons.setdefault(day, []).append(f"{name} ({region} holidays)")
    first_of_year, last_of_year = date(year, 1, 1), date(year, 12, 31)
    for off in calendar.days_off:
        day = max(off.first, first_of_year)
        while day <= min(off.last, last_of_year):
            reasons.setdefault(day, []).append(off.label or "Closed")
            day += timedelta(days=1)
    if calendar.closed_weekdays:
        day = first_of_year
        while day <= last_of_year:
            if day.weekday() in calendar.closed_weekdays:
                reasons.setdefault(day, []).append(WEEKDAY_NAMES[day.weekday()])
            day += timedelta(days=1)
    return MappingProxyType({day: tuple(reasons[day]) for day in sorted(reasons)})
