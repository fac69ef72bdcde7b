"""The five fields of a cron expression: parsed, checked and compiled into the value sets that
fire-time searches match against. No time zone here: the same fields serve every zone."""

from __future__ import annotations

import calendar
import re
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache
from itertools import pairwise

from .errors import CronError
from .words import join_words

ALIASES: Mapping[str, str] = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

# The width of schedules.cron: the one limit, checked on the expression as stored.
MAX_EXPRESSION_LENGTH = 200
# A schedule must fire at least once in any five-year window (see _check_fires_often_enough).
MAX_GAP_DAYS = 5 * 365 + 2

FIELDS_HINT = "minute hour day-of-month month day-of-week"
MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
ONE_MINUTE = timedelta(minutes=1)
_NUMBER = re.compile(r"[0-9]{1,9}")


@dataclass(frozen=True)
class FieldKind:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    names_hint: str = ""


FIELD_KINDS = (
    FieldKind("minute", 0, 59),
    FieldKind("hour", 0, 23),
    FieldKind("day-of-month", 1, 31),
    FieldKind("month", 1, 12, MONTH_NAMES, "a month name (jan-dec)"),
    FieldKind("day-of-week", 0, 7, DAY_NAMES, "a day name (sun-sat)"),
)


@dataclass(frozen=True)
class CronFields:
    """A checked expression compiled into value sets; which wall times and days it matches.

    Equality and hashing use ``expression`` only; the other fields derive from it.
    """

    expression: str  # single spaces; an alias stays an alias, in lower case
    fields: tuple[str, ...] = field(compare=False)  # the five fields, aliases expanded
    minutes: tuple[int, ...] = field(compare=False, repr=False)
    hours: tuple[int, ...] = field(compare=False, repr=False)
    days: frozenset[int] = field(compare=False, repr=False)
    months: frozenset[int] = field(compare=False, repr=False)
    weekdays: frozenset[int] = field(compare=False, repr=False)  # 0 = Sunday; 7 folded into 0
    # Vixie cron: when day-of-month or day-of-week starts with '*', a day must match both.
    days_and: bool = field(compare=False, repr=False)
    # Debian cron: a job whose minute or hour field starts with '*' is a wildcard job, which
    # the DST rules treat differently from a fixed-time job.
    wildcard: bool = field(compare=False)
    # Minutes since local midnight at which the job fires on a matching day, ascending.
    day_minutes: tuple[int, ...] = field(compare=False, repr=False)
    # Matching days of a month, indexed by [weekday of the 1st (0 = Sunday)][length - 28].
    month_days: tuple[tuple[tuple[int, ...], ...], ...] = field(compare=False, repr=False)

    def matches_date(self, day: date) -> bool:
        """Whether the job runs on this local calendar day (months and both day fields)."""
        if day.month not in self.months:
            return False
        first_weekday, length = calendar.monthrange(day.year, day.month)
        return day.day in self.month_days[(first_weekday + 1) % 7][length - 28]

    def matches_wall_time(self, wall: datetime) -> bool:
        """Whether a naive local wall-clock time matches all five fields."""
        return wall.minute in self.minutes and wall.hour in self.hours and self.matches_date(wall)

    def matching_wall_times(self, start: datetime, end: datetime) -> list[datetime]:
        """The naive wall times in [start, end) that match all five fields, minute by minute
        (meant for the short spans of a clock change)."""
        matching = []
        wall_time = start
        while wall_time < end:
            if self.matches_wall_time(wall_time):
                matching.append(wall_time)
            wall_time += ONE_MINUTE
        return matching


@lru_cache(maxsize=4096)
def parse_fields(expression: str) -> CronFields:
    """Parses and checks the five fields of an expression with single spaces; CronError with
    an actionable message on any defect. Cached: checked once per expression, whatever the zone.
    """
    if not expression:
        raise CronError("cron expression is empty")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CronError(f"cron expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    parts = expression.split(" ")
    if parts[0].startswith("@"):
        fields = _expand_alias(parts)
        expression = parts[0].lower()
    else:
        fields = parts
        if len(fields) < 5:
            raise CronError(f"too few fields: expected 5 ({FIELDS_HINT}), got {len(fields)}")
        if len(fields) > 5:
            raise CronError(
                f"too many fields: expected 5 ({FIELDS_HINT}), got {len(fields)}; "
                "seconds, years and commands are not supported"
            )
    minutes, hours, days, months, weekdays = (
        _parse_field(text, kind) for text, kind in zip(fields, FIELD_KINDS, strict=True)
    )
    if 7 in weekdays:  # day-of-week 7 is Sunday too
        weekdays = (weekdays - {7}) | {0}
    days_and = fields[2].startswith("*") or fields[4].startswith("*")
    month_days = _month_day_table(days, weekdays, days_and)
    _check_fires_often_enough(days, months, month_days)
    return CronFields(
        expression=expression,
        fields=tuple(fields),
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=days,
        months=months,
        weekdays=weekdays,
        days_and=days_and,
        wildcard=fields[0].startswith("*") or fields[1].startswith("*"),
        day_minutes=tuple(h * 60 + m for h in sorted(hours) for m in sorted(minutes)),
        month_days=month_days,
    )


def _expand_alias(parts: list[str]) -> list[str]:
    alias = parts[0].lower()
    if alias == "@reboot":
        raise CronError("@reboot is not supported: a schedule needs times to fire")
    if alias not in ALIASES:
        raise CronError(
            f"unknown alias '{alias}': use @hourly, @daily, @weekly, @monthly, @yearly or @annually"
        )
    if len(parts) > 1:
        raise CronError(f"{alias} stands alone: remove '{' '.join(parts[1:])}'")
    return ALIASES[alias].split(" ")


def _parse_field(text: str, kind: FieldKind) -> frozenset[int]:
    """The set of values one field selects, Vixie-style; raises CronError on any defect."""
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"{kind.name} field '{text}' has an empty list item")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not _NUMBER.fullmatch(step_text) or int(step_text) == 0:
                raise CronError(
                    f"{kind.name} step in '{item}' must be a whole number of at least 1"
                )
            step = int(step_text)
        if base == "*":
            low, high = kind.low, kind.high
        elif "-" in base:
            low_text, _, high_text = base.partition("-")
            if not low_text or not high_text:
                raise CronError(f"{kind.name} range '{base}' is missing a bound")
            low, high = _value(low_text, kind), _value(high_text, kind)
            if low > high:
                raise CronError(
                    f"{kind.name} range '{base}' is backwards: write the smaller value first"
                )
        else:
            low = _value(base, kind)
            # 'N/step' means 'N-max/step', as in cronie, croniter and crondst.
            high = kind.high if slash else low
        values.update(range(low, high + 1, step))
    return frozenset(values)


