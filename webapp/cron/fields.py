"""The five fields of a cron expression: parsed, checked and compiled into the value sets that
fire-time searches match against. No time zone here: the same fields serve every zone.

Besides Debian's syntax, the day fields accept the extended day rules (see ``days``):
day-of-month ``L`` and ``LW``; day-of-week ``D#N`` (N 1-5), ``D#L`` and Quartz's ``DL``, with D a
number 0-7 or a day name. They may be listed with ordinary values (``1,L``, ``MON#1,FRI#L``),
never put in a range or step."""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache
from itertools import pairwise

from .days import month_day_table
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
_MAY_BE_RULE = re.compile(r"[#lLwW]")
_LAST_OFFSET = re.compile(r"l-[0-9]*")  # Quartz's L-3, the third day before the last


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
    # The extended day rules, canonical: "L", "LW" in day-of-month; "1#1", "5#L" in day-of-week.
    day_rules: frozenset[str] = field(compare=False, repr=False)
    weekday_rules: frozenset[str] = field(compare=False, repr=False)
    # Vixie cron: when day-of-month or day-of-week starts with '*', a day must match both.
    days_and: bool = field(compare=False, repr=False)
    # Debian cron: a job whose minute or hour field starts with '*' is a wildcard job, which
    # the DST rules treat differently from a fixed-time job.
    wildcard: bool = field(compare=False)
    # Minutes since local midnight at which the job fires on a matching day, ascending.
    day_minutes: tuple[int, ...] = field(compare=False, repr=False)
    # Matching days of a month, indexed by [weekday of the 1st (0 = Sunday)][length - 28].
    month_days: tuple[tuple[tuple[int, ...], ...], ...] = field(compare=False, repr=False)

    @property
    def extended(self) -> bool:
        """Whether the expression uses the extended day rules (L, LW, #)."""
        return bool(self.day_rules or self.weekday_rules)

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
    (minutes, _), (hours, _), (days, day_rules), (months, _), (weekdays, weekday_rules) = (
        _parse_field(text, kind) for text, kind in zip(fields, FIELD_KINDS, strict=True)
    )
    if 7 in weekdays:  # day-of-week 7 is Sunday too
        weekdays = (weekdays - {7}) | {0}
    days_and = fields[2].startswith("*") or fields[4].startswith("*")
    month_days = month_day_table(days, weekdays, days_and, day_rules, weekday_rules)
    _check_fires_often_enough(days, months, month_days, bool(day_rules or weekday_rules))
    return CronFields(
        expression=expression,
        fields=tuple(fields),
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=days,
        months=months,
        weekdays=weekdays,
        day_rules=day_rules,
        weekday_rules=weekday_rules,
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


def _parse_field(text: str, kind: FieldKind) -> tuple[frozenset[int], frozenset[str]]:
    """The set of values one field selects, Vixie-style, and its extended day rules (canonical,
    as in ``days``); raises CronError on any defect."""
    values: set[int] = set()
    rules: set[str] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"{kind.name} field '{text}' has an empty list item")
        rule = _day_rule(item, kind)
        if rule is not None:
            rules.add(rule)
            continue
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
    return frozenset(values), frozenset(rules)


def _day_rule(item: str, kind: FieldKind) -> str | None:
    """The extended day rule a list item names, canonical ("L", "LW", "1#1", "5#L"), or None
    for an ordinary item; CronError where L, W or # is misused."""
    if not _MAY_BE_RULE.search(item):
        return None  # digits, '*', '-' and '/' only (most items): no need to look closer
    lower = item.lower()
    bare = lower
    for name in kind.names:  # "jul" and "wed" are names, not L or W
        bare = bare.replace(name, "")
    uses_last, uses_nth = "l" in bare, "#" in bare
    uses_w = "w" in bare and kind.name == "day-of-month"
    if not (uses_last or uses_nth or uses_w):
        return None
    if uses_nth and kind.name != "day-of-week":
        raise CronError(
            f"{kind.name} '{item}': # (the n-th weekday of the month, as in MON#1) belongs in "
            "the day-of-week field"
        )
    if kind.name == "day-of-month":
        return _month_day_rule(item, lower)
    if kind.name == "day-of-week":
        return _weekday_rule(item, lower, kind)
    raise CronError(
        f"{kind.name} '{item}': L (the last) belongs in the day-of-month field (L, LW) or the "
        "day-of-week field (FRI#L, 5L)"
    )


