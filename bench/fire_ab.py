"""An alternated same-run A/B of the fire benchmark: two source trees, A (before a change) and
B (after it), each firing the same N due schedules with 2 processes on one PostgreSQL cluster,
rounds A B M, B M A, M A B ... (M: the minimal-schema ceiling, bench.fire's), so that load
that comes and goes meets both sides. Each project round is verified as bench.fire's.

Prints every round's fires/s, the medians, each side's median ratio to the minimal ceiling, and
B / A per round pair. A tree is a copy of the project (e.g. `git archive <commit>`); give both
the same `bench/` (this harness) so that only `webapp/` differs.

    python -m bench.fire_ab --a /tmp/fire-A --b . [--n 10000] [--rounds 3]
"""

from __future__ import annotations

import sys
from datetime import timedelta

from bench.common import ab_trees, check, median, postgres_server
from bench.fire import (
    create_minimal,
    fire_once,
    minimal_runs,
    reset,
    reset_minimal,
    seeded,
    verify,
)
from bench.workloads import realistic


def main(argv: list[str] | None = None) -> int:
    options, roots = ab_trees(__doc__, argv, n=10_000, rounds=3)
    schedules = realistic(options.n)
    problems: list[str] = []
    rates: dict[str, list[float]] = {"A": [], "B": [], "M": []}
    cpu: dict[str, list[float]] = {"A": [], "B": [], "M": []}  # us per fire: process + backend
    with open("/proc/loadavg") as loadavg:
        print("load before:", " ".join(loadavg.read().split()[:3]), flush=True)
    with postgres_server() as server:
        database, url, engine, due = seeded(server, schedules)
        now = due + timedelta(seconds=1)
        create_minimal(engine)
        sides = ["A", "B", "M"]
        for round_number in range(options.rounds):
            shift = round_number % len(sides)
            for side in sides[shift:] + sides[:shift]:
                if side == "M":
                    reset_minimal(engine, due)
                    figures = fire_once(url, 2, now, "minimal")
                    stored = minimal_runs(engine, due)
                    check(stored == len(schedules), f"minimal stored {stored}", problems)
                else:
                    reset(engine, due)
                    figures = fire_once(url, 2, now, "project", roots[side])
                    verify(engine, schedules, due, now, problems, f"{side} {round_number + 1}")
                rates[side].append(figures["fires_per_s"])
                spent = figures["cpu"] + (figures["backend_cpu"] or 0.0)
                cpu[side].append(spent * 1e6 / figures["fired"])
                print(
                    f"round {round_number + 1} {side}: {figures['fires_per_s']:,.0f} fires/s, "
                    f"CPU {cpu[side][-1]:.0f} us per fire (process {figures['cpu']:.2f} s, "
                    f"backends {figures['backend_cpu'] or 0:.2f} s)",
                    flush=True,
                )
        engine.dispose()
        server.drop(database)
    with open("/proc/loadavg") as loadavg:
        print("load after:", " ".join(loadavg.read().split()[:3]))
    for side in ("A", "B"):
        ratios = [rate / ceiling for rate, ceiling in zip(rates[side], rates["M"], strict=True)]
        print(
            f"{side}: median {median(rates[side]):,.0f} fires/s, "
            f"to the minimal ceiling {median(ratios):.3f} (rounds {[round(r, 3) for r in ratios]})"
        )
        rounded = [round(c) for c in cpu[side]]
        print(f"{side}: CPU per fire {rounded} us, median {median(cpu[side]):.0f}")
    pairs = [b / a for a, b in zip(rates["A"], rates["B"], strict=True)]
    print(f"minimal ceiling: median {median(rates['M']):,.0f} fires/s")
    print(f"B / A per round: {[round(p, 2) for p in pairs]}, median {median(pairs):.2f}")
    spent = [b / a for a, b in zip(cpu["A"], cpu["B"], strict=True)]
    print(
        f"CPU per fire B / A per round: {[round(p, 2) for p in spent]}, median {median(spent):.2f}"
    )
    for problem in problems:
        print("PROBLEM:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
