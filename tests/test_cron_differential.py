"""Our fire times against crondst, an independent reimplementation of Debian's cron.

Thousands of random expressions, in zones of both hemispheres, a 30-minute DST shift and a
half-hour offset, starting from instants around real clock changes. crondst is test-only.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

from crondst import CronDst

from tests.cron_helpers import DST_ZONES, random_expression, transitions
from webapp.cron import CronError, validate

CASES = 3000
FIRES_PER_CASE = 16


def crondst_fires(expression: str, tz: str, start: datetime, count: int) -> list[datetime]:
    iterator = CronDst(expression).iter(start.astimezone(ZoneInfo(tz)))
    return [next(iterator).astimezone(UTC) for _ in range(count)]


def our_fires(expression: str, tz: str, start: datetime, count: int) -> list[datetime]:
    spec = validate(expression, tz)
    fires, fire = [], start
    for _ in range(count):
        fire = spec.next_fire_after(fire)
        fires.append(fire)
    return fires


def random_start(rng: random.Random, tz: str) -> datetime:
    """An instant shortly before a real clock change (any day for a zone without DST)."""
    changes = transitions(tz)
    base = rng.choice(changes) if changes else datetime(2026, 1, 1, tzinfo=UTC)
    if rng.random() < 0.7:
        offset = timedelta(minutes=rng.randint(-3 * 60, 60))
    else:
        offset = timedelta(minutes=rng.randint(-30 * 60, 3 * 60))
    if rng.random() < 0.2:
        offset += timedelta(seconds=rng.randint(1, 59))
    return base + offset


def test_fire_times_match_debian_cron_reference_around_real_dst_changes() -> None:
    rng = random.Random(20260308)
    compared = 0
    mismatches = []
    while compared < CASES:
        expression = random_expression(rng)
        tz = rng.choice(DST_ZONES)
        try:
            validate(expression, tz)
        except CronError:
            continue  # e.g. "0 0 30 2 *"; rejections have their own tests
        start = random_start(rng, tz)
        compared += 1
        expected = crondst_fires(expression, tz, start, FIRES_PER_CASE)
        actual = our_fires(expression, tz, start, FIRES_PER_CASE)
        if actual != expected:
            mismatches.append((expression, tz, start.isoformat(), actual, expected))
    assert not mismatches, mismatches[:3]


def test_every_crondst_fire_appears_when_starting_from_each_fire() -> None:
    """Starting exactly at a fire time (fold or gap end included) skips that fire only."""
    rng = random.Random(7)
    for _ in range(300):
        expression = random_expression(rng)
        tz = rng.choice(DST_ZONES)
        try:
            spec = validate(expression, tz)
        except CronError:
            continue
        start = random_start(rng, tz)
        expected = crondst_fires(expression, tz, start, FIRES_PER_CASE)
        for earlier, later in pairwise(expected):
            assert spec.next_fire_after(earlier) == later, (expression, tz, earlier)
