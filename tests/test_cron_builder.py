"""The schedule builder's shapes: the cron each one writes, the shape a cron opens in (round
trip, Custom for anything else), and a message beside each bad field."""

from __future__ import annotations

from pathlib import Path

import pytest

from webapp import cron
from webapp.cron.builder import CUSTOM, REPEATS, BuilderError, Shape, read_builder, shape_of


def posted(repeat: str, **fields: str) -> dict[str, str]:
    """The builder's fields as the form posts them: repeat_<name> for each of `fields`."""
    return {"repeat": repeat} | {f"repeat_{name}": value for name, value in fields.items()}


# The builder's fields as the form posts them, and the cron they write.
WRITES = [
    (posted("minutes", minutes="15"), "*/15 * * * *"),
    (posted("minutes", minutes="1"), "* * * * *"),
    (posted("hours", hours="2", minute="30"), "30 */2 * * *"),
    (posted("hours", hours="1", minute="5"), "5 * * * *"),
    (posted("daily", times="06:00"), "0 6 * * *"),
    (posted("daily", times="9:00, 17:00"), "0 9,17 * * *"),
    (posted("daily", times="9:00 9:30 17:00 17:30"), "0,30 9,17 * * *"),
    (posted("weekdays", times="09:30"), "30 9 * * 1-5"),
    (posted("weekly", days="1,4", times="08:00"), "0 8 * * 1,4"),
    (posted("weekly", days="0,6", times="10:00"), "0 10 * * 0,6"),
    (posted("monthly", on="day", day="15", times="12:00"), "0 12 15 * *"),
    (posted("monthly", on="L", times="23:00"), "0 23 L * *"),
    (posted("monthly", on="LW", times="18:00"), "0 18 LW * *"),
    (posted("monthly", on="2", weekday="2", times="8:00"), "0 8 * * 2#2"),
    (posted("monthly", on="1", weekday="1", times="8:00"), "0 8 * * 1#1"),
    (posted("monthly", on="last", weekday="5", times="17:00"), "0 17 * * 5#L"),
    (posted("yearly", month="1", day="1", times="06:00"), "0 6 1 1 *"),
    (posted("yearly", month="2", day="29", times="0:00"), "0 0 29 2 *"),
]


@pytest.mark.parametrize(("fields", "expected"), WRITES, ids=[e for _, e in WRITES])
def test_each_shape_writes_its_cron_and_the_cron_opens_in_the_same_shape(
    fields: dict[str, str], expected: str
) -> None:
    shape = read_builder(fields)
    assert shape.cron() == expected
    cron.validate(expected, "UTC")  # a real, firing expression
    reopened = shape_of(expected)
    assert reopened == shape
    assert read_builder(reopened.fields()) == shape  # the form's fields read back the same


def test_every_day_of_the_week_is_every_day_and_monday_to_friday_opens_as_weekdays() -> None:
    every_day = read_builder(posted("weekly", days="0,1,2,3,4,5,6", times="7:00"))
    assert every_day.cron() == "0 7 * * *" and shape_of("0 7 * * *").repeat == "daily"
    work_week = read_builder(posted("weekly", days="1,2,3,4,5", times="7"))
    assert work_week.cron() == "0 7 * * 1-5" and shape_of("0 7 * * 1-5").repeat == "weekdays"


@pytest.mark.parametrize(
    "expression",
    [
        "@daily",  # an alias: the cron field keeps it as written
        "0 9 * * MON-FRI",  # names: opening it as Weekdays would rewrite it
        "*/10 9-16 * * 1-5",  # a repeat within hours of the day
        "0 9 1,15 * *",  # two days of the month
        "0 0 13 * 5",  # both day fields
        "0 9 * * 1#1,5#L",
        "0 6 1 1,7 *",
        "0 9,17 * * 1-5/2",
        "00 9 * * *",  # not written as the builder writes it
        "0  9 * * 1,2,3",  # 1-3 is how the builder writes those days
        "*/0 * * * *",
        "*/75 * * * *",
        "0 6 31 2 *",
        "not cron",
        "",
    ],
)
def test_anything_else_opens_as_custom(expression: str) -> None:
    assert shape_of(expression) == CUSTOM


def test_extra_spaces_do_not_stop_a_cron_from_opening_in_its_shape() -> None:
    assert shape_of("  30 9 * *   1-5 ").repeat == "weekdays"


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (posted("minutes", minutes="0"), "repeat_minutes", "from 1 to 59"),
        (posted("minutes", minutes="sixty"), "repeat_minutes", "from 1 to 59"),
        (posted("hours", hours="24", minute="0"), "repeat_hours", "from 1 to 23"),
        (posted("hours", hours="2", minute="60"), "repeat_minute", "from 0 to 59"),
        (posted("daily", times="25:00"), "repeat_times", "“25:00” is not a time of day"),
        (posted("daily", times="9:5"), "repeat_times", "“9:5” is not a time of day"),
        (posted("daily", times=" "), "repeat_times", "give at least one time of day"),
        (posted("daily", times="09:00, 17:30"), "repeat_times", "cannot be one cron expression"),
        (posted("weekly", days="", times="9:00"), "repeat_days", "choose at least one day"),
        (posted("weekly", days="8", times="9:00"), "repeat_days", "from the list"),
        (posted("monthly", on="day", day="32", times="9:00"), "repeat_day", "from 1 to 31"),
        (posted("monthly", on="day", day="0", times="9:00"), "repeat_day", "from 1 to 31"),
        (posted("monthly", on="6", times="9:00"), "repeat_on", "choose a day from the list"),
        (posted("monthly", on="2", weekday="7", times="9"), "repeat_weekday", "day of the week"),
        (posted("yearly", month="4", day="31", times="9:00"), "repeat_day", "April has 30 days"),
        (posted("yearly", month="13", day="1", times="9:00"), "repeat_month", "choose a month"),
        (posted("fortnightly"), "repeat", "choose a repeat from the list"),
    ],
)
def test_bad_input_is_told_beside_its_field(
    fields: dict[str, str], field: str, message: str
) -> None:
    with pytest.raises(BuilderError) as raised:
        read_builder(fields)
    assert list(raised.value.errors) == [field]
    assert message in raised.value.errors[field]


def test_every_bad_field_is_told_at_once() -> None:
    with pytest.raises(BuilderError) as raised:
        read_builder(posted("yearly", month="x", day="40"))
    assert set(raised.value.errors) == {"repeat_month", "repeat_day", "repeat_times"}


def test_custom_writes_no_cron() -> None:
    assert read_builder(posted("custom")) == CUSTOM
    with pytest.raises(ValueError):
        Shape().cron()


def test_the_docs_builder_table_is_what_the_builder_writes() -> None:
    page = Path(__file__).resolve().parent.parent / "docs" / "reference" / "cron.md"
    section = page.read_text(encoding="utf-8").split("## The schedule builder")[1].split("\n- ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    crons = [row.split("`")[1] for row in rows]
    assert len(crons) == 11
    for expression in crons:
        shape = shape_of(expression)
        assert shape != CUSTOM and shape.cron() == expression
        assert row_named(rows, expression).startswith(f"| {REPEATS[shape.repeat]} |")


def row_named(rows: list[str], expression: str) -> str:
    return next(row for row in rows if f"`{expression}`" in row)
