"""The schedule builder: the common shapes of a schedule (every 15 minutes, weekdays at 09:30,
the last Friday of the month at 17:00...) and the cron expression each one writes.

The form keeps the builder's fields as typed (strings, named as posted: `FIELDS`);
`read_builder` turns them into a `Shape` or errors by field, `Shape.cron()` writes the five
fields, and `shape_of(cron)` opens an existing schedule in its shape. The round trip is exact:
`shape_of(expr)` is Custom unless its shape writes `expr` back character for character and its
fields read back to it, so a schedule opened and saved untouched keeps its stored cron.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import CronError
from .words import clock_words, cron_list, not_one_cron, time_fields

# The Repeat select: a shape and its words; Custom leaves the cron to the cron field.
REPEATS = {
    "minutes": "Every N minutes",
    "hours": "Every N hours",
    "daily": "Every day",
    "weekdays": "Every weekday (Monday to Friday)",
    "weekly": "On chosen days of the week",
    "monthly": "Every month",
    "yearly": "Every year",
    "custom": "Custom (the cron expression below)",
}
# A monthly schedule's day: a day number, the last day, the last weekday, the last business
# day, or the first to fifth or the last of a day of the week (the Weekday select).
# The last business day is `L` with a calendar and its policy previous_business_day: schedule
# fields rather than cron, which the form sets with it (web/forms.py, ScheduleForm).
LAST_BUSINESS_DAY = "LB"
MONTH_ON = {
    "day": "A day of the month",
    "L": "The last day",
    "LW": "The last weekday (Monday to Friday)",
    LAST_BUSINESS_DAY: "The last business day (of the calendar chosen below)",
    "1": "The first …",
    "2": "The second …",
    "3": "The third …",
    "4": "The fourth …",
    "5": "The fifth …",
    "last": "The last …",
}
NTH_WEEKDAY = ("1", "2", "3", "4", "5", "last")
# Days of the week Monday first, as cron numbers (0 is Sunday); months 1 to 12.
WEEKDAYS = {(day + 1) % 7: calendar.day_name[day] for day in range(7)}
MONTHS = {month: calendar.month_name[month] for month in range(1, 13)}
# Days each month can have (29 in February: such a schedule fires in leap years).
MONTH_DAYS = {month: calendar.monthrange(2024, month)[1] for month in MONTHS}
# The fields each shape shows, by name as posted; the form posts them all but reads these.
FIELDS = (
    "repeat",
    "repeat_minutes",
    "repeat_hours",
    "repeat_minute",
    "repeat_days",
    "repeat_on",
    "repeat_day",
    "repeat_weekday",
    "repeat_month",
    "repeat_times",
)
SHOWN = {
    "minutes": ("repeat_minutes",),
    "hours": ("repeat_hours", "repeat_minute"),
    "daily": ("repeat_times",),
    "weekdays": ("repeat_times",),
    "weekly": ("repeat_days", "repeat_times"),
    "monthly": ("repeat_on", "repeat_times"),
    "yearly": ("repeat_month", "repeat_day", "repeat_times"),
    "custom": (),
}
TIME = re.compile(r"(\d{1,2})(?::(\d{2}))?")
TIME_SEPARATORS = re.compile(r"[\s,;]+")


class BuilderError(CronError):
    """The builder's fields do not make a schedule: `errors` by field name, as posted."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(errors.values()))


