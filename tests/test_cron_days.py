"""The extended day syntax: L and LW in day-of-month, D#N, D#L and DL in day-of-week; which days
they fire on, how they combine with the other day field, what is refused and why."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.cron_helpers import utc
from webapp.cron import CronError, describe, validate


def days_fired(expr: str, start: datetime, count: int, tz: str = "UTC") -> list[str]:
    spec = validate(expr, tz)
    fires = spec.fire_times_between(start, utc(2100, 1, 1), count)
    return [fire.astimezone(spec.zone).date().isoformat() for fire in fires]


# 2026: January 31 is a Saturday, February 28 a Saturday, May 31 a Sunday.
@pytest.mark.parametrize(
    ("expr", "days"),
    [
        ("0 0 L * *", ["2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30", "2026-05-31"]),
        ("0 0 l * *", ["2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30", "2026-05-31"]),
        # The last weekday: Friday when the month ends on a Saturday or Sunday.
        ("0 0 LW * *", ["2026-01-30", "2026-02-27", "2026-03-31", "2026-04-30", "2026-05-29"]),
        ("0 8 * * MON#1", ["2026-01-05", "2026-02-02", "2026-03-02", "2026-04-06", "2026-05-04"]),
        ("0 8 * * 5#3", ["2026-01-16", "2026-02-20", "2026-03-20", "2026-04-17", "2026-05-15"]),
        ("0 8 * * FRI#L", ["2026-01-30", "2026-02-27", "2026-03-27", "2026-04-24", "2026-05-29"]),
        # A fifth Monday exists in some months only; the others are simply skipped.
        ("0 8 * * MON#5", ["2026-03-30", "2026-06-29", "2026-08-31", "2026-11-30", "2027-03-29"]),
        # Sunday is 0 or 7, as everywhere in day-of-week.
        ("0 8 * * 7#1", ["2026-01-04", "2026-02-01", "2026-03-01", "2026-04-05", "2026-05-03"]),
        # Lists mix the rules with ordinary values.
        ("0 0 1,L * *", ["2026-01-01", "2026-01-31", "2026-02-01", "2026-02-28", "2026-03-01"]),
        ("0 0 15,LW 1 *", ["2026-01-15", "2026-01-30", "2027-01-15", "2027-01-29", "2028-01-15"]),
        ("0 0 * * MON#1,FRI#L", ["2026-01-05", "2026-01-30", "2026-02-02", "2026-02-27"]),
        ("0 0 * 1 TUE,FRI#L", ["2026-01-06", "2026-01-13", "2026-01-20", "2026-01-27"]),
        # Both day fields restricted: a day matching either fires (Debian's rule).
        ("0 0 L 1 MON", ["2026-01-05", "2026-01-12", "2026-01-19", "2026-01-26", "2026-01-31"]),
        ("0 0 13 * FRI#L", ["2026-01-13", "2026-01-30", "2026-02-13", "2026-02-27", "2026-03-13"]),
        # One field starting with '*' (even '*/2'): both must match (Debian's rule).
        ("0 0 */2 * MON#1", ["2026-01-05", "2026-06-01", "2026-08-03", "2026-09-07"]),
        ("0 0 L * */7", ["2026-05-31", "2027-01-31", "2027-02-28", "2027-10-31", "2028-04-30"]),
        # Leap years: the last day of February.
        ("0 0 L 2 *", ["2026-02-28", "2027-02-28", "2028-02-29", "2029-02-28", "2030-02-28"]),
    ],
)
def test_the_rule_fires_on_the_days_it_names(expr: str, days: list[str]) -> None:
    assert days_fired(expr, utc(2025, 12, 31, 12), len(days)) == days


@pytest.mark.parametrize(
    "spellings",
    [
        ("0 9 * * 5L", "0 9 * * FRI#L", "0 9 * * fri#l", "0 9 * * FRIL", "0 9 * * 5#L"),
        ("0 9 * * 0#2", "0 9 * * 7#2", "0 9 * * SUN#2", "0 9 * * sun#2"),
        ("0 9 * * 0L", "0 9 * * 7L", "0 9 * * SUNL", "0 9 * * SUN#L"),
    ],
)
def test_every_spelling_of_a_rule_fires_alike(spellings: tuple[str, ...]) -> None:
    fired = {tuple(days_fired(expr, utc(2026, 1, 1), 30)) for expr in spellings}
    assert len(fired) == 1


def test_a_fifth_monday_of_february_is_valid_though_it_fires_once_in_28_years() -> None:
    # February 29 falls on a Monday in 2016, 2044 and 2072.
    assert days_fired("0 0 * 2 MON#5", utc(2016, 1, 1), 3) == [
        "2016-02-29",
        "2044-02-29",
        "2072-02-29",
    ]


def test_a_rule_in_a_zone_fires_at_local_midnight_of_the_local_day() -> None:
    fires = validate("0 0 L * *", "Asia/Kolkata").fire_times_between(
        utc(2026, 1, 1), utc(2026, 3, 1)
    )
    assert fires == [utc(2026, 1, 30, 18, 30), utc(2026, 2, 27, 18, 30)]


# Europe/Berlin changes its clocks on the last Sunday of March (02:00 -> 03:00) and of October
# (03:00 -> 02:00): the same DST rules apply as on any other day.
def test_a_fixed_time_in_the_skipped_hour_runs_at_the_end_of_the_gap_on_a_rule_day() -> None:
    spec = validate("30 2 * * SUN#L", "Europe/Berlin")
    assert spec.next_fire_after(utc(2026, 3, 1)) == utc(2026, 3, 29, 1)  # 03:00 CEST
    assert spec.dst_note(utc(2026, 3, 29, 1)) == "02:30 does not exist on this day: runs at 03:00"


def test_a_wildcard_job_fires_in_both_passes_of_the_repeated_hour_on_a_rule_day() -> None:
    spec = validate("0 * * 10 7L", "Europe/Berlin")
    fires = spec.fire_times_between(utc(2026, 10, 24, 22, 30), utc(2026, 10, 25, 2, 30))
    assert [f"{fire.astimezone(spec.zone):%H:%M %Z}" for fire in fires] == [
        "01:00 CEST",
        "02:00 CEST",
        "02:00 CET",
        "03:00 CET",
    ]


def test_a_fixed_time_job_fires_in_the_first_pass_only_on_a_rule_day() -> None:
    spec = validate("30 2 * * SUN#L", "Europe/Berlin")
    fires = spec.fire_times_between(utc(2026, 10, 24), utc(2026, 10, 26))
    assert fires == [utc(2026, 10, 25, 0, 30)]  # 02:30 CEST


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (
            "0 0 * * MON#6",
            "day-of-week 'MON#6': the number after # must be 1 to 5 (a month has at most five "
            "of each weekday), or L for the last",
        ),
        (
            "0 0 * * 1#0",
            "day-of-week '1#0': the number after # must be 1 to 5 (a month has at most five "
            "of each weekday), or L for the last",
        ),
        ("0 0 * * 8#1", "day-of-week 8 is out of range 0-7"),
        ("0 0 * * FUN#1", "day-of-week 'FUN' is not a number or a day name (sun-sat)"),
        (
            "0 0 * * #1",
            "day-of-week '#1' needs a day before #, as in MON#1 (the first Monday) or FRI#L "
            "(the last Friday)",
        ),
        (
            "L * * * *",
            "minute 'L': L (the last) belongs in the day-of-month field (L, LW) or the "
            "day-of-week field (FRI#L, 5L)",
        ),
        (
            "0 0 * L *",
            "month 'L': L (the last) belongs in the day-of-month field (L, LW) or the "
            "day-of-week field (FRI#L, 5L)",
        ),
        (
            "0 0 1#1 * *",
            "day-of-month '1#1': # (the n-th weekday of the month, as in MON#1) belongs in the "
            "day-of-week field",
        ),
        (
            "0 0 * * LW",
            "day-of-week 'LW': LW (the last weekday of the month) belongs in the day-of-month "
            "field",
        ),
        (
            "0 0 * * L",
            "day-of-week 'L' needs a day before it, as in FRI#L or 5L (the last Friday); L "
            "alone, the last day of the month, belongs in the day-of-month field",
        ),
        (
            "0 0 L-3 * *",
            "day-of-month 'L-3': offsets from the last day are not supported; use L (the last "
            "day) or LW (the last weekday)",
        ),
        (
            "0 0 15W * *",
            "day-of-month '15W': W (the nearest weekday) is supported only as LW, the last "
            "weekday of the month",
        ),
        (
            "0 0 5L * *",
            "day-of-month '5L' is not a number, L (the last day) or LW (the last weekday)",
        ),
        (
            "0 0 L/2 * *",
            "day-of-month 'L/2': L cannot be part of a range or step; list the days instead, "
            "as in 1,15,L",
        ),
        (
            "0 0 25-L * *",
            "day-of-month '25-L': L cannot be part of a range or step; list the days instead, "
            "as in 1,15,L",
        ),
        (
            "0 0 * * MON-FRI#1",
            "day-of-week 'MON-FRI#1': # cannot be part of a range or step; list the days "
            "instead, as in MON#1,FRI#L",
        ),
        (
            "0 0 * * 1#1/2",
            "day-of-week '1#1/2': # cannot be part of a range or step; list the days instead, "
            "as in MON#1,FRI#L",
        ),
        (
            "0 0 * * 1-5L",
            "day-of-week '1-5L': L cannot be part of a range or step; list the days instead, "
            "as in MON#1,FRI#L",
        ),
        # A day must match both fields when one starts with '*': none of February's does.
        (
            "0 0 */30 2 MON#5",
            "no day of February matches both day fields: this schedule would never fire",
        ),
        # Unchanged for standard expressions.
        ("0 0 30 2 *", "February never has 30 days: this schedule would never fire"),
    ],
)
def test_a_misused_rule_is_refused_with_what_to_write(expr: str, message: str) -> None:
    with pytest.raises(CronError) as raised:
        validate(expr, "UTC")
    assert str(raised.value) == message


@pytest.mark.parametrize("expr", ["0 0 * jul *", "0 0 * * wed", "0 0 * JUL WED"])
def test_names_with_an_l_or_a_w_are_still_names(expr: str) -> None:
    validate(expr, "UTC")


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        ("0 0 L * *", "At 00:00, on the last day of the month"),
        ("0 18 LW * *", "At 18:00, on the last weekday of the month"),
        ("0 8 * * MON#1", "At 08:00, on the first Monday of the month"),
        ("0 8 * * 1#1", "At 08:00, on the first Monday of the month"),
        ("30 17 * * FRI#L", "At 17:30, on the last Friday of the month"),
        ("30 17 * * 5L", "At 17:30, on the last Friday of the month"),
        ("0 0 * 2 MON#5", "At 00:00, on the fifth Monday of the month, only in February"),
        ("0 0 1,L * *", "At 00:00, on day 1 and the last day of the month"),
        (
            "0 0 1,10-12,L,LW * *",
            "At 00:00, on day 1, days 10 to 12, the last day and the last weekday of the month",
        ),
        ("0 9 * * MON#1,FRI#L", "At 09:00, on the first Monday and the last Friday of the month"),
        ("0 9 * * TUE,5L", "At 09:00, on every Tuesday and the last Friday of the month"),
        # Both day fields restricted: either.
        ("0 0 L * MON", "At 00:00, on the last day of the month, or on Monday"),
        ("0 0 L * 1-5", "At 00:00, on the last day of the month, or Monday through Friday"),
        (
            "0 0 15 * MON#2",
            "At 00:00, on day 15 of the month, or on the second Monday of the month",
        ),
        # One day field starting with '*': both.
        ("0 0 */2 * MON#1", "At 00:00, every 2 days, only on the first Monday of the month"),
        (
            "*/15 9-17 LW 1-6 *",
            "Every 15 minutes, between 09:00 and 17:59, on the last weekday of the month, "
            "January through June",
        ),
        # The last day and the 1st are two days in a row: the gap across midnight shows.
        (
            "0 */5 1,L * *",
            "Every 5 hours, on day 1 and the last day of the month (from 00:00 each day; the "
            "gap across midnight is 4 hours)",
        ),
        ("0 */5 L * *", "Every 5 hours, on the last day of the month"),
    ],
)
def test_a_rule_is_described_in_words(expr: str, text: str) -> None:
    assert describe(validate(expr, "UTC")) == text
