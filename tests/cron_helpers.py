"""Helpers for the cron tests: real DST transitions, random expressions, a minute-scan oracle."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from webapp.cron import CronSpec

# Northern and southern hemisphere, a 30-minute shift, and a zone without DST.
DST_ZONES = (
    "America/New_York",
    "Europe/Berlin",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
)
# Harder cases for the property tests: changes at midnight (Santiago, Havana), a 45-minute
# offset (Chatham), negative DST (Dublin), a skipped calendar day (Apia, 2011-12-30).
EXTRA_ZONES = (
    "America/Santiago",
    "America/Havana",
    "Pacific/Chatham",
    "Europe/Dublin",
    "Pacific/Apia",
    "UTC",
)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    """An aware UTC datetime: utc(2026, 3, 8, 7) is 2026-03-08T07:00Z."""
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def _offset(zone: ZoneInfo, moment: datetime) -> timedelta:
    offset = moment.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


@lru_cache(maxsize=64)
def transitions(tz: str, first_year: int = 2020, last_year: int = 2030) -> tuple[datetime, ...]:
    """The instants (UTC, to the second) at which the zone's UTC offset changes."""
    zone = ZoneInfo(tz)
    found = []
    moment = datetime(first_year, 1, 1, 12, tzinfo=UTC)
    end = datetime(last_year + 1, 1, 1, tzinfo=UTC)
    while moment < end:
        following = moment + timedelta(days=1)
        if _offset(zone, moment) != _offset(zone, following):
            low, high = int(moment.timestamp()), int(following.timestamp())
            old = _offset(zone, moment)
            while high - low > 1:
                middle = (low + high) // 2
                if _offset(zone, datetime.fromtimestamp(middle, UTC)) == old:
                    low = middle
                else:
                    high = middle
            found.append(datetime.fromtimestamp(high, UTC))
        moment = following
    return tuple(found)


MINUTE_PICKS = (0, 0, 1, 5, 10, 15, 29, 30, 31, 45, 59)


def random_field(rng: random.Random, low: int, high: int, favourites: tuple[int, ...]) -> str:
    """One random cron field in the syntax Debian and crondst both accept."""

    def value() -> int:
        return rng.choice(favourites) if rng.random() < 0.6 else rng.randint(low, high)

    def item() -> str:
        kind = rng.random()
        if kind < 0.25:
            return str(value())
        if kind < 0.45:
            a, b = sorted((value(), value()))
            return f"{a}-{b}"
        if kind < 0.6:
            a, b = sorted((value(), value()))
            return f"{a}-{b}/{rng.randint(1, 7)}"
        if kind < 0.7:
            return f"{value()}/{rng.randint(1, 20)}"
        if kind < 0.85:
            return f"*/{rng.randint(1, 20)}"
        return "*"

    first = item()
    if first.startswith("*") or rng.random() < 0.7:
        return first
    return ",".join([first, *(item() for _ in range(rng.randint(1, 3)))])


def random_expression(rng: random.Random) -> str:
    """A random five-field expression, biased to fire on the days and hours clocks change."""

    def day_field(low: int, high: int, favourites: tuple[int, ...]) -> str:
        return "*" if rng.random() < 0.7 else random_field(rng, low, high, favourites)

    return " ".join(
        (
            random_field(rng, 0, 59, MINUTE_PICKS),
            random_field(rng, 0, 23, (0, 1, 1, 2, 2, 2, 3, 3, 23)),
            day_field(1, 31, (1, 5, 13, 15, 28, 29, 30, 31)),
            rng.choice(("*", "*", "*", "*", "1-12", "3,4,9,10,11", "*/2", "mar-apr", "oct,nov")),
            day_field(0, 7, (0, 1, 5, 6, 7)),
        )
    )


DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


def random_extended_expression(rng: random.Random) -> str:
    """A random expression using the extended day rules (L, LW, D#N, D#L, DL) in one day field
    or both, alone or listed with ordinary values, beside a standard field or '*'; biased, as
    random_expression is, to fire on the days and hours clocks change."""

    def day_of_month() -> str:
        picks = ("L", "L", "LW", "LW", "1", "5", "15", "26", "27", "28", "29", "30", "31")
        return ",".join(rng.choice(picks) for _ in range(rng.choice((1, 1, 1, 2, 3))))

    def day_of_week() -> str:
        def item() -> str:
            # Sundays often: the clocks of New York, Berlin and Sydney change on a Sunday.
            day = rng.choice((0, 7)) if rng.random() < 0.4 else rng.randint(0, 7)
            spelt = str(day) if rng.random() < 0.5 else DAY_NAMES[day % 7]
            kind = rng.random()
            if kind < 0.45:
                return f"{spelt}#{rng.randint(1, 5)}"
            if kind < 0.6:
                return f"{spelt}#L"
            if kind < 0.75:
                return f"{spelt}L"
            return spelt

        return ",".join(item() for _ in range(rng.choice((1, 1, 1, 2, 3))))

    kind = rng.random()
    if kind < 0.35:
        days = (day_of_month(), "*")
    elif kind < 0.7:
        days = ("*", day_of_week())
    elif kind < 0.8:
        days = (day_of_month(), day_of_week())
    elif kind < 0.9:
        days = (day_of_month(), random_field(rng, 0, 7, (0, 1, 5, 6, 7)))
    else:
        days = (random_field(rng, 1, 31, (1, 13, 15, 29, 30, 31)), day_of_week())
    return " ".join(
        (
            random_field(rng, 0, 59, MINUTE_PICKS),
            random_field(rng, 0, 23, (0, 1, 1, 2, 2, 2, 3, 3, 23)),
            days[0],
            rng.choice(("*", "*", "*", "2", "1-12", "3,4,9,10,11", "*/2", "mar-apr", "oct,nov")),
            days[1],
        )
    )


def oracle_fires(spec: CronSpec, start: datetime, end: datetime) -> list[datetime]:
    """Fire times in (start, end] by scanning every UTC minute and applying Debian's rules.

    Slow and obvious, independent of the module's day-jumping search: at each minute, the
    job fires if the local wall time matches (in the second pass of a repeated hour, only a
    wildcard job); at the instant a clock jumps forward, a fixed-time job also fires if any
    skipped wall time matches.
    """
    zone = spec.zone
    fires = []
    moment = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while moment <= end:
        here = moment.astimezone(zone)
        wall = here.replace(tzinfo=None, fold=0)
        second_pass = here.fold == 1  # astimezone() marks the second pass of a repeated hour
        fires_now = spec.matches_wall_time(wall) and (spec.wildcard or not second_pass)
        before = _offset(zone, moment - timedelta(seconds=1))
        if not fires_now and not spec.wildcard and before < _offset(zone, moment):
            skipped = (moment + before).replace(tzinfo=None)
            while skipped < wall and not fires_now:
                fires_now = spec.matches_wall_time(skipped)
                skipped += timedelta(minutes=1)
        if fires_now:
            fires.append(moment)
        moment += timedelta(minutes=1)
    return fires