@dataclass(frozen=True)
class Shape:
    """A schedule in the builder's terms; `repeat` is a key of REPEATS."""

    repeat: str = "custom"
    every: int = 1  # minutes or hours between fires
    minute: int = 0  # past the hour, every N hours
    times: tuple[tuple[int, int], ...] = ((9, 0),)  # (hour, minute), sorted
    days: tuple[int, ...] = (1,)  # days of the week, cron numbers, sorted
    on: str = "day"  # a key of MONTH_ON
    day: int = 1  # of the month
    weekday: int = 1  # the N-th or last one, monthly
    month: int = 1  # yearly

    def cron(self) -> str:
        """The five fields; Custom has none (ValueError)."""
        if self.repeat == "minutes":
            return f"{step(self.every)} * * * *"
        if self.repeat == "hours":
            return f"{self.minute} {step(self.every)} * * *"
        if self.repeat == "custom":
            raise ValueError("Custom has no cron expression of its own")
        fields = time_fields(list(self.times))
        assert fields is not None, "read_builder refuses times cron cannot write"
        minute, hour = fields
        day, month, weekday = "*", "*", "*"
        if self.repeat == "weekdays":
            weekday = "1-5"
        elif self.repeat == "weekly":
            weekday = "*" if len(self.days) == 7 else cron_list(list(self.days))
        elif self.repeat == "monthly" and self.on in NTH_WEEKDAY:
            weekday = f"{self.weekday}#{'L' if self.on == 'last' else self.on}"
        elif self.repeat == "monthly":
            day = {"day": str(self.day), LAST_BUSINESS_DAY: "L"}.get(self.on, self.on)
        elif self.repeat == "yearly":
            day, month = str(self.day), str(self.month)
        return f"{minute} {hour} {day} {month} {weekday}"

    def fields(self) -> dict[str, str]:
        """The builder's fields as the form shows them."""
        return {
            "repeat": self.repeat,
            "repeat_minutes": str(self.every) if self.repeat == "minutes" else "15",
            "repeat_hours": str(self.every) if self.repeat == "hours" else "2",
            "repeat_minute": str(self.minute),
            "repeat_days": ",".join(str(day) for day in self.days),
            "repeat_on": self.on,
            "repeat_day": str(self.day),
            "repeat_weekday": str(self.weekday),
            "repeat_month": str(self.month),
            "repeat_times": ", ".join(clock_words(time) for time in self.times),
        }


CUSTOM = Shape()
DEFAULT_FIELDS = CUSTOM.fields()


def step(every: int) -> str:
    return "*" if every == 1 else f"*/{every}"


def builder_shown(fields: Mapping[str, str]) -> str:
    """Which fields the builder shows for these values (the form posts it back as
    `repeat_shown`): a change of Repeat (or of a monthly schedule's On) without them shown
    needs a round trip before it can be saved."""
    repeat = fields.get("repeat", "custom")
    if repeat != "monthly":
        return repeat
    on = fields.get("repeat_on", "day")
    return f"monthly:{'weekday' if on in NTH_WEEKDAY else on}"


def builder_defaults(fields: Mapping[str, str]) -> dict[str, str]:
    """The fields to show: as typed, the defaults for the others."""
    return DEFAULT_FIELDS | {name: value for name, value in fields.items() if name in FIELDS}


def read_builder(fields: Mapping[str, str]) -> Shape:
    """The shape the fields describe, or BuilderError with a message for each bad field; a
    field the shape needs and that is missing is bad (blank)."""
    reader = _Reader(fields)
    repeat = reader.choice("repeat", REPEATS, "a repeat")
    if not reader.fine("repeat"):
        return reader.shape()
    if repeat in ("minutes", "hours"):
        limit = 59 if repeat == "minutes" else 23
        every = reader.number(f"repeat_{repeat}", 1, limit)
        minute = reader.number("repeat_minute", 0, 59) if repeat == "hours" else 0
        return reader.shape(repeat=repeat, every=every, minute=minute)
    values: dict[str, object] = {"repeat": repeat}
    if repeat == "weekly":
        values["days"] = reader.days()
    if repeat == "monthly":
        on = values["on"] = reader.choice("repeat_on", MONTH_ON, "a day")
        if on == "day" and reader.fine("repeat_on"):
            values["day"] = reader.number("repeat_day", 1, 31)
        if on in NTH_WEEKDAY:
            values["weekday"] = int(reader.choice("repeat_weekday", WEEKDAYS, "a day of the week"))
    if repeat == "yearly":
        month = values["month"] = int(reader.choice("repeat_month", MONTHS, "a month"))
        day = values["day"] = reader.number("repeat_day", 1, 31)
        if reader.fine("repeat_month") and isinstance(day, int) and day > MONTH_DAYS[month]:
            reader.errors["repeat_day"] = f"{MONTHS[month]} has {MONTH_DAYS[month]} days"
    if repeat != "custom":
        values["times"] = reader.times()
    return reader.shape(**values)


