"""Cron expressions: validation messages, aliases, the day-field rules, descriptions, the API."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.cron_helpers import utc
from webapp.cron import (
    CronError,
    CronSpec,
    check_time_zone,
    describe,
    validate,
    wall_time_to_utc,
    zone_warning,
)

FIELDS = "(minute hour day-of-month month day-of-week)"


def days_fired(expr: str, start: datetime, end: datetime) -> list[str]:
    fires = validate(expr, "UTC").fire_times_between(start, end)
    return [fire.date().isoformat() for fire in fires]


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "cron expression is empty"),
        ("   ", "cron expression is empty"),
        ("0 0 * *", f"too few fields: expected 5 {FIELDS}, got 4"),
        ("@", "unknown alias '@': use @hourly, @daily, @weekly, @monthly, @yearly or @annually"),
        (
            "0 0 0 * * *",
            f"too many fields: expected 5 {FIELDS}, got 6; "
            "seconds, years and commands are not supported",
        ),
        (
            "0 3 * * * /usr/bin/backup --full",
            f"too many fields: expected 5 {FIELDS}, got 7; "
            "seconds, years and commands are not supported",
        ),
        ("61 * * * *", "minute 61 is out of range 0-59"),
        ("0 24 * * *", "hour 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month 0 is out of range 1-31"),
        ("0 0 32 * *", "day-of-month 32 is out of range 1-31"),
        ("0 0 * 13 *", "month 13 is out of range 1-12"),
        ("0 0 * 0 *", "month 0 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week 8 is out of range 0-7"),
        ("0 0-25 * * *", "hour 25 is out of range 0-23"),
        ("*/0 * * * *", "minute step in '*/0' must be a whole number of at least 1"),
        ("0 */x * * *", "hour step in '*/x' must be a whole number of at least 1"),
        ("0 1-5/ * * *", "hour step in '1-5/' must be a whole number of at least 1"),
        ("0 0 * */-1 *", "month step in '*/-1' must be a whole number of at least 1"),
        ("x * * * *", "minute 'x' is not a number"),
        ("jan * * * *", "minute 'jan' is not a number"),
        ("0 0 * foo *", "month 'foo' is not a number or a month name (jan-dec)"),
        ("0 0 * * monday", "day-of-week 'monday' is not a number or a day name (sun-sat)"),
        ("1,,2 * * * *", "minute field '1,,2' has an empty list item"),
        ("0 0 * * 1,", "day-of-week field '1,' has an empty list item"),
        ("5- * * * *", "minute range '5-' is missing a bound"),
        ("50-10 * * * *", "minute range '50-10' is backwards: write the smaller value first"),
        (
            "0 0 * * fri-mon",
            "day-of-week range 'fri-mon' is backwards: write the smaller value first",
        ),
        ("0 0 30 2 *", "February never has 30 days: this schedule would never fire"),
        ("0 0 30,31 feb *", "February never has 30 or 31 days: this schedule would never fire"),
        (
            "0 0 31 4,6,9,11 *",
            "April, June, September and November never have 31 days: "
            "this schedule would never fire",
        ),
        (
            "0 0 31 2,4 */2",
            "February and April never have 31 days: this schedule would never fire",
        ),
        (
            "0 0 13 1 */7",
            "this schedule can go 11 years without firing: "
            "a schedule must fire at least once every five years",
        ),
        (
            "0 0 29 2 */7",
            "this schedule can go 28 years without firing: "
            "a schedule must fire at least once every five years",
        ),
        ("@reboot", "@reboot is not supported: a schedule needs times to fire"),
        (
            "@fortnightly",
            "unknown alias '@fortnightly': use @hourly, @daily, @weekly, @monthly, @yearly "
            "or @annually",
        ),
        ("@daily echo hi", "@daily stands alone: remove 'echo hi'"),
        ("1," * 300 + "1 * * * *", "cron expression is longer than 200 characters"),
    ],
)
def test_invalid_expression_is_rejected_with_an_actionable_message(expr: str, message: str) -> None:
    with pytest.raises(CronError) as raised:
        validate(expr, "UTC")
    assert str(raised.value) == message


@pytest.mark.parametrize("tz", ["Mars/Olympus", "", "localtime", "../etc/x"])
def test_unknown_time_zone_is_rejected_by_name(tz: str) -> None:
    with pytest.raises(CronError) as raised:
        validate("0 0 * * *", tz)
    assert str(raised.value) == f"unknown time zone '{tz}'"


@pytest.mark.parametrize(
    ("tz", "zone"),
    [("america/new_york", "America/New_York"), ("EUROPE/BERLIN", "Europe/Berlin"), ("utc", "UTC")],
)
def test_a_zone_name_matches_whatever_its_case(tz: str, zone: str) -> None:
    assert check_time_zone(tz) == zone
    assert validate("0 0 * * *", tz).tz == zone


@pytest.mark.parametrize(
    ("tz", "meant"),
    [
        ("Berlin", "Europe/Berlin"),
        ("new_york", "America/New_York"),
        ("Europe/Berln", "Europe/Berlin"),
    ],
)
def test_an_unknown_zone_says_which_one_was_probably_meant(tz: str, meant: str) -> None:
    with pytest.raises(CronError) as raised:
        check_time_zone(tz)
    assert str(raised.value) == f"unknown time zone '{tz}': did you mean {meant}?"


def test_a_legacy_fixed_offset_zone_is_accepted_with_a_warning() -> None:
    assert check_time_zone("EST") == "EST"
    warning = zone_warning("EST")
    assert warning is not None
    assert "fixed offset, UTC-05:00 all year" in warning and "America/New_York" in warning
    assert zone_warning("America/New_York") is None and zone_warning("UTC") is None


def test_cron_error_is_a_value_error() -> None:
    assert issubclass(CronError, ValueError)


def test_non_text_input_is_rejected() -> None:
    from_json: Any = None  # imported data may hold anything
    with pytest.raises(CronError, match="must be text"):
        validate(from_json, "UTC")


@pytest.mark.parametrize(
    "expr",
    [
        "* * * * *",
        "*/15 2 * * *",
        "0-10/5 1 * * *",
        "5/15 * * * *",
        "*/60 * * * *",
        "0 9 * JAN-Mar MON-FRI",
        "0 0 29 2 *",
        "0 0 29 2 1-5",
        "0 0 30 2 mon",
        "0 0 31 * *",
        "0 0 13 * */7",
        "0 0 * * 7",
        "0 0 * * 0-7",
        "59 23 31 12 *",
    ],
)
def test_valid_expression_is_accepted(expr: str) -> None:
    assert isinstance(validate(expr, "UTC"), CronSpec)


def test_validation_normalizes_whitespace_and_keeps_the_zone() -> None:
    spec = validate("  0   9\t* *  mon-fri ", "Europe/Berlin")
    assert spec.expression == "0 9 * * mon-fri"
    assert spec.fields == ("0", "9", "*", "*", "mon-fri")
    assert spec.tz == "Europe/Berlin"
    assert spec.weekdays == frozenset({1, 2, 3, 4, 5})


def test_validation_is_cached_per_expression_and_zone() -> None:
    assert validate("0 9 * * *", "Asia/Kolkata") is validate("0  9 * * *", "Asia/Kolkata")
    assert validate("0 9 * * *", "Asia/Kolkata") != validate("0 9 * * *", "UTC")


def test_names_are_case_insensitive_like_numbers() -> None:
    by_name = validate("0 0 * JAN-mar Mon,FRI", "UTC")
    by_number = validate("0 0 * 1-3 1,5", "UTC")
    assert (by_name.months, by_name.weekdays) == (by_number.months, by_number.weekdays)


def test_step_on_a_single_value_runs_to_the_end_of_the_range() -> None:
    assert validate("5/15 * * * *", "UTC").minutes == (5, 20, 35, 50)


def test_step_on_day_of_week_star_covers_zero_to_seven() -> None:
    assert validate("0 0 * * */2", "UTC").weekdays == frozenset({0, 2, 4, 6})
    assert validate("0 0 * * */7", "UTC").weekdays == frozenset({0})


# --- aliases ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "fields", "first_two"),
    [
        ("@hourly", "0 * * * *", ["2026-01-01T01:00", "2026-01-01T02:00"]),
        ("@daily", "0 0 * * *", ["2026-01-02T00:00", "2026-01-03T00:00"]),
        ("@midnight", "0 0 * * *", ["2026-01-02T00:00", "2026-01-03T00:00"]),
        ("@weekly", "0 0 * * 0", ["2026-01-04T00:00", "2026-01-11T00:00"]),
        ("@monthly", "0 0 1 * *", ["2026-02-01T00:00", "2026-03-01T00:00"]),
        ("@yearly", "0 0 1 1 *", ["2027-01-01T00:00", "2028-01-01T00:00"]),
        ("@annually", "0 0 1 1 *", ["2027-01-01T00:00", "2028-01-01T00:00"]),
    ],
)
def test_alias_fires_like_its_five_fields(alias: str, fields: str, first_two: list[str]) -> None:
    spec = validate(alias.upper(), "UTC")
    assert spec.expression == alias
    assert " ".join(spec.fields) == fields
    fires = spec.fire_times_between(utc(2026, 1, 1, 0, 30), utc(2030, 1, 1), limit=2)
    assert [f"{fire:%Y-%m-%dT%H:%M}" for fire in fires] == first_two


# --- day-of-month and day-of-week (Vixie cron) -------------------------------------------------


def test_both_day_fields_restricted_fire_when_either_matches() -> None:
    # January 2026: Fridays 2, 9, 16, 23, 30, and the 13th is a Tuesday.
    assert days_fired("0 0 13 * 5", utc(2026, 1, 1), utc(2026, 2, 1)) == [
        "2026-01-02",
        "2026-01-09",
        "2026-01-13",
        "2026-01-16",
        "2026-01-23",
        "2026-01-30",
    ]


def test_day_of_month_step_with_star_requires_both_fields_to_match() -> None:
    # Mondays in Jan-Feb 2026: 5, 12, 19, 26, 2, 9, 16, 23; only those on odd days fire.
    assert days_fired("0 0 */2 * 1", utc(2026, 1, 1), utc(2026, 3, 1)) == [
        "2026-01-05",
        "2026-01-19",
        "2026-02-09",
        "2026-02-23",
    ]


def test_day_of_week_step_with_star_requires_both_fields_to_match() -> None:
    # The 1st of the month on a Sunday, Tuesday, Thursday or Saturday.
    assert days_fired("0 0 1 * */2", utc(2026, 1, 1), utc(2026, 12, 31)) == [
        "2026-02-01",
        "2026-03-01",
        "2026-08-01",
        "2026-09-01",
        "2026-10-01",
        "2026-11-01",
        "2026-12-01",
    ]


def test_day_of_month_alone_fires_only_on_that_day() -> None:
    assert days_fired("0 0 13 * *", utc(2026, 1, 1), utc(2026, 3, 1)) == [
        "2026-01-13",
        "2026-02-13",
    ]


def test_day_of_week_seven_is_sunday() -> None:
    start, end = utc(2026, 1, 1), utc(2026, 1, 31)
    sundays = ["2026-01-04", "2026-01-11", "2026-01-18", "2026-01-25"]
    assert days_fired("0 0 * * 7", start, end) == sundays
    assert days_fired("0 0 * * 0", start, end) == sundays
    assert days_fired("0 0 * * sun", start, end) == sundays


def test_leap_day_fires_every_four_years() -> None:
    assert days_fired("0 0 29 2 *", utc(2025, 1, 1), utc(2033, 1, 1)) == [
        "2028-02-29",
        "2032-02-29",
    ]


def test_thirty_first_skips_short_months() -> None:
    assert days_fired("0 0 31 * *", utc(2026, 1, 1), utc(2026, 6, 1)) == [
        "2026-01-31",
        "2026-03-31",
        "2026-05-31",
    ]


# --- fire-time API -----------------------------------------------------------------------------


def test_next_fire_after_is_strictly_after() -> None:
    hourly = validate("0 * * * *", "UTC")
    assert hourly.next_fire_after(utc(2026, 1, 1, 5)) == utc(2026, 1, 1, 6)
    assert hourly.next_fire_after(utc(2026, 1, 1, 4, 59, 59)) == utc(2026, 1, 1, 5)


def test_next_fire_after_accepts_any_aware_input_and_answers_in_utc() -> None:
    spec = validate("30 9 * * *", "Asia/Kolkata")
    after = wall_time_to_utc(datetime(2026, 5, 1, 12, 0), "Asia/Kolkata")
    assert spec.next_fire_after(after) == utc(2026, 5, 2, 4, 0)
    fire = spec.next_fire_after(after.astimezone(spec.zone))
    assert fire == utc(2026, 5, 2, 4) and fire.tzinfo == UTC


def test_next_fire_after_refuses_a_naive_datetime() -> None:
    with pytest.raises(ValueError, match="aware"):
        validate("0 * * * *", "UTC").next_fire_after(datetime(2026, 1, 1))


def test_fire_times_between_excludes_start_includes_end_and_honours_limit() -> None:
    hourly, minutely = validate("0 * * * *", "UTC"), validate("* * * * *", "UTC")
    fires = hourly.fire_times_between(utc(2026, 1, 1, 0), utc(2026, 1, 1, 3))
    assert fires == [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2), utc(2026, 1, 1, 3)]
    assert minutely.fire_times_between(utc(2026, 1, 1), utc(2027, 1, 1), 4) == [
        utc(2026, 1, 1, 0, minute) for minute in range(1, 5)
    ]
    assert hourly.fire_times_between(utc(2026, 1, 1, 0), utc(2026, 1, 1, 0, 59)) == []


def test_search_past_year_9999_raises_cron_error() -> None:
    with pytest.raises(CronError, match="does not fire"):
        validate("0 0 1 1 *", "UTC").next_fire_after(utc(9999, 6, 1))


@pytest.mark.parametrize(
    ("expr", "wildcard"),
    [
        ("*/15 2 * * *", True),
        ("0 * * * *", True),
        ("* 2 * * *", True),
        ("@hourly", True),
        ("30 2 * * *", False),
        ("0-59 2 * * *", False),
        ("0 0-23 * * *", False),
        ("@daily", False),
        ("0 0 * * *", False),
    ],
)
def test_wildcard_job_has_minute_or_hour_starting_with_star(expr: str, wildcard: bool) -> None:
    assert validate(expr, "Europe/Berlin").wildcard is wildcard


# --- descriptions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        ("30 2 * * *", "At 02:30"),
        ("0 17 * * mon-fri", "At 17:00, Monday through Friday"),
        ("*/15 1 * * *", "Every 15 minutes, between 01:00 and 01:59"),
        ("0 0 13 * 5", "At 00:00, on day 13 of the month, or on Friday"),
        ("0 0 */2 * 1", "At 00:00, every 2 days, only on Monday"),
        ("@hourly", "Every hour"),
        ("@weekly", "At 00:00, only on Sunday"),
    ],
)
def test_description_is_plain_english_with_24_hour_times(expr: str, text: str) -> None:
    assert describe(validate(expr, "UTC")) == text
    assert describe(validate(expr, "Asia/Kolkata")) == text


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (
            "*/7 * * * *",
            "Every 7 minutes (from :00 each hour; the gap across the hour is 4 minutes)",
        ),
        (
            "*/45 * * * *",
            "Every 45 minutes (from :00 each hour; the gap across the hour is 15 minutes)",
        ),
        (
            "10-50/15 8-17 * * *",
            "Every 15 minutes, minutes 10 through 50 past the hour, between 08:00 and 17:59 "
            "(from :10 each hour; the gap across the hour is 30 minutes)",
        ),
        ("0 */5 * * *", "Every 5 hours (from 00:00 each day; the gap across midnight is 4 hours)"),
        (
            "0 0 */10 * *",
            "At 00:00, every 10 days "
            "(from day 1 each month; the gap across the month end is 1 to 10 days)",
        ),
        (
            "0 0 1 */5 *",
            "At 00:00, on day 1 of the month, every 5 months "
            "(from January each year; the gap across the year end is 2 months)",
        ),
        # Steps that divide the range, or a wrap no fire crosses: no note.
        ("*/10 * * * *", "Every 10 minutes"),
        ("5/15 * * * *", "Every 15 minutes, starting at 5 minutes past the hour"),
        ("*/7 9 * * *", "Every 7 minutes, between 09:00 and 09:59"),
        ("0 */2 * * *", "Every 2 hours"),
        ("0 */5 * * 1", "Every 5 hours, only on Monday"),
        ("0 0 */2 1 *", "At 00:00, every 2 days, only in January"),
        ("0 0 1 */4 *", "At 00:00, on day 1 of the month, every 4 months"),
    ],
)
def test_a_step_that_does_not_divide_its_range_says_the_real_gap(expr: str, text: str) -> None:
    assert describe(validate(expr, "UTC")) == text


def test_the_gap_note_matches_the_fire_times() -> None:
    spec = validate("*/7 * * * *", "UTC")
    fires = spec.fire_times_between(utc(2026, 1, 1, 0, 50), utc(2026, 1, 1, 1, 1))
    assert [f"{fire:%H:%M}" for fire in fires] == ["00:56", "01:00"]  # 4 minutes


# --- wall-clock input ---------------------------------------------------------------------------


def test_wall_time_is_converted_in_its_zone() -> None:
    assert wall_time_to_utc(datetime(2026, 7, 1, 12, 0), "Europe/Berlin") == utc(2026, 7, 1, 10)


def test_repeated_wall_time_means_its_first_occurrence() -> None:
    assert wall_time_to_utc(datetime(2026, 11, 1, 1, 30), "America/New_York") == utc(
        2026, 11, 1, 5, 30
    )


def test_skipped_wall_time_means_just_before_the_clock_jumps() -> None:
    after = wall_time_to_utc(datetime(2026, 3, 8, 2, 30), "America/New_York")
    assert after < utc(2026, 3, 8, 7) and after > utc(2026, 3, 8, 6, 59)
    assert validate("30 2 * * *", "America/New_York").next_fire_after(after) == utc(2026, 3, 8, 7)


def test_aware_wall_time_is_only_converted() -> None:
    assert wall_time_to_utc(utc(2026, 1, 1, 3), "Asia/Kolkata") == utc(2026, 1, 1, 3)


def test_wall_time_in_unknown_zone_is_rejected() -> None:
    with pytest.raises(CronError, match="unknown time zone 'Nowhere'"):
        wall_time_to_utc(datetime(2026, 1, 1), "Nowhere")
