"""What a schedule does at its zone's next clock changes, in words, for the preview."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from .fires import CronSpec
from .words import wall_times_phrase
from .zones import as_utc, change_instant, utc_offset

ONE_DAY = timedelta(days=1)
ONE_MINUTE = timedelta(minutes=1)
ONE_SECOND = timedelta(seconds=1)

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


def clock_changes(spec: CronSpec, after_utc: datetime, count: int = 2) -> list[ClockChange]:
    """What the schedule does at its zone's next ``count`` clock changes after ``after_utc``.

    The changes come from the zone's rules (looked for up to two years ahead; none for a zone
    without DST); the effect on the schedule comes from its own fire times around each change,
    so it follows the same Debian rules as next_fire_after.
    """
    start = as_utc(after_utc, "after_utc")
    changes: list[ClockChange] = []
    # Weekly steps, then a bisection to the second: a step cannot jump over a change and back,
    # as no zone changes its clocks twice within a week (Morocco's Ramadan breaks last weeks).
    previous, old = start, utc_offset(spec.zone, start)
    for days in range(7, CLOCK_CHANGE_HORIZON_DAYS + 7, 7):
        moment = start + days * ONE_DAY
        new = utc_offset(spec.zone, moment)
        if new != old:
            instant = change_instant(spec.zone, previous, moment)
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
    skipped = spec.matching_wall_times(gap_start, gap_end)
    if not skipped:
        return "not affected"
    missing = wall_times_phrase(skipped, "not exist")
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
    twice = wall_times_phrase([t.replace(tzinfo=None) for t in local], "happen twice")
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
