"""Cron expressions in plain English (cron-descriptor, corrected where it misreads cron), with
notes where a step does not divide its field's range. The extended day rules (L, LW, #) are put
in words here, between cron-descriptor's words for the time of day and for the months."""

from __future__ import annotations

import calendar
from functools import lru_cache
from itertools import pairwise

from cron_descriptor import ExpressionDescriptor, FormatError, Options

from .days import LAST_DAY, LAST_WEEKDAY
from .fields import FIELD_KINDS, CronFields
from .words import consecutive_runs, join_words

_OPTIONS = Options(locale_code="en_US", use_24hour_time_format=True)
_DESCRIPTOR_ERRORS = (FormatError, ValueError, IndexError, KeyError)
_ORDINALS = {"1": "first", "2": "second", "3": "third", "4": "fourth", "5": "fifth", "L": "last"}


def describe(spec: CronFields) -> str:
    """The expression in plain English with 24-hour times, e.g. "At 02:30".

    Takes a validated spec (a CronSpec from validate()): cron-descriptor accepts garbage and
    reads six fields as seconds-first.
    """
    if spec.extended:
        return "".join([_describe_extended(spec), *(f" ({note})" for note in step_notes(spec))])
    plain = _plain_fields(spec)
    # Day-of-week as plain numbers: cron-descriptor misreads 7 and steps there ("5/1" is
    # Friday to Sunday, "*/2" is Sunday, Tuesday, Thursday and Saturday).
    try:
        text = _describe((*spec.fields[:4], plain[4]), spec.days_and)
    except _DESCRIPTOR_ERRORS:
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
    """Whether the job runs on two days in a row, within a month or across its end."""
    for first, by_length in enumerate(spec.month_days):
        for length, days in enumerate(by_length, start=28):
            if any(later - earlier == 1 for earlier, later in pairwise(days)):
                return True
            next_month = spec.month_days[(first + length) % 7][0]
            if days and days[-1] == length and next_month[:1] == (1,):
                return True
    return False


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
    text = ExpressionDescriptor(" ".join(fields), _OPTIONS).get_description()
    if days_and and fields[2] != "*" and fields[4] != "*":
        # cron-descriptor says "or" whenever both day fields are set; Vixie cron requires both
        # when one starts with '*' ("0 0 */2 * 1": Mondays that fall on an odd day).
        text = text.replace(", or on ", ", only on ")
    return text


@lru_cache(maxsize=1024)
def _describe_extended(spec: CronFields) -> str:
    """An expression with L, LW or # in words: cron-descriptor's time of day, the day fields
    in our words, cron-descriptor's months ("At 17:30, on the last Friday of the month, only
    in March")."""
    minute, hour, day, month, weekday = spec.fields
    plain = _plain_fields(spec)
    if spec.day_rules:
        on_day = f", on {join_words(_month_day_words(spec), 'and')} of the month"
    else:
        on_day = _descriptor(
            ("0", "0", day, "*", "*"), ("0", "0", plain[2], "*", "*")
        ).get_day_of_month_description()
    if spec.weekday_rules:
        on_week = f", on {join_words(_weekday_words(spec), 'and')} of the month"
    else:  # day-of-week as plain numbers: cron-descriptor misreads 7 and steps there
        on_week = ExpressionDescriptor(
            f"0 0 * * {plain[4]}", _OPTIONS
        ).get_day_of_week_description()
    if day == "*":
        days = on_week
    elif weekday == "*":
        days = on_day
    elif spec.days_and:  # one field starts with '*': a day must match both
        days = on_day + _reworded(on_week, ", only on ")
    else:  # both restricted: a day matching either
        days = on_day + _reworded(on_week, ", or on ")
    descriptor = _descriptor(
        (minute, hour, "*", month, "*"), (plain[0], plain[1], "*", plain[3], "*")
    )
    time_of_day = descriptor.get_time_of_day_description()
    months = descriptor.get_month_description()
    text = descriptor.transform_verbosity(f"{time_of_day}{days}{months}", use_verbose_format=False)
    return descriptor.transform_case(text, _OPTIONS.casing_type)


def _descriptor(fields: tuple[str, ...], plain: tuple[str, ...]) -> ExpressionDescriptor:
    """cron-descriptor for the fields as written or, where it stumbles (on "2,*"), for the
    same values as plain numbers; its parts are then asked for one by one."""
    descriptor = ExpressionDescriptor(" ".join(fields), _OPTIONS)
    try:
        descriptor.get_description()
    except _DESCRIPTOR_ERRORS:
        return ExpressionDescriptor(" ".join(plain), _OPTIONS)
    return descriptor


def _month_day_words(spec: CronFields) -> list[str]:
    """E.g. ["day 1", "days 10 to 12", "the last day"] for "1,10-12,L"."""
    words = [
        f"day {run}" if "-" not in run else f"days {run.replace('-', ' to ')}"
        for run in _ranges(sorted(spec.days)).split(",")
        if run
    ]
    if LAST_DAY in spec.day_rules:
        words.append("the last day")
    if LAST_WEEKDAY in spec.day_rules:
        words.append("the last weekday")
    return words


def _weekday_words(spec: CronFields) -> list[str]:
    """E.g. ["every Tuesday", "the first Monday", "the last Friday"] for "TUE,MON#1,5L"."""
    words = [f"every {_day_name(weekday)}" for weekday in sorted(spec.weekdays, key=_monday_first)]
    rules = [rule.partition("#")[::2] for rule in spec.weekday_rules]
    for weekday, nth in sorted(rules, key=lambda rule: (rule[1], _monday_first(int(rule[0])))):
        words.append(f"the {_ORDINALS[nth]} {_day_name(int(weekday))}")
    return words


def _day_name(weekday: int) -> str:
    return calendar.day_name[(weekday - 1) % 7]  # ours count from Sunday, calendar's from Monday


def _monday_first(weekday: int) -> int:
    return (weekday - 1) % 7


def _reworded(words: str, start: str) -> str:
    """cron-descriptor's or our words for day-of-week (", only on Monday", ", on the first
    Monday of the month", ", Monday through Friday") introduced by ``start`` (", or on ")."""
    for prefix in (", only on ", ", on "):
        if words.startswith(prefix):
            return start + words.removeprefix(prefix)
    return start.removesuffix("on ") + words.removeprefix(", ")
