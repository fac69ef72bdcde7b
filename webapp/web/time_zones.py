"""The IANA zone names offered in the form (the service validates whatever is typed)."""

from __future__ import annotations

from functools import cache

from webapp.cron import known_time_zones


@cache
def time_zone_names() -> tuple[str, ...]:
    # The zones saving accepts (no `posix/` or `right/` copies where the host's tzdata has them).
    return tuple(sorted(name for name in known_time_zones() if "/" in name or name == "UTC"))
