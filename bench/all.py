"""Runs every benchmark (`make bench`), then writes the table of the latest figures into
bench/README.md. Exits 1 if any benchmark's verification failed (a missed target does not).

    python -m bench.all [--quick] [--only fire,idle_tick,...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench.common import PROJECT_ROOT, RESULTS_DIR, median
from bench.execution import MIN_RATIO_TO_FLOOR, MIN_RUNS_PER_S
from bench.panel import MAX_STATEMENTS, MAX_VS_FLOOR, MAX_VS_FLOOR_SCHEDULE_PAGE

BENCHMARKS = (
    "fire",
    "idle_tick",
    "calendar_tick",
    "bulk_import",
    "panel",
    "run_now",
    "execution",
    "prune",
    "herd",
    "fairness",
    "phrases",
)
README = os.path.join(PROJECT_ROOT, "bench", "README.md")
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"


def latest(bench: str) -> list[dict[str, Any]]:
    """The rows of the most recent run of `bench` (they share its date)."""
    path = os.path.join(RESULTS_DIR, f"{bench}.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as results:
        rows = [json.loads(line) for line in results if line.strip()]
    if not rows:
        return []
    return [row for row in rows if row["date"] == rows[-1]["date"]]


def figures_table() -> str:
    lines = ["| Benchmark | Result | Same-run baseline | Ratio | Target |", "|---|---|---|---|---|"]
    info: dict[str, Any] = {}
    dates = []
    for row in latest("fire"):
        info, dates = row["machine"], [*dates, row["date"]]
        floor = 0.25 if row["workload"] == "realistic" else 0.15
        target = (
            f">= {floor}x, <= 0.01 commits/fire" if row["database"] == "postgresql" else "(none)"
        )
        if row["database"] == "postgresql" and row["workload"] == "realistic":
            target += "; >= 0.3x the minimal schema's"
        minimal = (
            f"; on a minimal schema {row['minimal_fires_per_s']:,.0f} (ours "
            f"{row['ratio_to_minimal']:.2f}x, raw SQL {row['ceiling_to_minimal']:.2f}x)"
            if row.get("minimal_fires_per_s")
            else ""
        )
        lines.append(
            f"| Fire, {row['workload']}, {row['database']}, {row['processes']} proc., "
            f"{row['n']:,} due | {row['fires_per_s']:,.0f} fires/s, "
            f"{row['commits_per_fire']:.4f} commits/fire, split {row['split']} | "
            f"raw SQL {row['ceiling_fires_per_s']:,.0f} fires/s{minimal} | {row['ratio']:.2f}x | "
            f"{target} |"
        )
    rows = latest("idle_tick")
    if len(rows) == 2:
        large, small = rows
        dates.append(large["date"])
        calendars = (
            f", {large['with_calendar']:,} with a calendar" if large.get("with_calendar") else ""
        )
        lines.append(
            f"| Idle tick, {large['schedules']:,} schedules{calendars} | "
            f"{large['tick_median_ms']:.3f} ms "
            f"median (p95 {large['tick_p95_ms']:.2f}) | {small['schedules']:,} schedules: "
            f"{small['tick_median_ms']:.3f} ms; raw probe {large['raw_floor_median_ms']:.3f} ms | "
            f"{large['ratio_to_small']:.2f}x | <= 1 ms, <= 1.5x |"
        )
    for row in latest("calendar_tick"):
        dates.append(row["date"])
        lines.append(
            f"| Calendar tick, {row['schedules']:,} due with a business calendar, {row['day']} | "
            f"{row['calendar_ms']:,.0f} ms ({row['skipped']:,} skipped, {row['shifted']:,} "
            f"shifted; tick process CPU {row['calendar_cpu_ms']:,.0f} ms) | the same schedules "
            f"without: {row['plain_ms']:,.0f} ms (CPU {row['plain_cpu_ms']:,.0f} ms) | "
            f"{row['ratio']:.2f}x (CPU {row['cpu_ratio']:.2f}x) | <= 1.2x |"
        )
    for row in latest("bulk_import"):
        dates.append(row["date"])
        lines.append(
            f"| Bulk import, {row['n']:,} schedules, {row['database']} | create "
            f"{row['create_s_per_1000_net']:.2f} s/1,000, unchanged "
            f"{row['unchanged_s_per_1000_net']:.2f}, update {row['update_s_per_1000_net']:.2f} | "
            f"command start-up {row['startup_s']:.2f} s | | (none) |"
        )

    def over_floor(row: dict[str, Any]) -> str:
        # The lean rows behind the login and the layout (bench.panel's floor pages).
        floor = row.get("vs_floor_p95")
        return f" (floor: {floor:.2f}x)" if floor is not None else ""

    for row in latest("panel"):
        dates.append(row["date"])
        bound = MAX_VS_FLOOR_SCHEDULE_PAGE if row["page"] == "schedule detail" else MAX_VS_FLOOR
        target = f"floor <= {bound}x, <= {MAX_STATEMENTS} SQL" if row["target"] else "(none)"
        lines.append(
            f"| Panel: {row['page']} | p50 {row['p50_ms']:.1f} ms, p95 {row['p95_ms']:.1f} ms, "
            f"{row['statements']} SQL ({row['statements_small_tenant']} for a small tenant), "
            f"{row['kb']:.0f} KB | lean page p50 {row['lean_p50_ms']:.1f} ms, p95 "
            f"{row['lean_p95_ms']:.1f} ms | p50 {row['ratio_p50']:.2f}x, p95 "
            f"{row['ratio_p95']:.2f}x{over_floor(row)} | {target}, fixed SQL count |"
        )
    for row in latest("run_now"):
        dates.append(row["date"])
        if row["database"] == "postgresql":
            lines.append(
                f"| Run now, PostgreSQL (LISTEN/NOTIFY): arrival -> commit | median "
                f"{row['request_median_ms']:.2f} ms, p95 {row['request_p95_ms']:.2f} ms | bare "
                f"POST (insert, commit) {row['bare_post_median_ms']:.2f} ms | "
                f"{row['request_ratio']:.2f}x | <= 2x |"
            )
            lines.append(
                f"| Run now, PostgreSQL: commit -> job running; total | median "
                f"{row['median_ms']:.2f} ms, p95 {row['p95_ms']:.2f} ms; total median "
                f"{row['total_median_ms']:.2f} ms, p95 {row['total_p95_ms']:.2f} ms | raw "
                f"LISTEN/NOTIFY floor {row['floor_median_ms']:.2f} ms | "
                f"{row['ratio_to_floor']:.1f}x | total median <= 8 ms, commit -> job <= 2x the "
                "floor, p95 <= 15 ms |"
            )
        elif row["wake"] == "local wake-up":
            polled = next(
                (other for other in latest("run_now") if other["wake"].startswith("polling")),
                None,
            )
            baseline = (
                f"the same worker polling (1 s): commit -> job {polled['median_ms']:.0f} ms, "
                f"total {polled['total_median_ms']:.0f} ms | commit -> job "
                f"{row['median_ms'] / polled['median_ms']:.2f}x, total "
                f"{row['total_median_ms'] / polled['total_median_ms']:.2f}x"
                if polled
                else " | "
            )
            lines.append(
                f"| Run now, SQLite (local wake-up) | commit -> job running median "
                f"{row['median_ms']:.1f} ms, p95 {row['p95_ms']:.1f} ms; total (arrival -> job "
                f"running) median {row['total_median_ms']:.0f} ms, p95 "
                f"{row['total_p95_ms']:.0f} ms (request {row['request_median_ms']:.1f} ms) | "
                f"{baseline} | total median < 50 ms |"
            )
    for row in latest("execution"):
        dates.append(row["date"])
        lines.append(
            f"| Execution, {row['n']:,} no-op runs, 2 workers | {row['runs_per_s']:,.0f} runs/s, "
            f"{row['commits_per_run']:.2f} commits/run | raw batch lease "
            f"{row['floor_runs_per_s']:,.0f} runs/s, {row['floor_commits_per_run']:.3f} "
            f"commits/run | {row['ratio_to_floor']:.3f}x | >= {MIN_RUNS_PER_S:,}/s, "
            f">= {MIN_RATIO_TO_FLOOR}x, <= 0.05 |"
        )
    for row in latest("prune"):
        dates.append(row["date"])
        lines.append(
            f"| Prune, {row['runs']:,} runs, {row['deleted']:,} expired | "
            f"{row['runs_per_s']:,.0f} runs/s, {row['batches']} batches, longest batch "
            f"transaction {row['batch_max_ms']:,.0f} ms (p50 {row['batch_p50_ms']:,.0f}, p95 "
            f"{row['batch_p95_ms']:,.0f}); tick-like writer max {row['writer_max_ms']:,.0f} ms | "
            f"writer alone: max {row['writer_baseline_max_ms']:,.0f} ms, p99 "
            f"{row['writer_baseline_p99_ms']:.1f} ms | writer max {row['writer_max_ratio']:.1f}x, "
            f"p99 {row['writer_p99_ratio']:.1f}x | batch <= 1 s, writer max <= 1 s |"
        )
    for row in latest("herd"):
        dates.append(row["date"])
        if row["part"] == "herd":
            ahead = "; with fire ahead <= 7 s and <= 0.3x at T" if row.get("fire_ahead") else ""
            lines.append(
                f"| Herd, {row['schedules']:,} schedules of {row['tenants']:,} tenants due at "
                f"once, {row['workers']} workers, fire-ahead {row.get('fire_ahead', 0):g} s, "
                f"jitter {row.get('jitter', 0)} s | all queued {row['queued_s']:.1f} s, all "
                f"finished {row['finished_s']:.1f} s after T; start lag p50/p95/p99 "
                f"{row['start_lag_p50']:.1f}/{row['start_lag_p95']:.1f}/"
                f"{row['start_lag_p99']:.1f} s; {row['runs_per_s']:,.0f} runs/s, "
                f"{row['commits_per_fire']:.3f} commits/fire (load {row['load_before']}) | "
                f"CPU: workers {row['worker_cpu_s']:.1f} s, PostgreSQL "
                f"{row['server_cpu_s']:.1f} s, "
                f"others {row['others_cpu_s']:.1f} s of {row['cpu_capacity_s']:.0f} | | "
                f"queued <= 5 s, finished <= 30 s{ahead} |"
            )
        elif "idle_ratio" in row:
            lines.append(
                f"| Herd: a day's {row['schedules']:,} schedules | idle tick "
                f"{row['idle_tick_ms']:.2f} ms, {row['batch']:,} due fired in "
                f"{row['batch_fire_ms']:.0f} ms | the same at a tenth of the schedules | idle "
                f"{row['idle_ratio']:.2f}x, fire {row['fire_ratio']:.2f}x | <= 1.2x |"
            )
    for row in latest("fairness"):
        dates.append(row["date"])
        if row["part"] == "wait" and row["flood"] and row["leasing"] == "fair":
            alone = next(
                (r for r in latest("fairness") if r["part"] == "wait" and not r["flood"]), None
            )
            unfair = next(
                (r for r in latest("fairness") if r["part"] == "wait" and "unfair" in r["leasing"]),
                None,
            )
            baseline = "; ".join(
                f"{label} p95 {other['b_wait_p95_s']:.2f} s"
                for label, other in (("B alone", alone), ("unfair leasing, flood", unfair))
                if other
            )
            lines.append(
                f"| Fairness: tenant B's 10 runs while A floods {row['flood']:,}, 2 workers x 8 | "
                f"B's wait p50 {row['b_wait_p50_s']:.2f} s, p95 {row['b_wait_p95_s']:.2f} s | "
                f"{baseline} | | p95 < 2 s |"
            )
        elif row["part"] == "throughput":
            lines.append(
                f"| Fairness: leasing {row['runs']:,} runs in batches of {row['batch']} | "
                f"{row['fair_runs_per_s']:,.0f} runs/s of lease time | unfair (previous) lease "
                f"{row['unfair_runs_per_s']:,.0f} runs/s | {row['ratio']:.2f}x | >= 0.8x |"
            )
        elif row["part"] == "deep":
            lines.append(
                f"| Fairness: one lease of {row['limit']}, 100,000 queued over 1,000 tenants + "
                f"10,000 of one | {row['fair_ms']:.2f} ms | unfair (previous) lease "
                f"{row['unfair_ms']:.2f} ms | {row['fair_ms'] / row['unfair_ms']:.2f}x | (none) |"
            )
    rows = latest("phrases")
    if rows:
        info, dates = info or rows[0]["machine"], [*dates, rows[0]["date"]]
        slowest = max(rows, key=lambda row: row["phrase_us"])
        lines.append(
            f"| Plain-English phrase -> cron, {len(rows)} phrases | median "
            f"{median([row['phrase_us'] for row in rows]):.0f} µs, slowest "
            f"{slowest['phrase_us']:.0f} µs (“{slowest['phrase']}”) | the cron module's parse "
            f"of its cron {slowest['cron_fields_us']:.0f} µs | {slowest['ratio']:.2f}x | "
            "<= 1 ms per phrase |"
        )
    machine = (
        f"{info.get('nproc', '?')} CPUs ({info.get('cpu', '?')}), PostgreSQL "
        f"{info.get('postgresql', '?')}, Python {info.get('python', '?')}"
    )
    when = max(dates)[:10] if dates else "never"
    return f"Latest figures, {when}, on {machine}:\n\n" + "\n".join(lines) + "\n"


def write_readme() -> None:
    with open(README) as readme:
        text = readme.read()
    if BEGIN not in text or END not in text:
        return
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(README, "w") as readme:
        readme.write(f"{head}{BEGIN}\n{figures_table()}{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    parser.add_argument("--only", default=",".join(BENCHMARKS))
    options = parser.parse_args(argv)
    failed = []
    for bench in options.only.split(","):
        started = time.monotonic()
        print(f"\n=== bench.{bench} ===", flush=True)
        args = ["--quick"] if options.quick else []
        done = subprocess.run(
            [sys.executable, "-m", f"bench.{bench}", *args], cwd=PROJECT_ROOT, check=False
        )
        print(
            f"=== bench.{bench}: exit {done.returncode} in {time.monotonic() - started:.0f} s",
            flush=True,
        )
        if done.returncode != 0:
            failed.append(bench)
    write_readme()
    print(f"\nfigures written to {os.path.relpath(README, PROJECT_ROOT)}")
    if failed:
        print(f"verification failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
