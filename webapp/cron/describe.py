"""Cron expressions in plain English (cron-descriptor, corrected where it misreads cron), with
notes where a step does not divide its field's range."""

from __future__ import annotations

import calendar
from functools import lru_cache

from cron_descriptor import ExpressionDescriptor, FormatError, Options

from .fields import FIELD_KINDS, CronFields
from .words import consecutive_runs


def describe(spec: CronFields) -> str:
    """The expression in plain English with 24-hour times, e.g. "At 02:30".

    Takes a validated spec (a CronSpec from validate()): cron-descriptor accepts garbage and
    reads six fields as seconds-first.
    """
    plain = _plain_fields(spec)
    # Day-of-week as plain numbers: cron-descriptor misreads 7 and steps there ("5/1" is
    # Friday to Sunday, "*/2" is Sunday, Tuesday, Thursday and Saturday).
    try:
        text = _describe((*spec.fields[:4], plain[4]), spec.days_and)
    except (FormatError, ValueError, IndexError, KeyError):
        # It also stumbles on valid lists such as "2,*": describe the same value sets
        # written as plain numbers and ranges instead.
        text = _describe(plain, spec.days_and)
    return "".join([text, *(f" ({note})" for note in step_notes(spec))])


def step_notes(spec: CronFields) -> list[str]:
    """Where a step does not divide its field's range, the real gap at the wrap, in words.

    "*/7" in the minute field is "Every 7 minutes" but fires at :56 and then at :00, 4 minutes
    later: "from :00 each hour; the gap across the hour is 4 minutes". A gap that only a
    restriction elsewhere crosses (minutes in a single hour) is not mentioned. Day-of-week
    needs no note: its description names the days.
    """
    minute, hour, day, month, _ = spec.fields
    notes = []
    gap = _wrap_gap(minute, spec.minutes, 60)
    if gap is not None and _has_neighbours(spec.hours, 24):
        notes.append(
            f"from :{spec.minutes[0]:02d} each hour; the gap across the hour is "
            f"{_plural(gap, 'minute')}"
        )
    gap = _wrap_gap(hour, spec.hours, 24)
    if gap is not None and _fires_on_consecutive_days(spec):
        notes.append(
            f"from {spec.hours[0]:02d}:{spec.minutes[0]:02d} each day; the gap across "
            f"midnight is {_plural(gap, 'hour')}"
        )
    days = sorted(spec.days)
    if _single_step(day) and len(spec.weekdays) == 7 and _has_neighbours(spec.months, 12, 1):
        # Month lengths vary, so the gap across the month end does too. (With a day of the
        # week as well, the step is not what sets the gaps.)
        gaps = {
            days[0] + length - max(d for d in days if d <= length)
            for length in range(28, 32)
            if days[0] <= length
        }
        if len(days) > 1 and gaps != {_step(day)}:
            low, high = min(gaps), max(gaps)
            size = _plural(low, "day") if low == high else f"{low} to {high} days"
            notes.append(f"from day {days[0]} each month; the gap across the month end is {size}")
    months = sorted(spec.months)
    gap = _wrap_gap(month, months, 12)
    if gap is not None:
        notes.append(
            f"from {calendar.month_name[months[0]]} each year; the gap across the year end "
            f"is {_plural(gap, 'month')}"
        )
    return notes


def _single_step(text: str) -> bool:
    return "/" in text and "," not in text


def _step(text: str) -> int:
    return int(text.partition("/")[2])


def _wrap_gap(text: str, values: tuple[int, ...] | list[int], period: int) -> int | None:
    """The gap from the last value to the first of the next cycle, if the field is one step
    term and that gap differs from the step."""
    if not _single_step(text) or len(values) < 2:
        return None
    gap = values[0] + period - values[-1]
    return None if gap == _step(text) else gap


def _has_neighbours(values: tuple[int, ...] | frozenset[int], period: int, low: int = 0) -> bool:
    """Whether two values follow each other (the last and the first count too)."""
    chosen = set(values)
    return any((value - low + 1) % period + low in chosen for value in chosen)


def _fires_on_consecutive_days(spec: CronFields) -> bool:
    weekdays = len(spec.weekdays) == 7 or _has_neighbours(spec.weekdays, 7)
    days = _has_neighbours(spec.days, 31, low=1)
    return (days and weekdays) if spec.days_and else (days or weekdays)


def _plural(amount: int, unit: str) -> str:
    return f"{amount} {unit}" if amount == 1 else f"{amount} {unit}s"


def _plain_fields(spec: CronFields) -> tuple[str, ...]:
    sets = (spec.minutes, spec.hours, spec.days, spec.months, spec.weekdays)
    return tuple(
        "*"
        if len(values) == kind.high - kind.low + 1 - (kind.name == "day-of-week")
        else _ranges(sorted(values))
        for values, kind in zip(sets, FIELD_KINDS, strict=True)
    )


def _ranges(values: list[int]) -> str:
    runs = consecutive_runs(values)
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


@lru_cache(maxsize=1024)
def _describe(fields: tuple[str, ...], days_and: bool) -> str:
    options = Options(locale_code="en_US", use_24hour_time_format=True)
    text = ExpressionDescriptor(" ".join(fields), options).get_description()
    if days_and and fields[2] != "*" and fields[4] != "*":
        # cron-descriptor says "or" whenever both day fields are set; Vixie cron requires both
        # when one starts with '*' ("0 0 */2 * 1": Mondays that fall on an odd day).
        text = text.replace(", or on ", ", only on ")
    return text
