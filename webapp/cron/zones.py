"""Time zones for the cron module: the zones a schedule may use, UTC offsets of wall times and
days, the instants of clock changes, and a local wall time as a UTC instant."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from difflib import get_close_matches
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from .errors import CronError

ONE_DAY = timedelta(days=1)


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


@lru_cache(maxsize=1)
def zones_by_folded_name() -> dict[str, str]:
    """known_time_zones() by their case-folded names (no two zones differ only in case)."""
    return {zone.casefold(): zone for zone in known_time_zones()}


def check_time_zone(name: object) -> str:
    """The one time zone rule (a schedule's, a tenant's, the preview's, the CLI's): the name of
    a zone from known_time_zones(), matched whatever its case (`europe/berlin` is
    `Europe/Berlin`), or CronError saying why not and, when a zone is close, which."""
    if not isinstance(name, str):
        raise CronError(f"time zone {name!r} must be text")
    folded = name.strip().casefold()
    zone = zones_by_folded_name().get(folded)
    if zone is None:
        raise CronError(f"unknown time zone {name!r}{did_you_mean(folded)}")
    return zone


def did_you_mean(folded: str) -> str:
    """`: did you mean Europe/Berlin?` for a city alone (`berlin`) or a near miss
    (`Europe/Berln`), or nothing."""
    names = zones_by_folded_name()
    cities = sorted(zone for key, zone in names.items() if key.rsplit("/", 1)[-1] == folded)
    close = cities[:3] or [names[key] for key in get_close_matches(folded, names, 1, 0.8)]
    return f": did you mean {' or '.join(close)}?" if close else ""


# tzdata's legacy names of fixed offsets: a fixed UTC offset all year, without the daylight
# saving time that someone who types `EST` for New York expects. Accepted, with a warning
# (zone_warning) naming a place's zone instead.
LEGACY_FIXED_ZONES = {"EST": "America/New_York", "MST": "America/Denver", "HST": "Pacific/Honolulu"}


def zone_warning(name: str) -> str | None:
    """What to tell someone who chose the zone `name` (as check_time_zone returned it), or
    None: a legacy fixed offset is said to be one."""
    place = LEGACY_FIXED_ZONES.get(name)
    if place is None:
        return None
    offset = datetime(2000, 1, 1, tzinfo=ZoneInfo(name)).strftime("%z")
    return (
        f"{name} is a legacy fixed offset, UTC{offset[:3]}:{offset[3:]} all year without "
        f"daylight saving time: for a place's local time choose its zone, such as {place}"
    )


def load_zone(tz: str) -> ZoneInfo:
    """The zone of a name that check_time_zone accepts; CronError for any other name."""
    try:
        return ZoneInfo(check_time_zone(tz))
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"unknown time zone {tz!r}") from None


# The years a typed time may name (the panel's "Run once later", a backfill's window, the API's
# `at`, the preview's --after): beyond them a zone's conversion may overflow.
FIRST_YEAR, LAST_YEAR = 1970, 2999
FIRST_DAY, LAST_DAY = date(FIRST_YEAR, 1, 1), date(LAST_YEAR, 12, 31)


def parse_typed_time(text: str) -> datetime:
    """The one reading of a time a user types (panel, API, CLI): ISO 8601, with an offset or
    without one (then a wall-clock time, see local_time_to_utc), within FIRST_YEAR to LAST_YEAR;
    CronError says what is wrong with the text."""
    shown = repr(text if len(text) <= 40 else f"{text[:40]}...")
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        example = "e.g. 2026-03-08T09:30"
        raise CronError(f"{shown} is not an ISO 8601 date and time, {example}") from None
    return within_years(moment, shown)


def within_years(moment: datetime, shown: str) -> datetime:
    if not FIRST_YEAR <= moment.year <= LAST_YEAR:
        raise CronError(f"{shown} is outside the years {FIRST_YEAR} to {LAST_YEAR}")
    return moment


def local_time_to_utc(moment: datetime, tz: str) -> datetime:
    """The instant a typed time names: an aware time converted, a naive one read as a wall-clock
    time in `tz`. As for fixed-time fires: a wall time skipped by a DST change means the first
    instant after the gap, one that happens twice its first occurrence. CronError outside
    FIRST_YEAR to LAST_YEAR or for an unknown zone."""
    within_years(moment, moment.isoformat())
    if moment.tzinfo is not None:
        return as_utc(moment, "moment")
    utc = wall_time_to_utc(moment, tz)
    if utc.astimezone(load_zone(tz)).replace(tzinfo=None) != moment:
        utc += timedelta(microseconds=1)  # the last instant before the gap, plus one
    return utc


def parse_local_time(text: str, tz: str) -> datetime:
    """parse_typed_time, then local_time_to_utc: a typed time as UTC."""
    return local_time_to_utc(parse_typed_time(text), tz)


def as_utc(moment: datetime, name: str) -> datetime:
    """An aware datetime in UTC; a naive one is a programming error, named by ``name``."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {moment.isoformat()}")
    return moment.astimezone(UTC)


def wall_time_to_utc(wall: datetime, tz: str) -> datetime:
    """The UTC instant of a naive local wall-clock time; aware datetimes are just converted.

    A wall time that happens twice means its first occurrence. A wall time that does not exist
    (in a spring-forward gap) means the last instant before the gap: "after 02:30" then
    includes the fires that the gap moves to its end.
    """
    if wall.tzinfo is not None:
        return as_utc(wall, "wall")
    zone = load_zone(tz)
    first, second = wall_offsets(zone, wall)
    if first >= second:
        return (wall - first).replace(tzinfo=UTC)
    change = change_instant(
        zone, (wall - second).replace(tzinfo=UTC), (wall - first).replace(tzinfo=UTC)
    )
    return change - timedelta(microseconds=1)


@lru_cache(maxsize=65536)
def day_offset(tz: str, day: date) -> timedelta | None:
    """The UTC offset of a local day without a clock change, or None if the clock changes.

    Looks at the offsets of both local midnights (both folds, so a change at midnight counts
    for both days). A day that starts and ends on the same offset could still hide two changes
    that cancel out; no zone in tzdata has two changes within 48 hours, so none does.
    """
    zone = ZoneInfo(tz)
    offsets: set[timedelta] = set()
    for midnight in (day, day + ONE_DAY):
        offsets.update(wall_offsets(zone, datetime(midnight.year, midnight.month, midnight.day)))
    return offsets.pop() if len(offsets) == 1 else None


def wall_offsets(zone: ZoneInfo, wall: datetime) -> tuple[timedelta, timedelta]:
    """UTC offsets of a naive wall time for fold=0 and fold=1.

    Equal: the time exists once. First > second: it happens twice (the clock was set back).
    First < second: it does not exist (the clock jumped forward over it).
    """
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    assert first is not None and second is not None
    return first, second


def utc_offset(zone: ZoneInfo, moment: datetime) -> timedelta:
    """The zone's UTC offset at an aware instant."""
    offset = moment.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def change_instant(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The instant of the clock change between two UTC instants, to the second.

    ``before`` has the old offset and ``after`` the new one; bisects the seconds between.
    """
    old = utc_offset(zone, before)
    low, high = int(before.timestamp()), int(after.timestamp())
    if utc_offset(zone, datetime.fromtimestamp(low, UTC)) != old:
        return before
    while high - low > 1:
        middle = (low + high) // 2
        if utc_offset(zone, datetime.fromtimestamp(middle, UTC)) == old:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)
