"""Fire times: an expression in a time zone (CronSpec) and when it fires, Debian's DST rules
applied where the clock changes. validate() is the way in."""

from __future__ import annotations

import calendar
import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from .errors import CronError
from .fields import CronFields, parse_fields
from .words import wall_times_phrase
from .zones import (
    as_utc,
    change_instant,
    day_offset,
    load_zone,
    utc_offset,
    wall_offsets,
)

# How far next_fire_after searches before giving up (only reachable after 2099: a valid
# expression fires at least every five years until then).
SEARCH_YEARS = 50

ONE_DAY = timedelta(days=1)
ONE_MINUTE = timedelta(minutes=1)
ONE_SECOND = timedelta(seconds=1)


def validate(expr: str, tz: str) -> CronSpec:
    """Parse and check an expression in a time zone; raise CronError with an actionable message.

    Accepts five fields (minute hour day-of-month month day-of-week) with numbers, month and
    day names (jan, mon), ``*``, ranges, lists and steps, or an alias such as ``@daily``.
    Cached per (expression, zone), so callers may call it for every row.
    """
    if not isinstance(expr, str) or not isinstance(tz, str):
        raise CronError("the cron expression and time zone must be text")
    return _compile(" ".join(expr.split()), tz)


@lru_cache(maxsize=4096)
def _compile(expression: str, tz: str) -> CronSpec:
    # The fields are checked before the zone, so that an expression's own errors come first.
    fields = parse_fields(expression)
    zone = load_zone(tz)
    return CronSpec(**vars(fields), tz=zone.key, zone=zone)  # tz as its zone is named


