"""Pure cron math: validate five-field expressions, compute fire times, describe them.

Fire times are computed in the schedule's local time and returned as aware UTC datetimes.
Day fields and daylight-saving time follow Debian's cron (Vixie cron plus Debian's DST patch),
because that is what crontab users know; tests compare us with an independent reimplementation.
- Day fields: when both are restricted a day matches either (``0 0 13 * 5``); when either
  starts with ``*`` (even ``*/2``) it must match both.
- A *wildcard* job has a minute or hour field starting with ``*``; the others are fixed-time.
- Spring forward: a fixed-time job whose time is skipped fires once, at the first instant after
  the gap; a wildcard job follows the new clock only.
- Fall back: a wildcard job fires in both passes of the repeated hour, a fixed-time job in the
  first only.

Nothing here reads the clock or the database: every function takes the instant it reasons from.

Typical use: ``spec = validate(expr, tz)`` once (cached per expression and zone), then
``spec.next_fire_after(after_utc)``, ``spec.fire_times_between(start, end)``,
``spec.dst_note(fire)``, ``describe(spec)`` or ``clock_changes(spec, now)`` as often as needed.

The day fields also take the extended day rules (``L``, ``LW``, ``D#N``, ``D#L``, ``DL``): see
``days``; they only decide which days match, and the DST rules above apply to them unchanged.

The modules: ``fields`` parses and compiles the five fields; ``days`` the days of a month they
pick; ``fires`` holds CronSpec, its fire times and the DST rules; ``zones`` the zone list and
offsets; ``clock_changes`` and ``describe`` the words of the preview; ``words`` the phrasing
they share; ``errors`` CronError; ``phrases`` (with ``phrase_plan``) plain-English input:
``parse_phrase("every weekday at 9:30")`` is ``"30 9 * * 1-5"``, ``cron_from_input`` reads a
cron field's input as cron or as a phrase; ``builder`` the schedule builder's shapes
(``read_builder``, ``Shape.cron()``, ``shape_of``).
"""

from .builder import FIELDS as BUILDER_FIELDS
from .builder import (
    LAST_BUSINESS_DAY,
    BuilderError,
    Shape,
    builder_defaults,
    builder_shown,
    read_builder,
    shape_of,
)
from .clock_changes import ClockChange, clock_changes, no_clock_changes
from .describe import describe, step_notes
from .errors import CronError
from .fields import ALIASES, MAX_EXPRESSION_LENGTH, MAX_GAP_DAYS
from .fires import CronSpec, validate
from .phrase_plan import PhraseError
from .phrases import MAX_PHRASE_LENGTH, cron_from_input, looks_like_cron, parse_phrase
from .zones import (
    FIRST_DAY,
    FIRST_YEAR,
    LAST_DAY,
    LAST_YEAR,
    check_time_zone,
    known_time_zones,
    load_zone,
    local_time_to_utc,
    parse_local_time,
    parse_typed_time,
    wall_time_to_utc,
    zone_warning,
)

__all__ = [
    "ALIASES",
    "BUILDER_FIELDS",
    "FIRST_DAY",
    "FIRST_YEAR",
    "LAST_BUSINESS_DAY",
    "LAST_DAY",
    "LAST_YEAR",
    "MAX_EXPRESSION_LENGTH",
    "MAX_GAP_DAYS",
    "MAX_PHRASE_LENGTH",
    "BuilderError",
    "ClockChange",
    "CronError",
    "CronSpec",
    "PhraseError",
    "Shape",
    "builder_defaults",
    "builder_shown",
    "check_time_zone",
    "clock_changes",
    "cron_from_input",
    "describe",
    "known_time_zones",
    "load_zone",
    "local_time_to_utc",
    "looks_like_cron",
    "no_clock_changes",
    "parse_local_time",
    "parse_phrase",
    "parse_typed_time",
    "read_builder",
    "shape_of",
    "step_notes",
    "validate",
    "wall_time_to_utc",
    "zone_warning",
]
