"""The pure rules of a business calendar (cron.business_days): public holidays by country and
subdivision with the package's names, closed weekdays, the tenant's days off, maintenance
windows, the next and previous open day, and the per-year cache. No database."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from webapp.cron.business_days import (
    BusinessCalendar,
    CalendarError,
    Closure,
    DayOff,
    Window,
    check_region,
    parse_weekdays,
    weekday_numbers,
    year_closures,
)

US = BusinessCalendar("us", "US", None, weekday_numbers("sat,sun"))
WINTER = DayOff(date(2027, 12, 24), date(2028, 1, 2), "Winter break")
UPGRADE = Window(datetime(2027, 1, 12, 1, 0), datetime(2027, 1, 12, 5, 0), "Database upgrade")
ACME = BusinessCalendar(
    "acme", "US", "CA", weekday_numbers("sat,sun"), days_off=(WINTER,), windows=(UPGRADE,)
)


def test_a_public_holiday_is_closed_with_the_packages_name_and_its_region() -> None:
    assert US.closed_reasons(date(2027, 7, 5)) == ("Independence Day (observed) (US holidays)",)
    assert US.is_open(date(2027, 7, 6))


def test_a_subdivision_adds_its_own_holidays() -> None:
    cesar_chavez = date(2027, 3, 31)
    assert US.is_open(cesar_chavez)
    assert ACME.closed_reasons(cesar_chavez) == ("Cesar Chavez Day (US-CA holidays)",)


def test_a_closed_day_lists_every_reason_the_holiday_first() -> None:
    christmas = date(2027, 12, 25)  # a Saturday in the winter break
    assert ACME.closed_reasons(christmas) == (
        "Christmas Day (US-CA holidays)",
        "Winter break",
        "Saturday",
    )


def test_a_range_closes_every_day_of_it_across_the_new_year() -> None:
    assert ACME.closed_reasons(date(2027, 12, 28)) == ("Winter break",)
    assert "Winter break" in ACME.closed_reasons(date(2028, 1, 2))
    assert ACME.is_open(date(2028, 1, 3))


def test_without_a_country_only_weekdays_and_own_days_close() -> None:
    plain = BusinessCalendar("plain", closed_weekdays=weekday_numbers("fri"))
    assert plain.closed_reasons(date(2027, 12, 24)) == ("Friday",)
    assert plain.is_open(date(2027, 12, 25))


def test_next_and_previous_open_day_skip_holidays_ranges_and_weekends() -> None:
    assert ACME.next_open_day(date(2027, 12, 24)) == date(2028, 1, 3)
    assert ACME.previous_open_day(date(2027, 12, 24)) == date(2027, 12, 23)
    assert ACME.next_open_day(date(2027, 12, 23)) == date(2027, 12, 23)  # open: itself


def test_a_calendar_closed_every_day_has_no_open_day() -> None:
    never = BusinessCalendar("never", closed_weekdays=frozenset(range(7)))
    with pytest.raises(CalendarError, match="no open day within 3660 days"):
        never.next_open_day(date(2027, 1, 1))


def test_a_maintenance_window_closes_its_local_times_only() -> None:
    assert ACME.closure_at(datetime(2027, 1, 12, 0, 59)) is None
    assert ACME.closure_at(datetime(2027, 1, 12, 1, 0)) == Closure(
        "Database upgrade, 2027-01-12 01:00 to 05:00", until=datetime(2027, 1, 12, 5, 0)
    )
    assert ACME.closure_at(datetime(2027, 1, 12, 5, 0)) is None  # its end is open


def test_a_closed_day_is_closed_all_day_without_an_end() -> None:
    assert ACME.closure_at(datetime(2027, 12, 27, 9, 30)) == Closure("Winter break")


def test_a_year_is_computed_once_per_calendar_and_year() -> None:
    year_closures.cache_clear()
    for day in range(1, 29):
        ACME.closed_reasons(date(2027, 2, day))
    info = year_closures.cache_info()
    assert (info.misses, info.hits) == (1, 27)
    changed = BusinessCalendar("acme", "US", "CA", weekday_numbers("sun"))
    assert changed.is_open(date(2027, 2, 6))  # another calendar value, another year computed
    assert year_closures.cache_info().misses == 2


def test_the_year_lists_its_closed_days_in_order() -> None:
    days = list(US.closed_days(2027))
    assert days == sorted(days)
    # The weekends, and the federal holidays on weekdays with the observed ones (2027-12-24
    # for Christmas on a Saturday, 2027-12-31 for the next New Year's Day).
    weekdays = [d for d in days if d.weekday() < 5]
    assert (len(days) - len(weekdays), len(weekdays)) == (104, 12)
    assert date(2027, 12, 31) in weekdays


@pytest.mark.parametrize(
    ("typed", "stored"),
    [("sat,sun", "sat,sun"), ("Sun, SAT", "sat,sun"), (["friday"], "fri"), ("", "")],
)
def test_closed_weekdays_are_stored_in_week_order(typed: str | list[str], stored: str) -> None:
    assert parse_weekdays(typed) == stored


def test_an_unknown_weekday_names_the_valid_ones() -> None:
    with pytest.raises(CalendarError, match="sax is not a day of the week: use mon, tue"):
        parse_weekdays("fri,sax")


def test_a_region_is_matched_whatever_its_case() -> None:
    assert check_region("us", "ca") == ("US", "CA")
    assert check_region(" de ", "by") == ("DE", "BY")
    assert check_region("", "") == (None, None)


def test_an_unknown_country_lists_the_valid_codes() -> None:
    with pytest.raises(CalendarError) as refused:
        check_region("XX", None)
    assert refused.value.field == "country"
    assert "'XX' is not a country the holidays package knows" in str(refused.value)
    assert "DE, " in str(refused.value) and ", US, " in str(refused.value)


def test_an_unknown_subdivision_lists_the_countrys() -> None:
    with pytest.raises(CalendarError) as refused:
        check_region("DE", "QQ")
    assert refused.value.field == "subdivision"
    assert "'QQ' is not a subdivision of DE; the valid ones: BB, BE, BW, BY" in str(refused.value)


def test_a_subdivision_needs_a_country() -> None:
    with pytest.raises(CalendarError, match="choose a country first"):
        check_region(None, "CA")


def test_a_calendar_hashes_once_whatever_its_entries() -> None:
    offs = tuple(DayOff(date(2027, 1, 1), date(2027, 1, 1), f"day {n}") for n in range(1000))
    big = BusinessCalendar("big", days_off=offs)
    same = BusinessCalendar("big", days_off=offs)
    assert hash(big) == hash(same) and big == same
    assert "_hash" in big.__dict__  # kept: the next question does not walk the entries again
    assert hash(BusinessCalendar("big", days_off=offs[:-1])) != hash(big)


def test_a_closed_fire_shifts_to_the_same_time_on_the_nearest_open_day() -> None:
    friday_christmas_eve = datetime(2027, 12, 24, 9, 30)  # the winter break starts
    assert ACME.shift(friday_christmas_eve) == datetime(2028, 1, 3, 9, 30)
    assert ACME.shift(friday_christmas_eve, forward=False) == datetime(2027, 12, 23, 9, 30)
    assert ACME.shift(datetime(2027, 12, 23, 9, 30)) == datetime(2027, 12, 23, 9, 30)


def test_a_fire_in_a_maintenance_window_moves_to_its_end() -> None:
    assert ACME.shift(datetime(2027, 1, 12, 2, 0)) == datetime(2027, 1, 12, 5, 0)
    # A window that ends on a closed day: then on to the next open day, at the window's end.
    late = Window(datetime(2027, 1, 15, 22, 0), datetime(2027, 1, 16, 1, 0), "Friday night")
    calendar = BusinessCalendar("late", closed_weekdays=weekday_numbers("sat,sun"), windows=(late,))
    assert calendar.shift(datetime(2027, 1, 15, 23, 0)) == datetime(2027, 1, 18, 1, 0)
