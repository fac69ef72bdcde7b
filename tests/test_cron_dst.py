"""Daylight-saving time: Debian cron's rules, pinned by tables and checked by properties.

Wildcard job = minute or hour field starts with '*'; every other job is fixed-time.
Spring forward: a fixed-time job in the gap fires once at the first instant after it; a
wildcard job follows the new clock. Fall back: a wildcard job fires in both passes of the
repeated hour, a fixed-time job only in the first. No two fires share an instant.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cron_helpers import DST_ZONES, EXTRA_ZONES, oracle_fires, transitions, utc
from webapp.cron import (
    CronError,
    clock_changes,
    describe,
    no_clock_changes,
    validate,
)

NY, BERLIN, SYDNEY, LORD_HOWE, KOLKATA = DST_ZONES


def fires_from(tz: str, expr: str, after: datetime, count: int) -> list[str]:
    """The next `count` fires as "MM-DDTHH:MMZ HH:MM ABBR" (UTC, then local)."""
    spec = validate(expr, tz)
    rendered = []
    for fire in spec.iter_fire_times(after):
        local = fire.astimezone(spec.zone)
        rendered.append(f"{fire:%m-%dT%H:%MZ} {local:%H:%M %Z}")
        if len(rendered) == count:
            return rendered
    raise AssertionError("unreachable")


def check(tz: str, expr: str, after: datetime, expected: list[str]) -> None:
    assert fires_from(tz, expr, after, len(expected)) == expected


# --- America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST ---


def test_fixed_time_job_in_spring_gap_fires_at_first_instant_after() -> None:
    check(
        NY, "30 2 * * *", utc(2026, 3, 7, 12), ["03-08T07:00Z 03:00 EDT", "03-09T06:30Z 02:30 EDT"]
    )


def test_a_fire_moved_out_of_a_skipped_day_says_so() -> None:
    """Pacific/Apia skipped all of 2011-12-30: its 01:00 runs at the first instant after, 00:00
    of an ordinary day, and the note says why (it said nothing: the day looked ordinary)."""
    spec = validate("0 1 * * *", "Pacific/Apia")
    fire = spec.next_fire_after(utc(2011, 12, 30, 9, 53))
    assert fire == utc(2011, 12, 30, 10)
    assert spec.dst_note(fire) == "01:00 does not exist on this day: runs at 00:00"


def test_wildcard_job_in_spring_gap_does_not_fire_that_day() -> None:
    check(NY, "*/15 2 * * *", utc(2026, 3, 7, 12), ["03-09T06:00Z 02:00 EDT"])


def test_hourly_job_follows_the_new_clock_after_spring_forward() -> None:
    check(
        NY,
        "0 * * * *",
        utc(2026, 3, 8, 5, 30),
        ["03-08T06:00Z 01:00 EST", "03-08T07:00Z 03:00 EDT", "03-08T08:00Z 04:00 EDT"],
    )


def test_several_fixed_times_in_spring_gap_fire_once() -> None:
    check(
        NY,
        "0-10/5 2 * * *",
        utc(2026, 3, 7, 12),
        ["03-08T07:00Z 03:00 EDT", "03-09T06:00Z 02:00 EDT"],
    )


def test_fixed_time_moved_out_of_gap_does_not_double_a_fire_at_the_same_instant() -> None:
    check(
        NY, "0 2,3 * * *", utc(2026, 3, 7, 12), ["03-08T07:00Z 03:00 EDT", "03-09T06:00Z 02:00 EDT"]
    )


def test_hourly_wildcard_job_fires_in_both_passes_of_repeated_hour() -> None:
    check(
        NY,
        "0 * * * *",
        utc(2026, 11, 1, 4, 30),
        ["11-01T05:00Z 01:00 EDT", "11-01T06:00Z 01:00 EST", "11-01T07:00Z 02:00 EST"],
    )


def test_quarter_hour_wildcard_job_fires_eight_times_in_repeated_hour() -> None:
    check(
        NY,
        "*/15 1 * * *",
        utc(2026, 11, 1, 4),
        [
            "11-01T05:00Z 01:00 EDT",
            "11-01T05:15Z 01:15 EDT",
            "11-01T05:30Z 01:30 EDT",
            "11-01T05:45Z 01:45 EDT",
            "11-01T06:00Z 01:00 EST",
            "11-01T06:15Z 01:15 EST",
            "11-01T06:30Z 01:30 EST",
            "11-01T06:45Z 01:45 EST",
            "11-02T06:00Z 01:00 EST",
        ],
    )


def test_fixed_time_job_fires_only_in_first_pass_of_repeated_hour() -> None:
    check(
        NY, "30 1 * * *", utc(2026, 11, 1, 4), ["11-01T05:30Z 01:30 EDT", "11-02T06:30Z 01:30 EST"]
    )


def test_fixed_minute_range_fires_three_times_not_six_in_repeated_hour() -> None:
    check(
        NY,
        "0-10/5 1 * * *",
        utc(2026, 11, 1, 4),
        [
            "11-01T05:00Z 01:00 EDT",
            "11-01T05:05Z 01:05 EDT",
            "11-01T05:10Z 01:10 EDT",
            "11-02T06:00Z 01:00 EST",
        ],
    )


def test_fixed_time_job_searched_from_second_pass_waits_for_the_next_day() -> None:
    check(NY, "30 1 * * *", utc(2026, 11, 1, 6, 10), ["11-02T06:30Z 01:30 EST"])


# --- Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET ---


def test_berlin_fixed_time_job_in_spring_gap_fires_at_three() -> None:
    check(
        BERLIN,
        "30 2 * * *",
        utc(2026, 3, 28, 12),
        ["03-29T01:00Z 03:00 CEST", "03-30T00:30Z 02:30 CEST"],
    )


def test_berlin_half_hourly_job_skips_the_missing_hour() -> None:
    check(
        BERLIN,
        "*/30 * * * *",
        utc(2026, 3, 29, 0, 15),
        ["03-29T00:30Z 01:30 CET", "03-29T01:00Z 03:00 CEST", "03-29T01:30Z 03:30 CEST"],
    )


def test_berlin_fixed_time_job_fires_once_on_fall_back() -> None:
    check(
        BERLIN,
        "30 2 * * *",
        utc(2026, 10, 24, 12),
        ["10-25T00:30Z 02:30 CEST", "10-26T01:30Z 02:30 CET"],
    )


def test_berlin_wildcard_hour_job_fires_in_both_passes() -> None:
    check(
        BERLIN,
        "*/30 2 * * *",
        utc(2026, 10, 24, 12),
        [
            "10-25T00:00Z 02:00 CEST",
            "10-25T00:30Z 02:30 CEST",
            "10-25T01:00Z 02:00 CET",
            "10-25T01:30Z 02:30 CET",
            "10-26T01:00Z 02:00 CET",
        ],
    )


# --- Australia/Sydney (southern hemisphere): spring 2026-10-04, fall 2026-04-05 ---------------


def test_sydney_fixed_time_job_in_october_gap_fires_at_three() -> None:
    check(
        SYDNEY,
        "30 2 * * *",
        utc(2026, 10, 3, 12),
        ["10-03T16:00Z 03:00 AEDT", "10-04T15:30Z 02:30 AEDT"],
    )


def test_sydney_every_minute_of_missing_hour_job_waits_a_day() -> None:
    check(
        SYDNEY,
        "* 2 * * *",
        utc(2026, 10, 3, 15, 58),
        ["10-04T15:00Z 02:00 AEDT", "10-04T15:01Z 02:01 AEDT", "10-04T15:02Z 02:02 AEDT"],
    )


def test_sydney_fixed_time_job_fires_once_in_april() -> None:
    check(
        SYDNEY,
        "30 2 * * *",
        utc(2026, 4, 4, 12),
        ["04-04T15:30Z 02:30 AEDT", "04-05T16:30Z 02:30 AEST"],
    )


def test_sydney_hourly_job_fires_twice_at_two_in_april() -> None:
    check(
        SYDNEY,
        "0 * * * *",
        utc(2026, 4, 4, 14, 30),
        ["04-04T15:00Z 02:00 AEDT", "04-04T16:00Z 02:00 AEST", "04-04T17:00Z 03:00 AEST"],
    )


# --- Australia/Lord_Howe: 30-minute shifts, 02:00 -> 02:30 and 02:00 -> 01:30 -----------------


def test_lord_howe_fixed_time_in_half_hour_gap_fires_at_half_past_two() -> None:
    check(
        LORD_HOWE,
        "15 2 * * *",
        utc(2026, 10, 3, 12),
        ["10-03T15:30Z 02:30 +11", "10-04T15:15Z 02:15 +11"],
    )


def test_lord_howe_wildcard_job_fires_only_after_the_half_hour_gap() -> None:
    check(
        LORD_HOWE,
        "*/15 2 * * *",
        utc(2026, 10, 3, 12),
        ["10-03T15:30Z 02:30 +11", "10-03T15:45Z 02:45 +11", "10-04T15:00Z 02:00 +11"],
    )


def test_lord_howe_fixed_time_in_repeated_half_hour_fires_once() -> None:
    check(
        LORD_HOWE,
        "45 1 * * *",
        utc(2026, 4, 4, 12),
        ["04-04T14:45Z 01:45 +11", "04-05T15:15Z 01:45 +1030"],
    )


def test_lord_howe_wildcard_job_repeats_only_the_repeated_half_hour() -> None:
    check(
        LORD_HOWE,
        "*/20 1 * * *",
        utc(2026, 4, 4, 12),
        [
            "04-04T14:00Z 01:00 +11",
            "04-04T14:20Z 01:20 +11",
            "04-04T14:40Z 01:40 +11",
            "04-04T15:10Z 01:40 +1030",
            "04-05T14:30Z 01:00 +1030",
            "04-05T14:50Z 01:20 +1030",
        ],
    )


# --- Asia/Kolkata: a half-hour offset without DST ----------------------------------------------


def test_kolkata_fixed_time_job_fires_every_day_at_half_past_offset() -> None:
    check(
        KOLKATA,
        "30 2 * * *",
        utc(2026, 3, 7, 12),
        ["03-07T21:00Z 02:30 IST", "03-08T21:00Z 02:30 IST"],
    )


def test_kolkata_weekday_job_skips_the_weekend() -> None:
    check(
        KOLKATA,
        "0 9 * * mon-fri",
        utc(2026, 3, 6, 12),
        ["03-09T03:30Z 09:00 IST", "03-10T03:30Z 09:00 IST"],
    )


def test_kolkata_wildcard_job_keeps_local_minutes() -> None:
    check(
        KOLKATA,
        "*/45 * * * *",
        utc(2026, 3, 7, 20),
        ["03-07T20:15Z 01:45 IST", "03-07T20:30Z 02:00 IST", "03-07T21:15Z 02:45 IST"],
    )


# --- zones with unusual changes ------------------------------------------------------------------


def test_change_at_midnight_moves_fixed_time_job_to_one_oclock() -> None:
    # America/Santiago, 2026-09-06: 00:00 -04 -> 01:00 -03.
    check(
        "America/Santiago",
        "30 0 * * *",
        utc(2026, 9, 5, 12),
        ["09-06T04:00Z 01:00 -03", "09-07T03:30Z 00:30 -03"],
    )


def test_skipped_calendar_day_runs_its_fixed_time_jobs_at_the_next_midnight() -> None:
    # Pacific/Apia skipped 2011-12-30 entirely: 12-29 24:00 -10 became 12-31 00:00 +14.
    check("Pacific/Apia", "0 12 30 12 *", utc(2011, 12, 1), ["12-30T10:00Z 00:00 +14"])
    # A wildcard job follows the clock: next 2012-12-30 00:00 +14.
    check("Pacific/Apia", "0 * 30 12 *", utc(2011, 12, 1), ["12-29T10:00Z 00:00 +14"])


# --- notes for the preview ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tz", "expr", "fire", "note"),
    [
        (NY, "30 2 * * *", utc(2026, 3, 8, 7), "02:30 does not exist on this day: runs at 03:00"),
        (
            NY,
            "0-10/5 2 * * *",
            utc(2026, 3, 8, 7),
            "02:00, 02:05 and 02:10 do not exist on this day: runs once at 03:00",
        ),
        (
            NY,
            "0-59 2 * * *",
            utc(2026, 3, 8, 7),
            "02:00-02:59 does not exist on this day: runs once at 03:00",
        ),
        (NY, "0 * * * *", utc(2026, 11, 1, 5), "01:00-01:59 happens twice: fires in both"),
        (NY, "0 * * * *", utc(2026, 11, 1, 6), "01:00-01:59 happens twice: fires in both"),
        (
            NY,
            "30 1 * * *",
            utc(2026, 11, 1, 5, 30),
            "01:00-01:59 happens twice: fires in the first only",
        ),
        (
            LORD_HOWE,
            "15 2 * * *",
            utc(2026, 10, 3, 15, 30),
            "02:15 does not exist on this day: runs at 02:30",
        ),
        (
            LORD_HOWE,
            "*/20 1 * * *",
            utc(2026, 4, 4, 15, 10),
            "01:30-01:59 happens twice: fires in both",
        ),
        (
            BERLIN,
            "30 2 * * *",
            utc(2026, 10, 25, 0, 30),
            "02:00-02:59 happens twice: fires in the first only",
        ),
    ],
)
def test_fire_shaped_by_a_dst_rule_carries_a_note(
    tz: str, expr: str, fire: datetime, note: str
) -> None:
    assert validate(expr, tz).dst_note(fire) == note


@pytest.mark.parametrize(
    ("tz", "expr", "fire"),
    [
        (NY, "30 2 * * *", utc(2026, 3, 9, 6, 30)),
        (NY, "0 * * * *", utc(2026, 3, 8, 7)),  # a wildcard job just follows the new clock
        (NY, "0 3 * * *", utc(2026, 3, 8, 7)),  # 03:00 exists; nothing was moved there
        (KOLKATA, "30 2 * * *", utc(2026, 3, 7, 21)),
    ],
)
def test_ordinary_fire_has_no_note(tz: str, expr: str, fire: datetime) -> None:
    assert validate(expr, tz).dst_note(fire) is None


# --- the zone's next clock changes, for the preview ------------------------------------------

NY_SPRING = "2027-03-14: clocks go forward 1 hour at 02:00 (EST to EDT)"
NY_FALL = "2027-11-07: clocks go back 1 hour at 02:00 (EDT to EST)"


@pytest.mark.parametrize(
    ("tz", "expr", "expected"),
    [
        (
            NY,
            "30 2 * * *",
            [f"{NY_SPRING}: 02:30 does not exist; runs at 03:00 EDT", f"{NY_FALL}: not affected"],
        ),
        (
            NY,
            "30 1 * * *",
            [
                f"{NY_SPRING}: not affected",
                f"{NY_FALL}: 01:30 happens twice; runs once, at 01:30 EDT",
            ],
        ),
        (
            NY,
            "0-10/5 2 * * *",
            [
                f"{NY_SPRING}: 02:00, 02:05 and 02:10 do not exist; runs once, at 03:00 EDT",
                f"{NY_FALL}: not affected",
            ],
        ),
        (
            NY,
            "0 * * * *",
            [
                # 03:00 EDT is the job's own time, not a moved one.
                f"{NY_SPRING}: 02:00 does not exist; "
                "skipped (a wildcard job follows the new clock)",
                f"{NY_FALL}: 01:00 happens twice; "
                "a wildcard job fires at both: 01:00 EDT and 01:00 EST",
            ],
        ),
        (
            NY,
            "*/15 1 * * *",
            [
                f"{NY_SPRING}: not affected",
                f"{NY_FALL}: 01:00-01:45 happens twice; a wildcard job fires in both passes: "
                "4 times in EDT, 4 in EST",
            ],
        ),
        (
            NY,
            "0 12 * * *",
            [f"{NY_SPRING}: not affected", f"{NY_FALL}: not affected"],
        ),
        (
            BERLIN,
            "30 2 * * *",
            [
                "2027-03-28: clocks go forward 1 hour at 02:00 (CET to CEST): "
                "02:30 does not exist; runs at 03:00 CEST",
                "2027-10-31: clocks go back 1 hour at 03:00 (CEST to CET): "
                "02:30 happens twice; runs once, at 02:30 CEST",
            ],
        ),
        (
            LORD_HOWE,
            "15 2 * * *",
            [
                "2027-04-04: clocks go back 30 minutes at 02:00 (+11 to +1030): not affected",
                "2027-10-03: clocks go forward 30 minutes at 02:00 (+1030 to +11): "
                "02:15 does not exist; runs at 02:30 +11",
            ],
        ),
        (
            LORD_HOWE,
            "*/20 1 * * *",
            [
                "2027-04-04: clocks go back 30 minutes at 02:00 (+11 to +1030): "
                "01:40 happens twice; a wildcard job fires at both: 01:40 +11 and 01:40 +1030",
                "2027-10-03: clocks go forward 30 minutes at 02:00 (+1030 to +11): not affected",
            ],
        ),
    ],
)
def test_preview_says_what_happens_at_the_next_two_clock_changes(
    tz: str, expr: str, expected: list[str]
) -> None:
    changes = clock_changes(validate(expr, tz), utc(2026, 12, 3))
    assert [str(change) for change in changes] == expected


def test_clock_changes_start_after_the_given_instant() -> None:
    changes = clock_changes(validate("30 2 * * *", NY), utc(2027, 3, 14, 7))  # after the gap
    assert [change.day.isoformat() for change in changes] == ["2027-11-07", "2028-03-12"]
    assert changes[0].at == utc(2027, 11, 7, 6)


def test_a_zone_without_dst_has_no_clock_changes_and_says_so() -> None:
    assert clock_changes(validate("30 2 * * *", KOLKATA), utc(2026, 12, 3)) == []
    assert no_clock_changes(KOLKATA) == (
        "Asia/Kolkata does not change its clocks (no daylight-saving time) in the next two years"
    )


# --- properties ----------------------------------------------------------------------------

PROPERTY_ZONES = (*DST_ZONES, *EXTRA_ZONES, "America/St_Johns", "Antarctica/Troll")


@st.composite
def field_items(draw: st.DrawFn, low: int, high: int, picks: tuple[int, ...]) -> str:
    value = st.one_of(st.sampled_from(picks), st.integers(low, high))
    kind = draw(
        st.sampled_from(("value", "range", "range-step", "value-step", "star-step", "star"))
    )
    if kind == "value":
        return str(draw(value))
    if kind == "star":
        return "*"
    if kind == "star-step":
        return f"*/{draw(st.integers(1, 20))}"
    if kind == "value-step":
        return f"{draw(value)}/{draw(st.integers(1, 20))}"
    a, b = sorted((draw(value), draw(value)))
    return f"{a}-{b}" if kind == "range" else f"{a}-{b}/{draw(st.integers(1, 7))}"


def fields(low: int, high: int, picks: tuple[int, ...]) -> st.SearchStrategy[str]:
    return st.lists(field_items(low, high, picks), min_size=1, max_size=3).map(",".join)


expressions = st.tuples(
    fields(0, 59, (0, 15, 30, 45, 59)),
    fields(0, 23, (0, 1, 2, 3, 23)),
    st.one_of(st.just("*"), fields(1, 31, (1, 13, 28, 29, 30, 31))),
    st.one_of(st.just("*"), fields(1, 12, (2, 3, 4, 9, 10, 11))),
    st.one_of(st.just("*"), fields(0, 7, (0, 1, 5, 6, 7))),
).map(" ".join)


@st.composite
def specs_and_starts(draw: st.DrawFn) -> tuple[str, str, datetime]:
    """A valid expression, its zone, and an instant up to a day before a real clock change."""
    tz = draw(st.sampled_from(PROPERTY_ZONES))
    expr = draw(expressions)
    try:
        validate(expr, tz)
    except CronError:
        expr = draw(st.sampled_from(("*/15 * * * *", "30 2 * * *", "0 1 * * *")))
    changes = transitions(tz, 2005, 2030) or (utc(2026, 6, 1),)
    change = draw(st.sampled_from(changes))
    return expr, tz, change - timedelta(minutes=draw(st.integers(0, 24 * 60)))


@settings(max_examples=150, deadline=None)
@given(specs_and_starts())
def test_fire_times_equal_a_minute_by_minute_scan_of_debian_rules(
    case: tuple[str, str, datetime],
) -> None:
    expr, tz, start = case
    spec = validate(expr, tz)
    end = start + timedelta(hours=30)
    assert spec.fire_times_between(start, end, limit=10_000) == oracle_fires(spec, start, end)


@settings(max_examples=200, deadline=None)
@given(specs_and_starts())
def test_fire_times_increase_match_local_time_and_never_repeat(
    case: tuple[str, str, datetime],
) -> None:
    expr, tz, start = case
    spec = validate(expr, tz)
    fires = [fire for fire, _ in zip(spec.iter_fire_times(start), range(40), strict=False)]
    assert all(earlier < later for earlier, later in pairwise(fires))
    assert fires[0] > start
    for fire in fires:
        local = fire.astimezone(spec.zone)
        note = spec.dst_note(fire) or ""
        if spec.matches_wall_time(local.replace(tzinfo=None)):
            # In the second pass of a repeated hour (fold=1) only wildcard jobs fire.
            assert spec.wildcard or local.fold == 0
        else:
            # Not a match: a fixed-time job moved to the first instant after a gap.
            assert not spec.wildcard and "not exist on this day" in note


@settings(max_examples=100, deadline=None)
@given(specs_and_starts())
def test_every_valid_expression_has_a_description(case: tuple[str, str, datetime]) -> None:
    expr, tz, _ = case
    assert describe(validate(expr, tz))
