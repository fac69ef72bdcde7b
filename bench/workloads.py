"""Schedule sets for the benchmarks: a realistic mix and the worst case."""

from __future__ import annotations

import random

ZONES = (
    "UTC",
    "America/New_York",
    "America/Los_Angeles",
    "Europe/London",
    "Europe/Berlin",
    "Asia/Kolkata",
    "Asia/Tokyo",
    "Australia/Sydney",
)


def common_expressions() -> list[str]:
    """About 100 expressions of the kind crontabs are full of."""
    found: list[str] = [
        "* * * * *",
        "*/2 * * * *",
        "*/5 * * * *",
        "*/10 * * * *",
        "*/15 * * * *",
        "*/30 * * * *",
        "@hourly",
        "@daily",
        "@midnight",
        "@weekly",
        "@monthly",
        "@yearly",
        "*/15 9-17 * * 1-5",
        "0 9-17 * * 1-5",
        "*/30 8-18 * * mon-fri",
        "0 */2 * * *",
        "0 */4 * * *",
        "0 */6 * * *",
        "0 */12 * * *",
        "0 0 * * 0",
        "0 0 1 1 *",
        "0 0 1,15 * *",
    ]
    found += [f"{minute} * * * *" for minute in (5, 10, 15, 20, 30, 45, 50)]
    found += [
        f"{m} {h} * * *" for h in (0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 18, 22, 23) for m in (0, 30)
    ]
    found += [f"{m} {h} * * 1-5" for h in (7, 8, 9, 10, 17, 18) for m in (0, 30)]
    found += [f"0 {h} * * {d}" for h, d in ((9, 1), (8, 5), (10, 0), (6, 6), (3, 0), (17, 5))]
    found += [f"0 {h} {d} * *" for h, d in ((0, 1), (6, 1), (9, 1), (2, 15), (0, 28), (8, 10))]
    found += ["15 2 * * *", "45 3 * * *", "5 4 * * *", "0 2 * * 6", "0 4 * * 0", "30 1 * * *"]
    found += ["0 9 1 */3 *", "0 0 1 */6 *", "0 12 * * 1,3,5", "0 8 * * 2,4", "*/20 * * * *"]
    found += ["0 7 1-7 * *", "0 6 * 1-6 *", "0 3 * * 1", "0 20 * * *", "0 21 * * 1-5"]
    found += ["0 11 * * *", "0 13 * * *", "0 14 * * *", "0 15 * * *", "0 16 * * *"]
    found += ["0 19 * * *", "30 9 * * 1-5", "30 12 * * 1-5", "0 5 * * 1", "0 23 * * 0"]
    unique = list(dict.fromkeys(found))
    return unique[:100]


def realistic(n: int, seed: int = 42) -> list[tuple[str, str]]:
    """(expression, zone) for n schedules drawn from ~100 common expressions in 8 zones."""
    rng = random.Random(seed)
    expressions = common_expressions()
    return [(rng.choice(expressions), rng.choice(ZONES)) for _ in range(n)]


def worst_case(n: int) -> list[tuple[str, str]]:
    """n schedules, every one a different expression (so no cache helps)."""
    day_parts = ("* * *", "* * 1-5", "* * 0,6", "1 * *", "15 * *", "* * 1", "1-7 * *", "* 1-6 *")
    found: list[tuple[str, str]] = []
    for days in day_parts:
        for hour in range(24):
            for minute in range(60):
                if len(found) == n:
                    return found
                found.append((f"{minute} {hour} {days}", ZONES[len(found) % len(ZONES)]))
    if len(found) < n:
        raise ValueError(f"at most {len(found)} distinct expressions in the worst case")
    return found