@dataclass(frozen=True)
class CronSpec(CronFields):
    """A validated expression in a time zone, compiled for fast fire-time computation.

    Equality and hashing use ``expression`` and ``tz`` only; the other fields derive from them.
    """

    tz: str  # IANA key
    zone: ZoneInfo = field(compare=False, repr=False)

    # Pure, so cached: a tick's schedules that share a cron and zone share each fire's search.
    @lru_cache(maxsize=8192)  # noqa: B019 (specs are kept for good by _compile anyway)
    def next_fire_after(self, after_utc: datetime) -> datetime:
        """The first fire time strictly after ``after_utc``, as an aware UTC datetime.

        Local days without a clock change are computed as "wall time minus a fixed offset",
        jumping to the next matching day and bisecting its fire minutes. Days with a clock
        change apply Debian's DST rules minute by minute (see _fires_on_changeover_day).
        """
        after = as_utc(after_utc, "after_utc")
        try:
            fire = self._search(after)
        except OverflowError:  # the search ran past year 9999
            fire = None
        if fire is None:
            raise CronError(
                f"'{self.expression}' does not fire within {SEARCH_YEARS} years after "
                f"{after:%Y-%m-%d}"
            )
        return fire

    def iter_fire_times(self, after_utc: datetime) -> Iterator[datetime]:
        """Fire times strictly after ``after_utc``, in order, without end."""
        fire = after_utc
        while True:
            fire = self.next_fire_after(fire)
            yield fire

    def fire_times_between(
        self, start_utc: datetime, end_utc: datetime, limit: int = 1000
    ) -> list[datetime]:
        """Fire times ``t`` with ``start_utc < t <= end_utc``, at most ``limit`` of them."""
        end = as_utc(end_utc, "end_utc")
        fires: list[datetime] = []
        for fire in self.iter_fire_times(start_utc):
            if fire > end or len(fires) >= limit:
                break
            fires.append(fire)
        return fires

    def shortest_gap(self, after_utc: datetime, sample: int = 500) -> timedelta | None:
        """The shortest time between two of the ``sample`` fires after ``after_utc`` within
        800 days (None: fewer than two fires in that time). The tenant's minimum interval and
        the jitter's bound both measure a schedule by it."""
        first = self.next_fire_after(after_utc)
        fires = [first, *self.fire_times_between(first, first + timedelta(days=800), sample)]
        gaps = [later - earlier for earlier, later in itertools.pairwise(fires)]
        return min(gaps) if gaps else None

    def dst_note(self, fire_utc: datetime) -> str | None:
        """Which DST rule, if any, shaped this fire time, in words; None when none did.

        E.g. "02:30 does not exist on this day: runs at 03:00" or
        "01:00-01:59 happens twice: fires in both".
        """
        fire = as_utc(fire_utc, "fire_utc")
        local = fire.astimezone(self.zone)
        if (
            day_offset(self.tz, local.date()) is not None
            and utc_offset(self.zone, fire - ONE_SECOND) == local.utcoffset()
        ):
            # An ordinary day, not entered by a jump at this instant (Apia skipped all of
            # 2011-12-30: the fire moved from it is the first instant of an ordinary day).
            return None
        wall = local.replace(tzinfo=None, fold=0)
        offset_first, offset_second = wall_offsets(self.zone, wall)
        if offset_first > offset_second:
            # The clock was set back: wall times in [change + second, change + first) repeat.
            change = change_instant(
                self.zone,
                (wall - offset_first).replace(tzinfo=UTC),
                (wall - offset_second).replace(tzinfo=UTC),
            )
            repeat_start = (change + offset_second).replace(tzinfo=None)
            repeat_end = (change + offset_first).replace(tzinfo=None) - ONE_MINUTE
            which = "fires in both" if self.wildcard else "fires in the first only"
            return f"{repeat_start:%H:%M}-{repeat_end:%H:%M} happens twice: {which}"
        if self.wildcard:
            return None
        offset_before = utc_offset(self.zone, fire - ONE_SECOND)
        offset_now = local.utcoffset()
        assert offset_now is not None
        if offset_before >= offset_now:
            return None
        # The clock jumped forward at this instant: fixed times in the gap run now.
        gap_start = (fire + offset_before).replace(tzinfo=None)
        skipped = self.matching_wall_times(gap_start, wall)
        if not skipped:
            return None
        once = "" if len(skipped) == 1 else "once "
        return f"{wall_times_phrase(skipped, 'not exist')} on this day: runs {once}at {wall:%H:%M}"

    def _search(self, after: datetime) -> datetime | None:
        local_day = after.astimezone(self.zone).date()
        # Fires of the previous local day can fall after `after` only if that day had a clock
        # change (a fixed-time job moved to the end of a gap at midnight, or a repeated hour
        # across midnight); an ordinary day ends before the next local midnight.
        if day_offset(self.tz, local_day - ONE_DAY) is None:
            local_day -= ONE_DAY
        day = self._next_matching_day(local_day)
        best: datetime | None = None
        best_day: date | None = None
        while day is not None and (best_day is None or day <= best_day + ONE_DAY):
            offset = day_offset(self.tz, day)
            if offset is not None:
                # An ordinary day: all of its fires lie after those of earlier days.
                fire = self._first_fire_on_ordinary_day(day, offset, after)
                if fire is not None:
                    return fire if best is None else min(best, fire)
                if best is not None:
                    return best
            else:
                # A day with a clock change; the next day may hold an earlier instant (a
                # repeated hour spanning midnight), so look at it too before answering.
                fires = _fires_on_changeover_day(self, day)
                index = bisect_right(fires, after)
                if index < len(fires) and (best is None or fires[index] < best):
                    best = fires[index]
                    best_day = best_day or day
            day = self._next_matching_day(day + ONE_DAY)
        return best

    def _next_matching_day(self, day: date) -> date | None:
        """The first local day on or after ``day`` on which the job runs."""
        year, month, first = day.year, day.month, day.day
        for _ in range(12 * SEARCH_YEARS):
            if month in self.months:
                first_weekday, length = calendar.monthrange(year, month)
                days = self.month_days[(first_weekday + 1) % 7][length - 28]
                index = bisect_left(days, first)
                if index < len(days):
                    return date(year, month, days[index])
            month, first = month + 1, 1
            if month > 12:
                month, year = 1, year + 1
                if year > 9999:
                    return None
        return None

    def _first_fire_on_ordinary_day(
        self, day: date, offset: timedelta, after: datetime
    ) -> datetime | None:
        """The first fire after ``after`` on a day whose UTC offset is constant."""
        midnight = datetime(day.year, day.month, day.day, tzinfo=UTC) - offset
        if after < midnight:
            return midnight + timedelta(minutes=self.day_minutes[0])
        index = bisect_right(self.day_minutes, (after - midnight) // ONE_MINUTE)
        if index == len(self.day_minutes):
            return None
        return midnight + timedelta(minutes=self.day_minutes[index])


@lru_cache(maxsize=4096)
def _fires_on_changeover_day(spec: CronSpec, day: date) -> tuple[datetime, ...]:
    """All fire instants contributed by the wall times of a local day with a clock change.

    Debian cron's DST rules apply here, next to the wall times they concern. The tests compare
    the results with crondst, an independent reimplementation of Debian's cron.
    """
    zone = spec.zone
    midnight = datetime(day.year, day.month, day.day)
    fires: set[datetime] = set()
    gap_ends: dict[tuple[timedelta, timedelta], datetime] = {}
    for hour in spec.hours:
        top = midnight + timedelta(hours=hour)
        edges = {*wall_offsets(zone, top), *wall_offsets(zone, top + timedelta(minutes=59))}
        if len(edges) == 1:  # no change within this hour: wall time minus the offset
            offset = edges.pop()
            fires.update(
                (top + timedelta(minutes=m) - offset).replace(tzinfo=UTC) for m in spec.minutes
            )
            continue
        for minute in spec.minutes:
            wall = top + timedelta(minutes=minute)
            first, second = wall_offsets(zone, wall)
            if first == second:
                fires.add((wall - first).replace(tzinfo=UTC))
            elif first > second:
                # Fall back: the wall time happens twice. Every job fires in the first pass;
                # Debian runs only wildcard jobs in the second pass ("0 * * * *" fires at both
                # 01:00s, "30 1 * * *" once), since fixed-time jobs already ran at that time.
                fires.add((wall - first).replace(tzinfo=UTC))
                if spec.wildcard:
                    fires.add((wall - second).replace(tzinfo=UTC))
            elif not spec.wildcard:
                # Spring forward: the wall time does not exist. Debian runs a fixed-time job
                # once, at the first instant after the gap ("30 2 * * *" at 03:00 that day);
                # a wildcard job follows the new clock only and skips it ("*/15 2 * * *"
                # does not fire that day). Several skipped times share one fire: a fire
                # time is unique per schedule.
                if (first, second) not in gap_ends:
                    before = (wall - second).replace(tzinfo=UTC)
                    after = (wall - first).replace(tzinfo=UTC)
                    gap_ends[first, second] = change_instant(zone, before, after)
                fires.add(gap_ends[first, second])
    return tuple(sorted(fires))
