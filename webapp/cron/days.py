"""Which days of a month a job runs on: the two day fields combined, Debian's rule, with the
extended day rules (Quartz's syntax, as cronsim and croniter read it).

A day rule is written canonically as ``L`` (the last day of the month), ``LW`` (its last
weekday, Monday to Friday), ``D#N`` (the N-th weekday D of the month, D 0-6 with 0 = Sunday, N
1-5) or ``D#L`` (the last weekday D). The days a rule picks depend only on the weekday of the
month's 1st and its length, as do the days every other field item picks: so one table per
expression, indexed by those two, answers for every month, and the fire-time search is the same
for standard and extended expressions.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from functools import lru_cache

LAST_DAY = "L"
LAST_WEEKDAY = "LW"
MONTH_LENGTHS = range(28, 32)

# The days 1-31 of a month whose 1st is on weekday `first` (0 = Sunday) that fall on `weekday`.
_DAYS_ON_WEEKDAY = tuple(
    tuple(
        frozenset(day for day in range(1, 32) if (first + day - 1) % 7 == weekday)
        for weekday in range(7)
    )
    for first in range(7)
)


def rule_day(rule: str, first: int, length: int) -> int | None:
    """The day a rule picks in a month whose 1st is on weekday ``first`` (0 = Sunday) and that
    has ``length`` days; None when that month has no such day (a fifth Monday)."""
    if rule == LAST_DAY:
        return length
    if rule == LAST_WEEKDAY:
        last = (first + length - 1) % 7
        return length - 2 if last == 0 else length - 1 if last == 6 else length
    weekday, _, nth = rule.partition("#")
    first_such = 1 + (int(weekday) - first) % 7
    if nth == "L":
        return first_such + 7 * ((length - first_such) // 7)
    day = first_such + 7 * (int(nth) - 1)
    return day if day <= length else None


def _rule_days(rules: Iterable[str], first: int, length: int) -> set[int]:
    days = (rule_day(rule, first, length) for rule in rules)
    return {day for day in days if day is not None}


@lru_cache(maxsize=1024)
def month_day_table(
    days: frozenset[int],
    weekdays: frozenset[int],
    days_and: bool,
    day_rules: frozenset[str],
    weekday_rules: frozenset[str],
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Matching days of a month for each (weekday of the 1st, month length) combination.

    ``days`` and ``day_rules`` come from day-of-month, ``weekdays`` and ``weekday_rules`` from
    day-of-week. Cached: many expressions share their day fields (a tick may meet thousands of
    distinct expressions, and compiles each).
    """
    table: list[tuple[tuple[int, ...], ...]] = []
    # Vixie cron: if either day field starts with '*' a day must match both, else either.
    for first in range(7):
        on_weekday: set[int] = set()
        for weekday in weekdays:
            on_weekday |= _DAYS_ON_WEEKDAY[first][weekday]
        if not day_rules and not weekday_rules:
            # A standard expression (most of them, and the tick compiles thousands): the days
            # of a 31-day month, cut short for the shorter ones, at a quarter of the cost.
            full = tuple(sorted(days & on_weekday if days_and else days | on_weekday))
            table.append(
                (
                    full[: bisect_right(full, 28)],
                    full[: bisect_right(full, 29)],
                    full[: bisect_right(full, 30)],
                    full,
                )
            )
            continue
        by_length = []
        for length in MONTH_LENGTHS:
            on_day = days | _rule_days(day_rules, first, length)
            in_week = on_weekday | _rule_days(weekday_rules, first, length)
            matching = on_day & in_week if days_and else on_day | in_week
            by_length.append(tuple(sorted(day for day in matching if day <= length)))
        table.append(tuple(by_length))
    return tuple(table)