def _value(text: str, kind: FieldKind) -> int:
    if _NUMBER.fullmatch(text):
        number = int(text)
        if not kind.low <= number <= kind.high:
            raise CronError(f"{kind.name} {number} is out of range {kind.low}-{kind.high}")
        return number
    if text.lower() in kind.names:  # names are case-insensitive, as in cron
        return kind.names.index(text.lower()) + (1 if kind.name == "month" else 0)
    if kind.names:
        raise CronError(f"{kind.name} '{text}' is not a number or {kind.names_hint}")
    raise CronError(f"{kind.name} '{text}' is not a number")


@lru_cache(maxsize=1024)
def _month_day_table(
    days: frozenset[int], weekdays: frozenset[int], days_and: bool
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Matching days of a month for each (weekday of the 1st, month length) combination.

    Cached: many expressions share their day fields (a tick may meet thousands of distinct
    expressions, and compiles each).
    """
    table = []
    for first_weekday in range(7):
        on_weekday: set[int] = set()
        for weekday in weekdays:
            on_weekday |= _DAYS_ON_WEEKDAY[first_weekday][weekday]
        # Vixie cron: if either day field starts with '*' both must match, else either.
        full = tuple(sorted(days & on_weekday if days_and else days | on_weekday))
        table.append(
            (
                full[: bisect_right(full, 28)],
                full[: bisect_right(full, 29)],
                full[: bisect_right(full, 30)],
                full,
            )
        )
    return tuple(table)


# The days 1-31 of a month whose 1st is on weekday `first` (0 = Sunday) that fall on `weekday`.
_DAYS_ON_WEEKDAY = tuple(
    tuple(
        frozenset(day for day in range(1, 32) if (first + day - 1) % 7 == weekday)
        for weekday in range(7)
    )
    for first in range(7)
)


def _check_fires_often_enough(
    days: frozenset[int],
    months: frozenset[int],
    month_days: tuple[tuple[tuple[int, ...], ...], ...],
) -> None:
    """Reject schedules that never fire, or that can go more than five years without firing.

    Checked structurally, without the clock: over 2001-2028, a full 28-year cycle of the
    calendar (weekdays and leap years repeat every 28 years from 1901 to 2099), measuring the
    longest gap between fire days, the wrap-around included. The check is thus the same on
    every day, and "fires within the next five years" holds from any date up to 2099 (Feb 29
    skips 2100: `0 0 29 2 *` then waits eight years, which we accept).
    """
    if all(all(by_length) for by_length in month_days):
        # Every possible month (each weekday of the 1st, each length) has a matching day, so
        # every chosen month of every year fires: gaps stay under 13 months. Skips the scan
        # below, which costs about a millisecond.
        return
    fire_days = [
        before_first + day
        for month, first_weekday, length, before_first in _CYCLE_MONTHS
        if month in months
        for day in month_days[first_weekday][length - 28]
    ]
    if not fire_days:
        # Only possible when every day-of-month exceeds every chosen month's length.
        month_names = join_words([calendar.month_name[m] for m in sorted(months)], "and")
        verb = "has" if len(months) == 1 else "have"
        day_numbers = join_words([str(d) for d in sorted(days)], "or")
        raise CronError(
            f"{month_names} never {verb} {day_numbers} days: this schedule would never fire"
        )
    cycle = _CYCLE_END - _CYCLE_START
    gaps = [later - earlier for earlier, later in pairwise(fire_days)]
    gaps.append(fire_days[0] + cycle - fire_days[-1])
    if max(gaps) > MAX_GAP_DAYS:
        years = max(gaps) // 365
        span = f"{years} years" if years > 5 else "more than five years"
        raise CronError(
            f"this schedule can go {span} without firing: "
            "a schedule must fire at least once every five years"
        )


_CYCLE_START = date(2001, 1, 1).toordinal()
_CYCLE_END = date(2029, 1, 1).toordinal()
# (month, weekday of the 1st with 0 = Sunday, length, ordinal of the day before the 1st)
_CYCLE_MONTHS = tuple(
    (
        month,
        (calendar.monthrange(year, month)[0] + 1) % 7,
        calendar.monthrange(year, month)[1],
        date(year, month, 1).toordinal() - 1,
    )
    for year in range(2001, 2029)
    for month in range(1, 13)
)
