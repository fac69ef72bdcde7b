"""Pure cron math: validate five-field expressions, compute fire times, describe them.

Fire times are computed in the schedule's local time and returned as aware UTC datetimes.
Day fields and daylight-saving time follow Debian's cron (Vixie cron plus Debian's DST patch),
because that is what crontab users know; tests compare us with an independent reimplementation.

Nothing here reads the clock or the database: every function takes the instant it reasons from.

Typical use: ``spec = validate(expr, tz)`` once (cached per expression and zone), then
``spec.next_fire_after(after_utc)`` as often as needed.
"""

from __future__ import annotations

import calendar
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from itertools import pairwise
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cron_descriptor import ExpressionDescriptor, FormatError, Options

__all__ = [
    "ALIASES",
    "ClockChange",
    "CronError",
    "CronSpec",
    "clock_changes",
    "describe",
    "dst_note",
    "fire_times_between",
    "is_wildcard",
    "known_time_zones",
    "next_fire_after",
    "no_clock_changes",
    "step_notes",
    "validate",
    "wall_time_to_utc",
]

ALIASES: Mapping[str, str] = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

MAX_EXPRESSION_LENGTH = 500
# A schedule must fire at least once in any five-year window (see _check_fires_often_enough).
MAX_GAP_DAYS = 5 * 365 + 2
# How far next_fire_after searches before giving up (only reachable after 2099, see above).
SEARCH_YEARS = 50

ONE_DAY = timedelta(days=1)
ONE_MINUTE = timedelta(minutes=1)
ONE_SECOND = timedelta(seconds=1)

FIELDS_HINT = "minute hour day-of-month month day-of-week"
MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# Longest possible month, January first; February has 29 days in leap years.
MAX_MONTH_LENGTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_NUMBER = re.compile(r"[0-9]{1,9}")
_UTC_ZONE = ZoneInfo("UTC")


class CronError(ValueError):
    """An expression or time zone that a user must fix; the message says how."""


@dataclass(frozen=True)
class _FieldKind:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    names_hint: str = ""


_KINDS = (
    _FieldKind("minute", 0, 59),
    _FieldKind("hour", 0, 23),
    _FieldKind("day-of-month", 1, 31),
    _FieldKind("month", 1, 12, MONTH_NAMES, "a month name (jan-dec)"),
    _FieldKind("day-of-week", 0, 7, DAY_NAMES, "a day name (sun-sat)"),
)


