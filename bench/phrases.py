"""Plain-English input: microseconds to parse each phrase into cron (cron.parse_phrase, which
caches nothing), beside the cron module's own parse of the expression it gives (uncached), in
the same run. Verified: each phrase gives its expected cron, which validates. No database.

The preview answers as the admin types: the target is 1 ms per phrase at most, well under the
10 ms the form's live preview allows.

    python -m bench.phrases [--quick] [--rounds 7] [--n 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from bench.common import check, finish, machine, median, print_table, write_results
from tests.test_cron_phrases import PHRASES as TESTED
from webapp.cron import parse_phrase, validate
from webapp.cron.fields import parse_fields

# The issue's twelve phrases (the first of the tests' table) and two longer ones.
PHRASES = dict(list(TESTED.items())[:12]) | {
    "At 06:00, on day 1 of the month, only in January, April, July, and October": (
        "0 6 1 1,4,7,10 *"
    ),
    "every 2 hours from 8:00 to 18:00 on weekdays except Friday": "0 8-18/2 * * 1-4",
}
TARGET_US = 1000.0


def per_call_us(call: Callable[[], object], n: int, rounds: int) -> float:
    """The median over `rounds` of the mean time of `n` calls, in microseconds."""
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(n):
            call()
        samples.append((time.perf_counter() - started) / n * 1e6)
    return median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls, three rounds")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=2000)
    options = parser.parse_args(argv)
    rounds, n = (3, 200) if options.quick else (options.rounds, options.n)
    problems: list[str] = []
    rows = []
    uncached_fields = parse_fields.__wrapped__  # the cron module's parse, without its cache
    for phrase, expected in PHRASES.items():
        got = parse_phrase(phrase)
        check(got == expected, f"{phrase!r} gave {got!r}, not {expected!r}", problems)
        validate(got, "UTC")  # raises if the cron is not valid
        phrase_us = per_call_us(lambda phrase=phrase: parse_phrase(phrase), n, rounds)
        cron_us = per_call_us(lambda got=got: uncached_fields(got), n, rounds)
        rows.append(
            {
                "phrase": phrase,
                "cron": got,
                "words": len(phrase.split()),
                "phrase_us": phrase_us,
                "cron_fields_us": cron_us,
                "ratio": phrase_us / cron_us,
            }
        )
    columns = ["phrase", "cron", "words", "phrase_us", "cron_fields_us", "ratio"]
    print_table(f"Phrase -> cron, µs per call (median of {rounds} x {n})", rows, columns)
    slowest = max(row["phrase_us"] for row in rows)
    typical = median([row["phrase_us"] for row in rows])
    print(f"\nslowest phrase {slowest:.1f} µs; median {typical:.1f} µs")
    write_results("phrases", rows, machine())
    target = (f"every phrase <= {TARGET_US:.0f} µs", slowest <= TARGET_US)
    return finish("phrases", problems, [target])


if __name__ == "__main__":
    sys.exit(main())
