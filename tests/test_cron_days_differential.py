"""Our fire times for the extended day syntax (L, LW, D#N, D#L, DL) against cronsim, an
independent implementation used only in tests, on random expressions in UTC and DST zones.

Where cronsim's rules differ from ours (docs/reference/cron.md says the same, under "Last days
and n-th weekdays"):
- It reads the last weekday D only as ``DL`` with D a number (``5L``): ``FRI#L``, ``5#L`` and
  ``FRIL`` are given to it as ``5L``. Everything else it reads as we do: L, LW (the last Monday
  to Friday), D#N with N 1-5, Sunday as 0 or 7, lists, and Debian's rule for the two day fields
  (either matches when both are restricted, both must when one starts with '*').
- Clock changes: cronsim has DST rules of its own, which differ from Debian's where the clock
  changes at midnight (America/Santiago: it runs a wildcard job at the skipped 00:00, Debian
  does not), by 30 minutes (Australia/Lord_Howe: it steps over a wildcard job's fires in the
  next hour) or off the hour (Pacific/Chatham: it runs a wildcard job in one pass of the
  repeated hour, Debian in both), and when the start lies in the second pass of a repeated hour
  (it answers fires of the first pass, before the start). We
  follow Debian's rules, which test_cron_differential checks against crondst, for every
  expression. So the days on which the clock changes are compared here with the
  minute-by-minute oracle (Debian's rules applied to each minute), not with cronsim.
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from cronsim import CronSim

from tests.cron_helpers import (
    DAY_NAMES,
    oracle_fires,
    random_extended_expression,
    transitions,
    utc,
)
from tests.test_cron_differential import random_start
from webapp.cron import CronError, CronSpec, validate

CASES = 1500
FIRES_PER_CASE = 16
ZONES = ("UTC", "UTC", "America/New_York", "Europe/Berlin", "Australia/Sydney")


def for_cronsim(expression: str) -> str:
    """The same expression as cronsim spells it: the last weekday D as DL, D a number."""
    fields = expression.split(" ")
    items = []
    for item in fields[4].split(","):
        day, _, nth = item.upper().partition("#")
        if item.upper().endswith("L") and nth in ("", "L"):
            day = day.removesuffix("L")
            number = DAY_NAMES.index(day) if day in DAY_NAMES else int(day)
            item = f"{number}L"
        items.append(item)
    return " ".join([*fields[:4], ",".join(items)])


def cronsim_fires(expression: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    """cronsim's fires in (start, end], its answers before the start included (see above)."""
    fires: list[datetime] = []
    for fire in CronSim(for_cronsim(expression), start.astimezone(ZoneInfo(tz))):
        at = fire.astimezone(UTC)
        if at > end:
            return fires
        fires.append(at)
    return fires


@lru_cache(maxsize=16)
def changeover_days(tz: str) -> frozenset[date]:
    """The local days on which the zone's clock changes (either side of a change at midnight)."""
    zone = ZoneInfo(tz)
    return frozenset(
        moment.astimezone(zone).date()
        for change in transitions(tz, 2019, 2031)
        for moment in (change - timedelta(seconds=1), change)
    )


def ordinary(spec: CronSpec, fires: list[datetime]) -> list[datetime]:
    changeovers = changeover_days(spec.tz)
    return [fire for fire in fires if fire.astimezone(spec.zone).date() not in changeovers]


def test_extended_day_fires_match_cronsim_and_debian_rules_on_clock_changes() -> None:
    rng = random.Random(20261206)
    compared = clock_change_days = 0
    mismatches = []
    while compared < CASES:
        expression = random_extended_expression(rng)
        tz = rng.choice(ZONES)
        try:
            spec = validate(expression, tz)
        except CronError:
            continue  # e.g. "0 0 */30 2 MON#5"; refusals have their own tests
        compared += 1
        if rng.random() < 0.5:
            start = random_start(rng, tz)  # shortly before a clock change
        else:
            start = utc(2020, 1, 1) + timedelta(minutes=rng.randint(0, 10 * 365 * 24 * 60))
        ours = spec.fire_times_between(start, utc(2100, 1, 1), FIRES_PER_CASE)
        theirs = cronsim_fires(expression, tz, start, ours[-1])
        if ordinary(spec, ours) != ordinary(spec, theirs):
            mismatches.append(("cronsim", expression, tz, start.isoformat()))
        # The clock changes near the start: Debian's rules, minute by minute, on those days.
        window_end = min(ours[-1], start + timedelta(days=2))
        near = [fire for fire in ours if fire <= window_end]
        if ordinary(spec, near) == near:
            continue  # no fire on a clock-change day: cronsim has checked them all
        clock_change_days += 1
        if near != oracle_fires(spec, start, window_end):
            mismatches.append(("oracle", expression, tz, start.isoformat()))
    assert not mismatches, mismatches[:5]
    assert clock_change_days > 50  # the clock-change days were really met (73 of 1,500)


def test_cronsim_reads_every_spelling_of_the_last_weekday_as_we_do() -> None:
    assert for_cronsim("0 9 * * FRI#L,5#L,FRIL,fril,5L,7L,MON#2,1") == (
        "0 9 * * 5L,5L,5L,5L,5L,7L,MON#2,1"
    )