@dataclass(frozen=True)
class CronSpec:
    """A validated expression in a time zone, compiled for fast fire-time computation.

    Equality and hashing use ``expression`` and ``tz`` only; the other fields derive from them.
    """

    expression: str  # single spaces; an alias stays an alias, in lower case
    tz: str  # IANA key
    fields: tuple[str, ...] = field(compare=False)  # the five fields, aliases expanded
    minutes: tuple[int, ...] = field(compare=False, repr=False)
    hours: tuple[int, ...] = field(compare=False, repr=False)
    days: frozenset[int] = field(compare=False, repr=False)
    months: frozenset[int] = field(compare=False, repr=False)
    weekdays: frozenset[int] = field(compare=False, repr=False)  # 0 = Sunday; 7 folded into 0
    # Vixie cron: when day-of-month or day-of-week starts with '*', a day must match both.
    days_and: bool = field(compare=False, repr=False)
    # Debian cron: a job whose minute or hour field starts with '*' is a wildcard job, which
    # the DST rules treat differently from a fixed-time job.
    wildcard: bool = field(compare=False)
    zone: ZoneInfo = field(compare=False, repr=False)
    # Minutes since local midnight at which the job fires on a matching day, ascending.
    day_minutes: tuple[int, ...] = field(compare=False, repr=False)
    # Matching days of a month, indexed by [weekday of the 1st (0 = Sunday)][length - 28].
    month_days: tuple[tuple[tuple[int, ...], ...], ...] = field(compare=False, repr=False)

    def matches_date(self, day: date) -> bool:
        """Whether the job runs on this local calendar day (months and both day fields)."""
        if day.month not in self.months:
            return False
        first_weekday, length = calendar.monthrange(day.year, day.month)
        return day.day in self.month_days[(first_weekday + 1) % 7][length - 28]

    def matches_wall_time(self, wall: datetime) -> bool:
        """Whether a naive local wall-clock time matches all five fields."""
        return wall.minute in self.minutes and wall.hour in self.hours and self.matches_date(wall)

    def next_fire_after(self, after_utc: datetime) -> datetime:
        """The first fire time strictly after ``after_utc``, as an aware UTC datetime.

        Local days without a clock change are computed as "wall time minus a fixed offset",
        jumping to the next matching day and bisecting its fire minutes. Days with a clock
        change apply Debian's DST rules minute by minute (see _fires_on_changeover_day).
        """
        after = _as_utc(after_utc, "after_utc")
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

    def _search(self, after: datetime) -> datetime | None:
        local_day = after.astimezone(self.zone).date()
        # Fires of the previous local day can fall after `after` only if that day had a clock
        # change (a fixed-time job moved to the end of a gap at midnight, or a repeated hour
        # across midnight); an ordinary day ends before the next local midnight.
        if _day_offset(self.tz, local_day - ONE_DAY) is None:
            local_day -= ONE_DAY
        day = self._next_matching_day(local_day)
        best: datetime | None = None
        best_day: date | None = None
        while day is not None and (best_day is None or day <= best_day + ONE_DAY):
            offset = _day_offset(self.tz, day)
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
        end = _as_utc(end_utc, "end_utc")
        fires: list[datetime] = []
        for fire in self.iter_fire_times(start_utc):
            if fire > end or len(fires) >= limit:
                break
            fires.append(fire)
        return fires

    def dst_note(self, fire_utc: datetime) -> str | None:
        """Which DST rule, if any, shaped this fire time, in words; None when none did.

        E.g. "02:30 does not exist on this day: runs at 03:00" or
        "01:00-01:59 happens twice: fires in both".
        """
        fire = _as_utc(fire_utc, "fire_utc")
        local = fire.astimezone(self.zone)
        wall = local.replace(tzinfo=None, fold=0)
        offset_first, offset_second = _offsets(self.zone, wall)
        if offset_first > offset_second:
            # The clock was set back: wall times in [change + second, change + first) repeat.
            change = _change_instant(
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
        offset_before = _utc_offset(self.zone, fire - ONE_SECOND)
        offset_now = local.utcoffset()
        assert offset_now is not None
        if offset_before >= offset_now:
            return None
        # The clock jumped forward at this instant: fixed times in the gap run now.
        gap_start = (fire + offset_before).replace(tzinfo=None)
        skipped = self._skipped_wall_times(gap_start, wall)
        if not skipped:
            return None
        once = "" if len(skipped) == 1 else "once "
        return f"{_wall_times(skipped, 'not exist')} on this day: runs {once}at {wall:%H:%M}"

    def _skipped_wall_times(self, start: datetime, end: datetime) -> list[datetime]:
        """The naive wall times in [start, end) that match all five fields, minute by minute."""
        skipped = []
        wall_time = start
        while wall_time < end:
            if self.matches_wall_time(wall_time):
                skipped.append(wall_time)
            wall_time += ONE_MINUTE
        return skipped

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


# --- validation -------------------------------------------------------------------------------


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
    # The fields are checked once per expression, whatever the zone; the zone is checked after
    # them, so that an expression's own errors are reported first, as before.
    fields = _compile_fields(expression)
    return replace(fields, tz=tz, zone=_zone(tz))


@lru_cache(maxsize=4096)
def _compile_fields(expression: str) -> CronSpec:
    """Parses and checks the five fields; the zone of the spec returned is a placeholder."""
    if not expression:
        raise CronError("cron expression is empty")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CronError(f"cron expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    parts = expression.split(" ")
    if parts[0].startswith("@"):
        fields = _expand_alias(parts)
        expression = parts[0].lower()
    else:
        fields = parts
        if len(fields) < 5:
            raise CronError(f"too few fields: expected 5 ({FIELDS_HINT}), got {len(fields)}")
        if len(fields) > 5:
            raise CronError(
                f"too many fields: expected 5 ({FIELDS_HINT}), got {len(fields)}; "
                "seconds, years and commands are not supported"
            )
    minutes, hours, days, months, weekdays = (
        _parse_field(text, kind) for text, kind in zip(fields, _KINDS, strict=True)
    )
    if 7 in weekdays:  # day-of-week 7 is Sunday too
        weekdays = (weekdays - {7}) | {0}
    days_and = fields[2].startswith("*") or fields[4].startswith("*")
    month_days = _month_day_table(days, weekdays, days_and)
    _check_fires_often_enough(days, months, month_days)
    return CronSpec(
        expression=expression,
        tz="UTC",
        fields=tuple(fields),
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=days,
        months=months,
        weekdays=weekdays,
        days_and=days_and,
        wildcard=fields[0].startswith("*") or fields[1].startswith("*"),
        zone=_UTC_ZONE,
        day_minutes=tuple(h * 60 + m for h in sorted(hours) for m in sorted(minutes)),
        month_days=month_days,
    )


def _expand_alias(parts: list[str]) -> list[str]:
    alias = parts[0].lower()
    if alias == "@reboot":
        raise CronError("@reboot is not supported: a schedule needs times to fire")
    if alias not in ALIASES:
        raise CronError(
            f"unknown alias '{alias}': use @hourly, @daily, @weekly, @monthly, @yearly or @annually"
        )
    if len(parts) > 1:
        raise CronError(f"{alias} stands alone: remove '{' '.join(parts[1:])}'")
    return ALIASES[alias].split(" ")


def _parse_field(text: str, kind: _FieldKind) -> frozenset[int]:
    """The set of values one field selects, Vixie-style; raises CronError on any defect."""
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"{kind.name} field '{text}' has an empty list item")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not _NUMBER.fullmatch(step_text) or int(step_text) == 0:
                raise CronError(
                    f"{kind.name} step in '{item}' must be a whole number of at least 1"
                )
            step = int(step_text)
        if base == "*":
            low, high = kind.low, kind.high
        elif "-" in base:
            low_text, _, high_text = base.partition("-")
            if not low_text or not high_text:
                raise CronError(f"{kind.name} range '{base}' is missing a bound")
            low, high = _value(low_text, kind), _value(high_text, kind)
            if low > high:
                raise CronError(
                    f"{kind.name} range '{base}' is backwards: write the smaller value first"
                )
        else:
            low = _value(base, kind)
            # 'N/step' means 'N-max/step', as in cronie, croniter and crondst.
            high = kind.high if slash else low
        values.update(range(low, high + 1, step))
    return frozenset(values)


def _value(text: str, kind: _FieldKind) -> int:
    if _NUMBER.fullmatch(text):
        number = int(text)
        if not kind.low <= number <= kind.high:
            raise CronError(f"{kind.name} {number} is out of range {kind.low}-{kind.high}")
        return number
    if text.lower() in kind.names:  # names are case-insensitive, as in cron
        return kind.names.index(text.lower()) + (1 if kind.name == "month" else 0)
    if kind.names:
        raise CronError(f"{kind.name} '{text}' is not a number or {kind.names_hint}")
    raise CronError(f"{kind.name} '{text}' is not a number")


@lru_cache(maxsize=1024)
def _month_day_table(
    days: frozenset[int], weekdays: frozenset[int], days_and: bool
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Matching days of a month for each (weekday of the 1st, month length) combination.

    Cached: many expressions share their day fields (a tick may meet thousands of distinct
    expressions, and compiles each).
    """
    table = []
    for first_weekday in range(7):
        on_weekday: set[int] = set()
        for weekday in weekdays:
            on_weekday |= _DAYS_ON_WEEKDAY[first_weekday][weekday]
        # Vixie cron: if either day field starts with '*' both must match, else either.
        full = tuple(sorted(days & on_weekday if days_and else days | on_weekday))
        table.append(
            (
                full[: bisect_right(full, 28)],
                full[: bisect_right(full, 29)],
                full[: bisect_right(full, 30)],
                full,
            )
        )
    return tuple(table)


# The days 1-31 of a month whose 1st is on weekday `first` (0 = Sunday) that fall on `weekday`.
_DAYS_ON_WEEKDAY = tuple(
    tuple(
        frozenset(day for day in range(1, 32) if (first + day - 1) % 7 == weekday)
        for weekday in range(7)
    )
    for first in range(7)
)


def _check_fires_often_enough(
    days: frozenset[int],
    months: frozenset[int],
    month_days: tuple[tuple[tuple[int, ...], ...], ...],
) -> None:
    """Reject schedules that never fire, or that can go more than five years without firing.

    Checked structurally, without the clock: over 2001-2028, a full 28-year cycle of the
    calendar (weekdays and leap years repeat every 28 years from 1901 to 2099), measuring the
    longest gap between fire days, the wrap-around included. The check is thus the same on
    every day, and "fires within the next five years" holds from any date up to 2099 (Feb 29
    skips 2100: `0 0 29 2 *` then waits eight years, which we accept).
    """
    if all(all(by_length) for by_length in month_days):
        # Every possible month (each weekday of the 1st, each length) has a matching day, so
        # every chosen month of every year fires: gaps stay under 13 months. Skips the scan
        # below, which costs about a millisecond.
        return
    fire_days = [
        before_first + day
        for month, first_weekday, length, before_first in _CYCLE_MONTHS
        if month in months
        for day in month_days[first_weekday][length - 28]
    ]
    if not fire_days:
        # Only possible when every day-of-month exceeds every chosen month's length.
        month_names = _join([calendar.month_name[m] for m in sorted(months)], "and")
        verb = "has" if len(months) == 1 else "have"
        day_numbers = _join([str(d) for d in sorted(days)], "or")
        raise CronError(
            f"{month_names} never {verb} {day_numbers} days: this schedule would never fire"
        )
    cycle = _CYCLE_END - _CYCLE_START
    gaps = [later - earlier for earlier, later in pairwise(fire_days)]
    gaps.append(fire_days[0] + cycle - fire_days[-1])
    if max(gaps) > MAX_GAP_DAYS:
        years = max(gaps) // 365
        span = f"{years} years" if years > 5 else "more than five years"
        raise CronError(
            f"this schedule can go {span} without firing: "
            "a schedule must fire at least once every five years"
        )


_CYCLE_START = date(2001, 1, 1).toordinal()
_CYCLE_END = date(2029, 1, 1).toordinal()
# (month, weekday of the 1st with 0 = Sunday, length, ordinal of the day before the 1st)
_CYCLE_MONTHS = tuple(
    (
        month,
        (calendar.monthrange(year, month)[0] + 1) % 7,
        calendar.monthrange(year, month)[1],
        date(year, month, 1).toordinal() - 1,
    )
    for year in range(2001, 2029)
    for month in range(1, 13)
)


def _wall_times(times: list[datetime], verb: str) -> str:
    """E.g. "02:30 does not exist", "02:00, 02:05 and 02:10 do not exist" or "01:00-01:59
    happens twice", for the verbs "not exist" and "happen twice"."""
    singular = {"not exist": "does not exist", "happen twice": "happens twice"}[verb]
    plural = {"not exist": "do not exist", "happen twice": "happen twice"}[verb]
    if len(times) == 1:
        return f"{times[0]:%H:%M} {singular}"
    if len(times) <= 3:
        return f"{_join([f'{t:%H:%M}' for t in times], 'and')} {plural}"
    return f"{times[0]:%H:%M}-{times[-1]:%H:%M} {singular}"


def _join(words: list[str], conjunction: str) -> str:
    if len(words) == 1:
        return words[0]
    return f"{', '.join(words[:-1])} {conjunction} {words[-1]}"


@lru_cache(maxsize=1)
def known_time_zones() -> frozenset[str]:
    """The zone names a schedule may use: real IANA zones.

    The one list that saving a schedule and the tick both check, so that the tick never runs a
    zone that saving refuses. available_timezones() walks the zone database on disk: read once.
    Left out: the host's `localtime` (its meaning changes from machine to machine), placeholders
    (`Factory`, `posixrules`) and the `posix/` and `right/` copies of the database (`right/`
    counts leap seconds, so its clock is not the one cron users mean).
    """
    return frozenset(
        zone
        for zone in available_timezones()
        if zone not in {"localtime", "Factory", "posixrules"}
        and not zone.startswith(("posix/", "right/"))
    )


def _zone(tz: str) -> ZoneInfo:
    if tz in known_time_zones():
        try:
            return ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    raise CronError(f"unknown time zone '{tz}'")


def _as_utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {moment.isoformat()}")
    return moment.astimezone(UTC)


# --- time zone helpers ------------------------------------------------------------------------


@lru_cache(maxsize=65536)
def _day_offset(tz: str, day: date) -> timedelta | None:
    """The UTC offset of a local day without a clock change, or None if the clock changes.

    Looks at the offsets of both local midnights (both folds, so a change at midnight counts
    for both days). A day that starts and ends on the same offset could still hide two changes
    that cancel out; no zone in tzdata has two changes within 48 hours, so none does.
    """
    zone = ZoneInfo(tz)
    offsets: set[timedelta] = set()
    for midnight in (day, day + ONE_DAY):
        offsets.update(_offsets(zone, datetime(midnight.year, midnight.month, midnight.day)))
    return offsets.pop() if len(offsets) == 1 else None


def _offsets(zone: ZoneInfo, wall: datetime) -> tuple[timedelta, timedelta]:
    """UTC offsets of a naive wall time for fold=0 and fold=1.

    Equal: the time exists once. First > second: it happens twice (the clock was set back).
    First < second: it does not exist (the clock jumped forward over it).
    """
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    assert first is not None and second is not None
    return first, second


def _utc_offset(zone: ZoneInfo, moment: datetime) -> timedelta:
    offset = moment.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _change_instant(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The instant of the clock change between two UTC instants, to the second.

    ``before`` has the old offset and ``after`` the new one; bisects the seconds between.
    """
    old = _utc_offset(zone, before)
    low, high = int(before.timestamp()), int(after.timestamp())
    if _utc_offset(zone, datetime.fromtimestamp(low, UTC)) != old:
        return before
    while high - low > 1:
        middle = (low + high) // 2
        if _utc_offset(zone, datetime.fromtimestamp(middle, UTC)) == old:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)


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
        edges = {*_offsets(zone, top), *_offsets(zone, top + timedelta(minutes=59))}
        if len(edges) == 1:  # no change within this hour: wall time minus the offset
            offset = edges.pop()
            fires.update(
                (top + timedelta(minutes=m) - offset).replace(tzinfo=UTC) for m in spec.minutes
            )
            continue
        for minute in spec.minutes:
            wall = top + timedelta(minutes=minute)
            first, second = _offsets(zone, wall)
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
                    gap_ends[first, second] = _change_instant(zone, before, after)
                fires.add(gap_ends[first, second])
    return tuple(sorted(fires))


# --- module-level API -------------------------------------------------------------------------


def _spec(expr: str | CronSpec, tz: str | None) -> CronSpec:
    if isinstance(expr, CronSpec):
        if tz is not None and tz != expr.tz:
            raise ValueError(f"time zone {tz!r} differs from the compiled spec's {expr.tz!r}")
        return expr
    if tz is None:
        raise ValueError("a time zone is required with a text expression")
    return validate(expr, tz)


def next_fire_after(expr: str | CronSpec, tz: str | None, after_utc: datetime) -> datetime:
    """The first fire time strictly after ``after_utc`` (aware), as an aware UTC datetime.

    ``expr`` is an expression (validated, cached) or a CronSpec from validate(); with a
    CronSpec, ``tz`` may be None.
    """
    return _spec(expr, tz).next_fire_after(after_utc)


def fire_times_between(
    expr: str | CronSpec,
    tz: str | None,
    start_utc: datetime,
    end_utc: datetime,
    limit: int = 1000,
) -> list[datetime]:
    """Fire times ``t`` with ``start_utc < t <= end_utc`` in order, at most ``limit``."""
    return _spec(expr, tz).fire_times_between(start_utc, end_utc, limit)


def dst_note(expr: str | CronSpec, tz: str | None, fire_utc: datetime) -> str | None:
    """The DST rule that shaped a fire time, in words, or None. See CronSpec.dst_note."""
    return _spec(expr, tz).dst_note(fire_utc)


def is_wildcard(expr: str | CronSpec) -> bool:
    """Whether the minute or hour field starts with '*' (Debian's wildcard job, for DST)."""
    return _spec(expr, "UTC" if isinstance(expr, str) else None).wildcard


def wall_time_to_utc(wall: datetime, tz: str) -> datetime:
    """The UTC instant of a naive local wall-clock time; aware datetimes are just converted.

    A wall time that happens twice means its first occurrence. A wall time that does not exist
    (in a spring-forward gap) means the last instant before the gap: "after 02:30" then
    includes the fires that the gap moves to its end.
    """
    if wall.tzinfo is not None:
        return _as_utc(wall, "wall")
    zone = _zone(tz)
    first, second = _offsets(zone, wall)
    if first >= second:
        return (wall - first).replace(tzinfo=UTC)
    change = _change_instant(
        zone, (wall - second).replace(tzinfo=UTC), (wall - first).replace(tzinfo=UTC)
    )
    return change - timedelta(microseconds=1)


# --- clock changes ------------------------------------------------------------------------------

# How far ahead clock_changes looks for a zone's next changes (every zone with DST changes at
# least once a year).
CLOCK_CHANGE_HORIZON_DAYS = 2 * 366


@dataclass(frozen=True)
class ClockChange:
    """What a schedule does at one clock change of its zone, in words."""

    at: datetime  # the instant of the change, UTC
    day: date  # the local date of the change
    change: str  # "clocks go forward 1 hour at 02:00 (EST to EDT)"
    effect: str  # "02:30 does not exist; runs at 03:00 EDT", or "not affected"

    def __str__(self) -> str:
        return f"{self.day:%Y-%m-%d}: {self.change}: {self.effect}"


def no_clock_changes(tz: str) -> str:
    """What the preview says for a zone that does not change its clocks (Asia/Kolkata)."""
    return f"{tz} does not change its clocks (no daylight-saving time) in the next two years"


def clock_changes(
    expr: str | CronSpec, tz: str | None, after_utc: datetime, count: int = 2
) -> list[ClockChange]:
    """What the schedule does at its zone's next ``count`` clock changes after ``after_utc``.

    The changes come from the zone's rules (looked for up to two years ahead; none for a zone
    without DST); the effect on the schedule comes from its own fire times around each change,
    so it follows the same Debian rules as next_fire_after.
    """
    spec = _spec(expr, tz)
    start = _as_utc(after_utc, "after_utc")
    changes: list[ClockChange] = []
    # Weekly steps, then a bisection to the second: a step cannot jump over a change and back,
    # as no zone changes its clocks twice within a week (Morocco's Ramadan breaks last weeks).
    previous, old = start, _utc_offset(spec.zone, start)
    for days in range(7, CLOCK_CHANGE_HORIZON_DAYS + 7, 7):
        moment = start + days * ONE_DAY
        new = _utc_offset(spec.zone, moment)
        if new != old:
            instant = _change_instant(spec.zone, previous, moment)
            changes.append(_clock_change(spec, instant, old, new))
            if len(changes) == count:
                break
        previous, old = moment, new
    return changes


def _clock_change(spec: CronSpec, instant: datetime, old: timedelta, new: timedelta) -> ClockChange:
    zone = spec.zone
    old_name = (instant - ONE_SECOND).astimezone(zone).tzname()
    new_name = instant.astimezone(zone).tzname()
    old_wall = (instant + old).replace(tzinfo=None)  # the wall time at which the clock changes
    new_wall = (instant + new).replace(tzinfo=None)
    direction = "forward" if new > old else "back"
    change = (
        f"clocks go {direction} {_amount(abs(new - old))} at {old_wall:%H:%M} "
        f"({old_name} to {new_name})"
    )
    if new > old:
        effect = _spring_forward_effect(spec, instant, old_wall, new_wall)
    else:
        effect = _fall_back_effect(spec, instant, old - new)
    return ClockChange(instant, old_wall.date(), change, effect)


def _spring_forward_effect(
    spec: CronSpec, instant: datetime, gap_start: datetime, gap_end: datetime
) -> str:
    """Wall times in [gap_start, gap_end) do not exist; Debian runs a fixed-time job once at
    the first instant after the gap and a wildcard job not at all."""
    skipped = spec._skipped_wall_times(gap_start, gap_end)
    if not skipped:
        return "not affected"
    missing = _wall_times(skipped, "not exist")
    fire = spec.next_fire_after(instant - ONE_SECOND)
    # A fire at the end of the gap may be the job's own time there (03:00 for "0 * * * *"):
    # dst_note says whether the gap moved it.
    if fire != instant or spec.dst_note(fire) is None:
        return f"{missing}; skipped (a wildcard job follows the new clock)"
    once = "" if len(skipped) == 1 else "once, "
    return f"{missing}; runs {once}at {fire.astimezone(spec.zone):%H:%M %Z}"


def _fall_back_effect(spec: CronSpec, instant: datetime, repeat: timedelta) -> str:
    """Wall times of the last ``repeat`` before ``instant`` happen again after it; Debian runs
    a fixed-time job in the first pass only and a wildcard job in both."""
    first = spec.fire_times_between(instant - repeat - ONE_SECOND, instant - ONE_SECOND)
    second = spec.fire_times_between(instant - ONE_SECOND, instant + repeat - ONE_SECOND)
    if not first and not second:
        return "not affected"
    local = [fire.astimezone(spec.zone) for fire in first or second]
    twice = _wall_times([t.replace(tzinfo=None) for t in local], "happen twice")
    if not second:
        if len(first) == 1:
            return f"{twice}; runs once, at {local[0]:%H:%M %Z}"
        return f"{twice}; runs only in the first pass ({local[0]:%Z})"
    passes = [fire.astimezone(spec.zone) for fire in (first[0], second[0])]
    if len(first) == len(second) == 1:
        both = f"{passes[0]:%H:%M %Z} and {passes[1]:%H:%M %Z}"
        return f"{twice}; a wildcard job fires at both: {both}"
    return (
        f"{twice}; a wildcard job fires in both passes: {len(first)} times in "
        f"{passes[0]:%Z}, {len(second)} in {passes[1]:%Z}"
    )


def _amount(delta: timedelta) -> str:
    minutes = delta // ONE_MINUTE
    if minutes % 60:
        return f"{minutes} minutes"
    hours = minutes // 60
    return "1 hour" if hours == 1 else f"{hours} hours"


def describe(expr: str | CronSpec) -> str:
    """The expression in plain English with 24-hour times, e.g. "At 02:30".

    Validates first: cron-descriptor accepts garbage and reads six fields as seconds-first.
    """
    spec = _spec(expr, "UTC" if isinstance(expr, str) else None)
    plain = _plain_fields(spec)
    # Day-of-week as plain numbers: cron-descriptor misreads 7 and steps there ("5/1" is
    # Friday to Sunday, "*/2" is Sunday, Tuesday, Thursday and Saturday).
    try:
        text = _describe((*spec.fields[:4], plain[4]), spec.days_and)
    except (FormatError, ValueError, IndexError, KeyError):
        # It also stumbles on valid lists such as "2,*": describe the same value sets
        # written as plain numbers and ranges instead.
        text = _describe(plain, spec.days_and)
    return "".join([text, *(f" ({note})" for note in step_notes(spec))])


def step_notes(expr: str | CronSpec) -> list[str]:
    """Where a step does not divide its field's range, the real gap at the wrap, in words.

    "*/7" in the minute field is "Every 7 minutes" but fires at :56 and then at :00, 4 minutes
    later: "from :00 each hour; the gap across the hour is 4 minutes". A gap that only a
    restriction elsewhere crosses (minutes in a single hour) is not mentioned. Day-of-week
    needs no note: its description names the days.
    """
    spec = _spec(expr, "UTC" if isinstance(expr, str) else None)
    minute, hour, day, month, _ = spec.fields
    notes = []
    gap = _wrap_gap(minute, spec.minutes, 60)
    if gap is not None and _has_neighbours(spec.hours, 24):
        notes.append(
            f"from :{spec.minutes[0]:02d} each hour; the gap across the hour is "
            f"{_plural(gap, 'minute')}"
        )
    gap = _wrap_gap(hour, spec.hours, 24)
    if gap is not None and _fires_on_consecutive_days(spec):
        notes.append(
            f"from {spec.hours[0]:02d}:{spec.minutes[0]:02d} each day; the gap across "
            f"midnight is {_plural(gap, 'hour')}"
        )
    days = sorted(spec.days)
    if _single_step(day) and len(spec.weekdays) == 7 and _has_neighbours(spec.months, 12, 1):
        # Month lengths vary, so the gap across the month end does too. (With a day of the
        # week as well, the step is not what sets the gaps.)
        gaps = {
            days[0] + length - max(d for d in days if d <= length)
            for length in range(28, 32)
            if days[0] <= length
        }
        if len(days) > 1 and gaps != {_step(day)}:
            low, high = min(gaps), max(gaps)
            size = _plural(low, "day") if low == high else f"{low} to {high} days"
            notes.append(f"from day {days[0]} each month; the gap across the month end is {size}")
    months = sorted(spec.months)
    gap = _wrap_gap(month, months, 12)
    if gap is not None:
        notes.append(
            f"from {calendar.month_name[months[0]]} each year; the gap across the year end "
            f"is {_plural(gap, 'month')}"
        )
    return notes


def _single_step(text: str) -> bool:
    return "/" in text and "," not in text


def _step(text: str) -> int:
    return int(text.partition("/")[2])


def _wrap_gap(text: str, values: tuple[int, ...] | list[int], period: int) -> int | None:
    """The gap from the last value to the first of the next cycle, if the field is one step
    term and that gap differs from the step."""
    if not _single_step(text) or len(values) < 2:
        return None
    gap = values[0] + period - values[-1]
    return None if gap == _step(text) else gap


def _has_neighbours(values: tuple[int, ...] | frozenset[int], period: int, low: int = 0) -> bool:
    """Whether two values follow each other (the last and the first count too)."""
    chosen = set(values)
    return any((value - low + 1) % period + low in chosen for value in chosen)


def _fires_on_consecutive_days(spec: CronSpec) -> bool:
    weekdays = len(spec.weekdays) == 7 or _has_neighbours(spec.weekdays, 7)
    days = _has_neighbours(spec.days, 31, low=1)
    return (days and weekdays) if spec.days_and else (days or weekdays)


def _plural(amount: int, unit: str) -> str:
    return f"{amount} {unit}" if amount == 1 else f"{amount} {unit}s"


def _plain_fields(spec: CronSpec) -> tuple[str, ...]:
    sets = (spec.minutes, spec.hours, spec.days, spec.months, spec.weekdays)
    return tuple(
        "*"
        if len(values) == kind.high - kind.low + 1 - (kind.name == "day-of-week")
        else _ranges(sorted(values))
        for values, kind in zip(sets, _KINDS, strict=True)
    )


def _ranges(values: list[int]) -> str:
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


@lru_cache(maxsize=1024)
def _describe(fields: tuple[str, ...], days_and: bool) -> str:
    options = Options(locale_code="en_US", use_24hour_time_format=True)
    text = ExpressionDescriptor(" ".join(fields), options).get_description()
    if days_and and fields[2] != "*" and fields[4] != "*":
        # cron-descriptor says "or" whenever both day fields are set; Vixie cron requires both
        # when one starts with '*' ("0 0 */2 * 1": Mondays that fall on an odd day).
        text = text.replace(", or on ", ", only on ")
    return text