def shape_of(expression: str) -> Shape:
    """The builder's shape of a cron expression, or CUSTOM when none writes it exactly."""
    text = " ".join(expression.split())
    try:
        shape = _read_cron(text.split(" "))
        if shape is None or shape.cron() != text or read_builder(shape.fields()) != shape:
            return CUSTOM
    except (ValueError, BuilderError):
        return CUSTOM
    return shape


def _read_cron(fields: list[str]) -> Shape | None:
    if len(fields) != 5:
        return None
    minute, hour, day, month, weekday = fields
    if (hour, day, month, weekday) == ("*", "*", "*", "*") and minute.startswith("*"):
        return Shape("minutes", every=_every(minute))
    if (day, month, weekday) == ("*", "*", "*") and hour.startswith("*"):
        return Shape("hours", every=_every(hour), minute=int(minute))
    times = tuple((h, m) for h in _numbers(hour) for m in _numbers(minute))
    if (day, month) == ("*", "*"):
        if weekday == "*":
            return Shape("daily", times=times)
        if weekday == "1-5":
            return Shape("weekdays", times=times)
        if "#" in weekday:
            number, nth = weekday.split("#")
            on = "last" if nth == "L" else nth
            return Shape("monthly", times=times, on=on, weekday=int(number))
        return Shape("weekly", times=times, days=tuple(_numbers(weekday)))
    if (month, weekday) == ("*", "*"):
        if day in ("L", "LW"):
            return Shape("monthly", times=times, on=day)
        return Shape("monthly", times=times, on="day", day=int(day))
    if weekday == "*":
        return Shape("yearly", times=times, day=int(day), month=int(month))
    return None


def _every(field: str) -> int:
    return 1 if field == "*" else int(field.removeprefix("*/"))


def _numbers(field: str) -> list[int]:
    """A list of numbers and ranges ("0,30", "9-17"); ValueError for anything else."""
    values: list[int] = []
    for part in field.split(","):
        first, _, last = part.partition("-")
        values += range(int(first), int(last or first) + 1)
    return values


class _Reader:
    """Reads the posted fields one by one, gathering an error per bad field."""

    def __init__(self, fields: Mapping[str, str]) -> None:
        self.fields = fields
        self.errors: dict[str, str] = {}

    def text(self, name: str) -> str:
        return self.fields.get(name, "").strip()

    def fine(self, name: str) -> bool:
        return name not in self.errors

    def choice(self, name: str, choices: Mapping[Any, str], what: str) -> str:
        value = self.text(name)
        if value not in {str(key) for key in choices}:
            self.errors[name] = f"choose {what} from the list"
            return next(iter(str(key) for key in choices))
        return value

    def number(self, name: str, low: int, high: int) -> int:
        text = self.text(name)
        if not text.isdigit() or not low <= int(text) <= high:
            self.errors[name] = f"a whole number from {low} to {high}"
            return low
        return int(text)

    def days(self) -> tuple[int, ...]:
        days = {part for part in self.text("repeat_days").split(",") if part.strip()}
        if not days:
            self.errors["repeat_days"] = "choose at least one day of the week"
        elif not days <= {str(day) for day in WEEKDAYS}:
            self.errors["repeat_days"] = "choose days of the week from the list"
        else:
            return tuple(sorted(int(day) for day in days))
        return CUSTOM.days

    def times(self) -> tuple[tuple[int, int], ...]:
        times = set()
        for part in TIME_SEPARATORS.split(self.text("repeat_times")):
            found = TIME.fullmatch(part)
            hour, minute = (int(found.group(1)), int(found.group(2) or 0)) if found else (99, 0)
            if part and (hour > 23 or minute > 59):
                self.errors["repeat_times"] = (
                    f"“{part}” is not a time of day: write HH:MM, from 00:00 to 23:59"
                )
                return CUSTOM.times
            if part:
                times.add((hour, minute))
        if not times:
            self.errors["repeat_times"] = "give at least one time of day, e.g. 09:30"
        elif time_fields(list(times)) is None:
            self.errors["repeat_times"] = (
                f"{not_one_cron(list(times))}, or give the same minutes for every hour"
            )
        else:
            return tuple(sorted(times))
        return CUSTOM.times

    def shape(self, **values: object) -> Shape:
        if self.errors:
            raise BuilderError(self.errors)
        return Shape(**values)  # type: ignore[arg-type]
