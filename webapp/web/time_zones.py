"""The IANA zone names offered in the form (the service validates whatever is typed)."""

from __future__ import annotations

from functools import cache
from zoneinfo import available_timezones


@cache
def time_zone_names() -> tuple[str, ...]:
    return tuple(sorted(name for name in available_timezones() if "/" in name or name == "UTC"))
