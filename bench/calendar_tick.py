"""Calendar tick: the project's tick over N due schedules that each follow a business calendar,
against the same tick over the same schedules without one, in the same run.

The calendar has a country's public holidays (US), closed weekdays (Saturday, Sunday), five own
closed days and two maintenance windows; the schedules' policies rotate over skip,
next_business_day and previous_business_day, their crons over eight expressions that all fire
at 09:00 in New York on both days measured. Two fire times: an open day (Tuesday 2027-01-05,
every fire runs as planned) and a closed one (Friday 2027-01-01, New Year's Day: every fire is
skipped or shifted, with its reason). Each round resets the runs and times one whole tick (all
its batches) of the real `tick()` in this process, `now` pinned a second after the fire time,
plain and calendar groups back to back, which goes first alternating; the first round is a
warm-up. The ratio is the median of the rounds' own ratios (wall time; and the tick process's
CPU time, where the calendars' work is).

    python -m bench.calendar_tick [--n 10000] [--rounds 7] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select, update

from bench.common import (
    check,
    finish,
    machine,
    make_app,
    median,
    postgres_server,
    print_table,
    write_results,
)

EXPRESSIONS = (
    "0 9 * * *",
    "0 9 * * 1-5",
    "0 */3 * * *",
    "0 9 1,5,15 * *",
    "0 9 * 1,4,7,10 *",
    "*/15 * * * *",
    "0 8-18 * * *",
    "0 9 * * 2,5",
)
POLICIES = ("skip", "next_business_day", "previous_business_day")
ZONE = "America/New_York"
# 09:00 in New York: Tuesday 5 January 2027 (open), Friday 1 January 2027 (New Year's Day).
DAYS = {
    "open day": datetime(2027, 1, 5, 14, 0, tzinfo=UTC),
    "closed day": datetime(2027, 1, 1, 14, 0, tzinfo=UTC),
}
CALENDAR = {
    "key": "bench-business",
    "name": "Bench business days",
    "country": "US",
    "closed_weekdays": ["sat", "sun"],
    "days_off": [
        {"from": "2027-02-12", "label": "Company day"},
        {"from": "2027-04-02", "to": "2027-04-05", "label": "Spring break"},
        {"from": "2027-06-18", "label": "Offsite"},
        {"from": "2027-08-16", "to": "2027-08-20", "label": "Summer shutdown"},
        {"from": "2027-12-24", "to": "2027-12-31", "label": "Winter break"},
    ],
    "windows": [
        {"from": "2027-01-10T01:00", "to": "2027-01-10T05:00", "label": "DB upgrade"},
        {"from": "2027-03-07T00:00", "to": "2027-03-07T06:00", "label": "Network"},
    ],
}
FAR = timedelta(days=3650)  # the group not measured waits this long after the fire time


class Bench:
    def __init__(self, url: str, n: int) -> None:
        from webapp import config
        from webapp.catalog.current import current_catalog
        from webapp.extensions import db
        from webapp.scheduler.tick import TickSettings

        self.app = make_app(url)
        self.db = db
        self.n = n
        with self.app.app_context():
            self.catalog = current_catalog()
            self.settings = TickSettings.of(config.settings(self.app))
            self.seed()

    def seed(self) -> None:
        from webapp.database import utcnow
        from webapp.models import Schedule, Tenant
        from webapp.services.audit import Actor
        from webapp.services.calendars import create_calendar

        session = self.db.session()
        tenant_id = session.execute(
            insert(Tenant).values(slug="bench", name="Bench", time_zone=ZONE).returning(Tenant.id)
        ).scalar_one()
        session.commit()
        tenant = session.get(Tenant, tenant_id)
        assert tenant is not None
        calendar = create_calendar(tenant, CALENDAR, Actor.cli(), utcnow())
        rows = []
        for group, calendar_id in (("plain", None), ("calendar", calendar.id)):
            for index in range(self.n):
                rows.append(
                    {
                        "tenant_id": tenant_id,
                        "scope": "tenant",
                        "key": f"{group}-{index}",
                        "name": f"{group} {index}",
                        "job": "bench.noop",
                        "args": {},
                        "cron": EXPRESSIONS[index % len(EXPRESSIONS)],
                        "time_zone": ZONE,
                        "active": True,
                        "misfire_policy": "fire_once",
                        "overlap_policy": "allow",
                        "calendar_id": calendar_id,
                        "calendar_policy": POLICIES[index % len(POLICIES)],
                        "next_run_at": DAYS["open day"] + FAR,
                    }
                )
        session.execute(insert(Schedule), rows)
        session.commit()
        session.connection().exec_driver_sql("ANALYZE schedules")
        session.commit()

    def reset(self, group: str, due: datetime) -> None:
        from webapp.models import Run, Schedule

        session = self.db.session()
        session.execute(Run.__table__.delete())
        with_calendar = Schedule.calendar_id.is_not(None)
        measured = with_calendar if group == "calendar" else Schedule.calendar_id.is_(None)
        session.execute(update(Schedule).values(next_run_at=due + FAR, last_run_at=None))
        session.execute(update(Schedule).where(measured).values(next_run_at=due))
        session.commit()
        with self.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as vacuum:
            vacuum.exec_driver_sql("VACUUM ANALYZE schedules, runs")

    def fire(self, group: str, due: datetime) -> tuple[float, float]:
        """One whole tick of the group's schedules: (wall seconds, this process's CPU seconds)."""
        from webapp.scheduler.tick import tick

        with self.app.app_context():
            self.reset(group, due)
            session = self.db.session()
            start, cpu = time.perf_counter(), time.process_time()
            result = tick(session, self.catalog, self.settings, now=due + timedelta(seconds=1))
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            if result.claimed != self.n:
                raise RuntimeError(f"{group}: claimed {result.claimed} of {self.n}")
            return elapsed, cpu

    def outcome(self, due: datetime) -> dict[str, int]:
        """The runs of the last tick: all, skipped, shifted (starting at another time)."""
        from webapp.models import Run

        with self.app.app_context():
            session = self.db.session()
            runs = session.scalar(select(func.count()).select_from(Run)) or 0
            skipped = session.scalar(
                select(func.count()).select_from(Run).where(Run.status == "skipped")
            )
            shifted = session.scalar(
                select(func.count())
                .select_from(Run)
                .where(
                    Run.status == "queued",
                    ~Run.available_at.between(due, due + timedelta(seconds=1)),  # now or due
                )
            )
            wrong = session.scalar(
                select(func.count()).select_from(Run).where(Run.scheduled_for != due)
            )
            session.rollback()
            return {
                "runs": runs,
                "skipped": skipped or 0,
                "shifted": shifted or 0,
                "wrong": wrong or 0,
            }

    def close(self) -> None:
        with self.app.app_context():
            self.db.engine.dispose()


def measure(bench: Bench, day: str, rounds: int, problems: list[str]) -> dict[str, Any]:
    due = DAYS[day]
    times: dict[str, list[float]] = {"plain": [], "calendar": []}
    cpu: dict[str, list[float]] = {"plain": [], "calendar": []}
    outcomes: dict[str, dict[str, int]] = {}
    for round_number in range(rounds + 1):  # the first round warms both up
        order = ("plain", "calendar") if round_number % 2 == 0 else ("calendar", "plain")
        for group in order:
            elapsed, used = bench.fire(group, due)
            outcomes[group] = bench.outcome(due)
            if round_number:
                times[group].append(elapsed)
                cpu[group].append(used)
    n = bench.n
    plain, with_calendar = outcomes["plain"], outcomes["calendar"]
    check(plain == {"runs": n, "skipped": 0, "shifted": 0, "wrong": 0}, f"plain {plain}", problems)
    check(
        with_calendar["runs"] == n and with_calendar["wrong"] == 0,
        f"{day}: {with_calendar}",
        problems,
    )
    if day == "open day":
        check(with_calendar["skipped"] + with_calendar["shifted"] == 0, f"{day}", problems)
    else:
        check(
            with_calendar["skipped"] > 0 and with_calendar["shifted"] > 0,
            f"{day}: nothing skipped or shifted: {with_calendar}",
            problems,
        )

    # Each round's two ticks run back to back, under the same load from the rest of the
    # machine: the ratio is the median of the rounds' own ratios.
    def paired(figures: dict[str, list[float]]) -> float:
        return median([c / p for c, p in zip(figures["calendar"], figures["plain"], strict=True)])

    return {
        "day": day,
        "schedules": n,
        "plain_ms": median(times["plain"]) * 1000,
        "calendar_ms": median(times["calendar"]) * 1000,
        "ratio": paired(times),
        # The tick's own process (the calendars' work is here; the database's is not).
        "plain_cpu_ms": median(cpu["plain"]) * 1000,
        "calendar_cpu_ms": median(cpu["calendar"]) * 1000,
        "cpu_ratio": paired(cpu),
        "skipped": with_calendar["skipped"],
        "shifted": with_calendar["shifted"],
        "rounds": rounds,
        "all_plain_ms": [round(t * 1000) for t in times["plain"]],
        "all_calendar_ms": [round(t * 1000) for t in times["calendar"]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="2,000 schedules, 2 rounds")
    options = parser.parse_args(argv)
    if options.quick:
        options.n, options.rounds = 2_000, 2
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    with postgres_server() as server:
        version = server.version()
        database = server.create_database()
        bench = Bench(server.url(database), options.n)
        for day in DAYS:
            rows.append(measure(bench, day, options.rounds, problems))
        bench.close()
    info = machine(version)
    write_results("calendar_tick", rows, info)
    print_table(
        f"Tick over {options.n:,} due schedules, with a business calendar and without "
        f"({info['nproc']} CPUs, PostgreSQL {version})",
        rows,
        (
            "day",
            "schedules",
            "plain_ms",
            "calendar_ms",
            "ratio",
            "plain_cpu_ms",
            "calendar_cpu_ms",
            "cpu_ratio",
            "skipped",
            "shifted",
        ),
    )
    targets = [
        (f"calendar tick, {row['day']}: {row['ratio']:.2f}x <= 1.2x", row["ratio"] <= 1.2)
        for row in rows
    ]
    return finish("calendar_tick", problems, targets)


if __name__ == "__main__":
    sys.exit(main())
