"""An alternated same-run A/B of the execution benchmark: two source trees, A (before a change)
and B (after it), each running the same N queued no-op runs with 2 burst workers on one
PostgreSQL cluster, in pairs A B, B A, ..., so that load that comes and goes meets both sides.
Each round is verified as bench.execution's (every run succeeded exactly once).

Per round: runs/s over the runs' own span (first `started_at` to last `finished_at`: the
workers' start-up left out), that rate's ratio to the same round's raw floor, and the workers'
CPU per run (their user + system time, net of an empty burst worker's, the median of that
side's). Then the medians and B / A per pair. A tree is a copy of the project (e.g. `git
archive <commit>`); the harness is this tree's.

    python -m bench.execution_ab --a /tmp/exec-A --b . [--n 30000] [--pairs 4]
"""

from __future__ import annotations

import os
import resource
import sys

from bench.common import (
    Server,
    ab_trees,
    check,
    median,
    postgres_server,
    run_workers,
    worker_env,
)
from bench.execution import burst_together, run_floor, seed, span_seconds, states


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def burst_workers(root: str, server: Server, database: str, count: int) -> float:
    """`count` burst workers of the tree `root` until the queue is empty, starting together
    when more than one; their CPU seconds."""
    before = children_cpu()
    args, env = ["--burst", "--concurrency", "8"], worker_env(server.url(database))
    if count > 1:
        burst_together(server, database, args, count, env, root)
    else:
        run_workers(args, count, env, root)
    return children_cpu() - before


def main(argv: list[str] | None = None) -> int:
    options, roots = ab_trees(__doc__, argv, n=30_000, pairs=4)
    n = options.n
    rates: dict[str, list[float]] = {"A": [], "B": []}
    ratios: dict[str, list[float]] = {"A": [], "B": []}
    busy: dict[str, list[float]] = {"A": [], "B": []}
    empty: dict[str, list[float]] = {"A": [], "B": []}
    problems: list[str] = []
    with postgres_server() as server:
        database = server.create_database()
        for pair in range(options.pairs):
            for side in ("A", "B") if pair % 2 == 0 else ("B", "A"):
                seed(server, database, 0)
                empty[side].append(burst_workers(roots[side], server, database, 1))
                seed(server, database, n)
                run_floor(server, database)
                floor = n / span_seconds(server.conninfo(database))
                seed(server, database, n)
                load = os.getloadavg()[0]
                busy[side].append(burst_workers(roots[side], server, database, 2))
                runs = states(server, database)
                check(runs == {"succeeded/1": n}, f"{side}: runs afterwards {runs}", problems)
                rate = n / span_seconds(server.conninfo(database))
                rates[side].append(rate)
                ratios[side].append(rate / floor)
                print(
                    f"pair {pair + 1} {side}: {rate:,.0f} runs/s over the span, "
                    f"{rate / floor:.3f} of the floor ({floor:,.0f} runs/s), load {load:.1f}",
                    flush=True,
                )
    cpu = {
        side: [(seconds - 2 * median(empty[side])) / n * 1000 for seconds in busy[side]]
        for side in ("A", "B")
    }
    for label, figures in (("runs/s", rates), ("ratio to floor", ratios), ("CPU ms/run", cpu)):
        a, b = median(figures["A"]), median(figures["B"])
        pairs = ", ".join(f"{y / x:.2f}" for x, y in zip(figures["A"], figures["B"], strict=True))
        print(f"{label}: A {a:.3f}, B {b:.3f}, B/A {b / a:.2f} (per pair: {pairs})")
    for problem in problems:
        print(f"PROBLEM {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