def _month_day_rule(item: str, lower: str) -> str:
    if lower in ("l", "lw"):
        return lower.upper()
    if _LAST_OFFSET.fullmatch(lower):
        raise CronError(
            f"day-of-month '{item}': offsets from the last day are not supported; use L (the "
            "last day) or LW (the last weekday)"
        )
    if "w" in lower:
        raise CronError(
            f"day-of-month '{item}': W (the nearest weekday) is supported only as LW, the last "
            "weekday of the month"
        )
    _refuse_range_or_step(item, "day-of-month", "L", "1,15,L")
    raise CronError(
        f"day-of-month '{item}' is not a number, L (the last day) or LW (the last weekday)"
    )


def _weekday_rule(item: str, lower: str, kind: FieldKind) -> str:
    if "lw" in lower:
        raise CronError(
            f"day-of-week '{item}': LW (the last weekday of the month) belongs in the "
            "day-of-month field"
        )
    _refuse_range_or_step(item, kind.name, "#" if "#" in lower else "L", "MON#1,FRI#L")
    if lower == "l":
        raise CronError(
            "day-of-week 'L' needs a day before it, as in FRI#L or 5L (the last Friday); L "
            "alone, the last day of the month, belongs in the day-of-month field"
        )
    day, nth = (item[:-1], "L") if "#" not in lower else item.split("#", 1)
    if not day:
        raise CronError(
            f"day-of-week '{item}' needs a day before {'#' if '#' in lower else 'L'}, as in "
            "MON#1 (the first Monday) or FRI#L (the last Friday)"
        )
    nth = nth.upper()
    if nth != "L" and not (nth.isdigit() and 1 <= int(nth) <= 5):
        raise CronError(
            f"day-of-week '{item}': the number after # must be 1 to 5 (a month has at most "
            "five of each weekday), or L for the last"
        )
    return f"{_value(day, kind) % 7}#{nth}"


def _refuse_range_or_step(item: str, field_name: str, symbol: str, example: str) -> None:
    if "-" in item or "/" in item:
        raise CronError(
            f"{field_name} '{item}': {symbol} cannot be part of a range or step; list the days "
            f"instead, as in {example}"
        )


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


def _check_fires_often_enough(
    days: frozenset[int],
    months: frozenset[int],
    month_days: tuple[tuple[tuple[int, ...], ...], ...],
    extended: bool,
) -> None:
    """Reject schedules that never fire, or that can go more than five years without firing.

    Checked structurally, without the clock: over 2001-2028, a full 28-year cycle of the
    calendar (weekdays and leap years repeat every 28 years from 1901 to 2099), measuring the
    longest gap between fire days, the wrap-around included. The check is thus the same on
    every day, and "fires within the next five years" holds from any date up to 2099 (Feb 29
    skips 2100: `0 0 29 2 *` then waits eight years, which we accept).

    An ``extended`` expression (L, LW, #) names its rare days on purpose (`0 0 * 2 MON#5`, a
    fifth Monday of February, fires once in 28 years: 2016, 2044), so it is refused only when
    it never fires in the cycle.
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
    month_names = join_words([calendar.month_name[m] for m in sorted(months)], "and")
    if not fire_days and extended:
        # Only possible when one day field starts with '*', so that a day must match both.
        raise CronError(
            f"no day of {month_names} matches both day fields: this schedule would never fire"
        )
    if not fire_days:
        # Only possible when every day-of-month exceeds every chosen month's length.
        verb = "has" if len(months) == 1 else "have"
        day_numbers = join_words([str(d) for d in sorted(days)], "or")
        raise CronError(
            f"{month_names} never {verb} {day_numbers} days: this schedule would never fire"
        )
    if extended:
        return
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
