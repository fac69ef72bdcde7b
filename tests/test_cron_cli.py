"""`cron preview`: description, fire times in UTC and local time, DST notes, one-line errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner, Result

from webapp.cli.cron import cron_cli

BOTH = "  # 01:00-01:59 happens twice: fires in both"


def preview(*args: str) -> Result:
    return CliRunner().invoke(cron_cli, ["preview", *args])


def test_preview_marks_the_fixed_time_moved_out_of_the_spring_gap() -> None:
    result = preview(
        "30 2 * * *", "--tz", "America/New_York", "--after", "2026-03-07T12:00", "--count", "3"
    )
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "At 02:30",
        "2026-03-08T07:00:00Z  2026-03-08 03:00 EDT (-04:00)"
        "  # 02:30 does not exist on this day: runs at 03:00",
        "2026-03-09T06:30:00Z  2026-03-09 02:30 EDT (-04:00)",
        "2026-03-10T06:30:00Z  2026-03-10 02:30 EDT (-04:00)",
    ]


def test_preview_says_what_happens_at_the_next_two_clock_changes_on_request() -> None:
    result = preview(
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-12-03T00:00",
        "--count",
        "1",
        "--clock-changes",
    )
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "At 02:30",
        "2026-12-03T07:30:00Z  2026-12-03 02:30 EST (-05:00)",
        "# 2027-03-14: clocks go forward 1 hour at 02:00 (EST to EDT): "
        "02:30 does not exist; runs at 03:00 EDT",
        "# 2027-11-07: clocks go back 1 hour at 02:00 (EDT to EST): not affected",
    ]
    kolkata = preview("30 2 * * *", "--tz", "Asia/Kolkata", "--count", "1", "--clock-changes")
    assert kolkata.stdout.splitlines()[-1] == (
        "# Asia/Kolkata does not change its clocks (no daylight-saving time) in the next two years"
    )


def test_preview_marks_both_passes_of_the_repeated_hour_for_a_wildcard_job() -> None:
    result = preview("*/30 1 * * *", "--tz", "America/New_York", "--after", "2026-11-01T00:45")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "Every 30 minutes, between 01:00 and 01:59",
        "2026-11-01T05:00:00Z  2026-11-01 01:00 EDT (-04:00)" + BOTH,
        "2026-11-01T05:30:00Z  2026-11-01 01:30 EDT (-04:00)" + BOTH,
        "2026-11-01T06:00:00Z  2026-11-01 01:00 EST (-05:00)" + BOTH,
        "2026-11-01T06:30:00Z  2026-11-01 01:30 EST (-05:00)" + BOTH,
        "2026-11-02T06:00:00Z  2026-11-02 01:00 EST (-05:00)",
    ]


def test_preview_marks_the_fixed_time_job_that_fires_in_the_first_pass_only() -> None:
    result = preview(
        "30 1 * * *", "--tz", "America/New_York", "--after", "2026-11-01T00:00", "--count", "2"
    )
    assert result.stdout.splitlines()[1:] == [
        "2026-11-01T05:30:00Z  2026-11-01 01:30 EDT (-04:00)"
        "  # 01:00-01:59 happens twice: fires in the first only",
        "2026-11-02T06:30:00Z  2026-11-02 01:30 EST (-05:00)",
    ]


def test_preview_shows_half_hour_offsets_and_zone_abbreviations() -> None:
    result = preview(
        "15 2 * * *", "--tz", "Australia/Lord_Howe", "--after", "2026-10-04T00:00", "--count", "2"
    )
    assert result.stdout.splitlines() == [
        "At 02:15",
        "2026-10-03T15:30:00Z  2026-10-04 02:30 +11 (+11:00)"
        "  # 02:15 does not exist on this day: runs at 02:30",
        "2026-10-04T15:15:00Z  2026-10-05 02:15 +11 (+11:00)",
    ]
    result = preview(
        "0 9 * * mon-fri", "--tz", "Asia/Kolkata", "--after", "2026-03-06T12:00", "--count", "1"
    )
    assert result.stdout.splitlines() == [
        "At 09:00, Monday through Friday",
        "2026-03-09T03:30:00Z  2026-03-09 09:00 IST (+05:30)",
    ]


def test_preview_accepts_the_fields_as_separate_arguments_and_defaults_to_utc() -> None:
    result = preview("0", "12", "*", "*", "*", "--after", "2026-01-01T12:00", "--count", "1")
    assert result.stdout.splitlines() == [
        "At 12:00",
        "2026-01-02T12:00:00Z  2026-01-02 12:00 UTC (+00:00)",
    ]


def test_preview_reads_after_with_an_offset_as_that_instant() -> None:
    result = preview("@daily", "--after", "2026-01-01T00:00+05:30", "--count", "1")
    assert result.stdout.splitlines() == [
        "At 00:00",
        "2026-01-01T00:00:00Z  2026-01-01 00:00 UTC (+00:00)",
    ]


def test_preview_defaults_to_five_fire_times_after_now() -> None:
    before = datetime.now(UTC)
    result = preview("* * * * *")
    after = datetime.now(UTC)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "Every minute"
    fires = [datetime.fromisoformat(line.split()[0]) for line in lines[1:]]
    assert before < fires[0] <= after + timedelta(minutes=1)
    assert fires == [fires[0] + timedelta(minutes=n) for n in range(5)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["0 0 30 2 *"], "February never has 30 days: this schedule would never fire"),
        (["61 * * * *"], "minute 61 is out of range 0-59"),
        (
            ["0 0 0 * * *"],
            "too many fields: expected 5 (minute hour day-of-month month day-of-week), got 6; "
            "seconds, years and commands are not supported",
        ),
        (["0 0 * * *", "--tz", "Mars/Olympus"], "unknown time zone 'Mars/Olympus'"),
        (
            ["0 0 * * *", "--after", "yesterday"],
            "--after: 'yesterday' is not an ISO 8601 date and time, e.g. 2026-03-08T09:30",
        ),
        (["0 0 * * *", "--count", "0"], "--count must be a whole number from 1 to 1000"),
        (["0 0 * * *", "--count", "1001"], "--count must be a whole number from 1 to 1000"),
        (["0 0 * * *", "--count", "many"], "--count must be a whole number from 1 to 1000"),
    ],
)
def test_invalid_input_prints_one_error_line_and_exits_1(args: list[str], message: str) -> None:
    result = preview(*args)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == f"Error: {message}\n"
    assert isinstance(result.exception, SystemExit)  # no traceback


def test_preview_allows_a_thousand_fire_times() -> None:
    result = preview("* * * * *", "--after", "2026-01-01T00:00", "--count", "1000")
    lines = result.stdout.splitlines()
    assert len(lines) == 1001
    assert lines[-1] == "2026-01-01T16:40:00Z  2026-01-01 16:40 UTC (+00:00)"


def test_after_outside_the_supported_years_is_one_line_and_nothing_else() -> None:
    from click.testing import CliRunner

    from webapp.cli.cron import cron_cli

    for after in ("0001-01-01T00:00", "9990-01-01T00:00"):
        result = CliRunner().invoke(cron_cli, ["preview", "0 0 * * *", "--after", after])
        assert result.exit_code == 1
        expected = f"Error: --after: '{after}' is outside the years 1970 to 2999\n"
        assert result.output == expected


def test_preview_names_the_zone_whatever_its_case_and_warns_of_a_fixed_offset() -> None:
    result = preview("0 9 * * *", "--tz", "america/new_york", "--after", "2026-07-01T00:00")
    assert result.exit_code == 0 and result.stderr == ""
    assert "2026-07-01T13:00:00Z  2026-07-01 09:00 EDT (-04:00)" in result.stdout
    fixed = preview("0 9 * * *", "--tz", "EST", "--after", "2026-07-01T00:00")
    assert "2026-07-01T14:00:00Z  2026-07-01 09:00 EST (-05:00)" in fixed.stdout
    assert fixed.stderr.startswith("warning: EST is a legacy fixed offset, UTC-05:00 all year")


def test_parse_prints_the_cron_of_a_phrase_alone() -> None:
    result = CliRunner().invoke(cron_cli, ["parse", "every weekday at 9:30"])
    assert (result.exit_code, result.stdout, result.stderr) == (0, "30 9 * * 1-5\n", "")
    # Unquoted words are one phrase; cron passes through.
    result = CliRunner().invoke(cron_cli, ["parse", "twice", "a", "day", "at", "9", "and", "17"])
    assert result.stdout == "0 9,17 * * *\n"
    assert CliRunner().invoke(cron_cli, ["parse", "*/5 * * * *"]).stdout == "*/5 * * * *\n"
    # The extended day syntax, checked as cron.
    last = CliRunner().invoke(cron_cli, ["parse", "the last day of the month at 23:00"])
    assert (last.exit_code, last.stdout) == (0, "0 23 L * *\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("every blue moon", "did not understand “blue” in “every blue moon”; try e.g. “"),
        ("on February 30th", "February never has 30 days"),
        ("0 9 * *", "too few fields"),
    ],
)
def test_parse_answers_what_it_cannot_read_with_one_line_and_exit_1(
    text: str, message: str
) -> None:
    result = CliRunner().invoke(cron_cli, ["parse", text])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert message in result.stderr
