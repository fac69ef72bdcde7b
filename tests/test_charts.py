"""The pictures: the charts' geometry, a schedule's "Last 30 days" from roll-ups and runs, and the
operator's fires per minute over the next 24 hours, on SQLite and PostgreSQL."""

from __future__ import annotations

import html
import itertools
import re
from datetime import UTC, date, datetime, time, timedelta

import pytest
from flask import Flask

from tests.conftest import World, make_run, make_schedule
from tests.panel_helpers import Panel, counted_statements
from webapp.extensions import db
from webapp.models import Run, Schedule, User
from webapp.rollup_models import RunRollup
from webapp.services.forecast import MINUTES, fires_per_minute
from webapp.services.schedule_stats import DayStats, last_days
from webapp.web.charts import (
    Scale,
    Series,
    bar_chart,
    line_chart,
    nice_ticks,
    outcome_strip,
)

# Geometry ----------------------------------------------------------------------------------


def test_a_scale_maps_its_domain_onto_its_range_and_a_flat_domain_onto_its_start() -> None:
    y = Scale(0, 10, 200, 0)  # a y axis: 0 at the bottom (200), 10 at the top
    assert (y(0), y(5), y(10)) == (200, 100, 0)
    assert Scale(3, 3, 50, 90)(3) == 50


def test_ticks_are_round_numbers_from_zero_that_reach_the_maximum() -> None:
    assert nice_ticks(37) == [0, 10, 20, 30, 40]
    assert nice_ticks(40) == [0, 10, 20, 30, 40]
    assert nice_ticks(0.3) == [0, 0.1, 0.2, 0.3]
    assert nice_ticks(1234) == [0, 500, 1000, 1500]


def test_all_zero_or_no_values_still_make_an_axis_from_zero_to_one() -> None:
    assert nice_ticks(0) == [0, 1]
    chart = line_chart(["a", "b"], [Series("flat", [0, 0])])
    assert [tick.label for tick in chart.y_ticks] == ["0", "1"]
    # Zero lies on the baseline, the bottom of the plot.
    assert {marker.y for marker in chart.lines[0].markers} == {chart.box.plot_bottom}


def test_a_line_chart_without_data_has_no_line_and_no_markers() -> None:
    chart = line_chart([], [Series("nothing", [])])
    assert chart.lines[0].segments == [] and chart.lines[0].markers == []
    assert bar_chart([], []).path == ""
    assert outcome_strip([]) == []


def test_a_single_point_sits_at_the_left_edge_at_its_height() -> None:
    chart = line_chart(["1 Mar"], [Series("one", [8])], value_label="{} s")
    (marker,) = chart.lines[0].markers
    assert marker.x == chart.box.left
    assert [tick.label for tick in chart.y_ticks] == ["0", "2", "4", "6", "8"]
    assert marker.y == chart.box.top  # 8 is the top tick
    assert marker.label == "1 Mar: 8 s"


def test_a_day_without_a_value_breaks_the_line_in_two() -> None:
    chart = line_chart(["a", "b", "c", "d"], [Series("gappy", [1, 2, None, 4])])
    assert len(chart.lines[0].segments) == 2
    assert len(chart.lines[0].markers) == 3


def test_peak_labels_of_equal_bars_get_room_of_their_own_inside_the_picture() -> None:
    # Every fifth minute fires alike: the first candidates are 5 minutes (units) apart.
    values = [1 if i % 5 == 0 else 0 for i in range(1440)]
    candidates = [(i, f"{i // 60:02}:{i % 60:02} UTC: 1 fire") for i in range(0, 1440, 5)]
    chart = bar_chart(values, [], candidates, most_peaks=3)
    assert len(chart.peaks) == 3
    spans = sorted((peak.left, peak.right) for peak in chart.peaks)
    assert all(one[1] < other[0] for one, other in itertools.pairwise(spans))
    assert chart.peaks[0].anchor == "start" and chart.peaks[0].left == chart.peaks[0].x
    assert all(chart.box.left <= left and right <= chart.box.plot_right for left, right in spans)


def test_bars_leave_out_empty_minutes_and_the_tallest_reaches_the_top_tick() -> None:
    chart = bar_chart([0, 5, 0, 10], [(0, "00:00")], peaks=[(3, "00:03: 10")])
    assert chart.path.count("M") == 2
    assert chart.y_ticks[-1].label == "10"
    assert f"V{chart.box.top}" in chart.path  # 10 is the top tick
    assert chart.peaks[0].label == "00:03: 10"


# The schedule's page ------------------------------------------------------------------------


def at(day: date, seconds: float = 0) -> datetime:
    return datetime.combine(day, time(), UTC) + timedelta(seconds=seconds)


def timed_run(
    schedule: Schedule, status: str, fired: datetime, lag: float, duration: float | None
) -> Run:
    """A run that fired at `fired`, started `lag` seconds later and took `duration` seconds."""
    run = make_run(schedule, status, scheduled_for=fired)  # type: ignore[arg-type]
    run.started_at = fired + timedelta(seconds=lag)
    run.finished_at = None if duration is None else run.started_at + timedelta(seconds=duration)
    return run


def history(app: Flask, world: World) -> tuple[Schedule, date]:
    """A schedule with a roll-up 10 days ago and runs today, yesterday and 40 days ago."""
    schedule = make_schedule(world.alpha, "Charted job", by=world.alice, cron="0 * * * *")
    today = datetime.now(UTC).date()
    db.session.add(
        RunRollup(
            tenant_id=schedule.tenant_id,
            schedule_id=schedule.id,
            job=schedule.job,
            day=today - timedelta(days=10),
            runs=24,
            succeeded=21,
            failed=2,
            skipped=1,
            duration_p50_seconds=12.5,
            duration_p95_seconds=30,
            lag_mean_seconds=0.75,
            lag_max_seconds=3,
        )
    )
    # Today: durations 2, 4, 6 and 100 s (median 5), lags 1, 2, 3, 6 s (mean 3), all succeeded.
    for i, (lag, duration) in enumerate([(1, 2), (2, 100), (3, 6), (6, 4)]):
        timed_run(schedule, "succeeded", at(today, i * 60), lag, duration)
    # Yesterday: one failure (7 s) and one still running (no duration): median 7, mean lag 1.5.
    yesterday = today - timedelta(days=1)
    timed_run(schedule, "failed", at(yesterday, 3600), 1, 7)
    timed_run(schedule, "running", at(yesterday, 7200), 2, None)
    # Outside the window: not counted.
    timed_run(schedule, "failed", at(today - timedelta(days=40)), 1, 1)
    # Another schedule's run the same day: not counted either.
    other = make_schedule(world.alpha, "Other job", by=world.alice, cron="0 * * * *")
    timed_run(other, "failed", at(today, 30), 1, 1)
    db.session.commit()
    return schedule, today


def test_the_last_30_days_come_from_rollups_and_from_the_runs_in_one_statement(
    app: Flask, world: World
) -> None:
    schedule, today = history(app, world)
    schedule_id, tenant_id = schedule.id, schedule.tenant_id  # loaded before counting
    with counted_statements() as sent:
        days = last_days(schedule_id, tenant_id, datetime.now(UTC))
    statements = [sql for sql in sent if sql != "BEGIN"]  # SQLite's transaction start
    assert len(statements) == 1, statements
    assert len(days) == 30 and days[0].day == today - timedelta(days=29) and days[-1].day == today
    by_day = {day.day: day for day in days}
    assert by_day[today] == DayStats(today, 4, 4, 0, 0, 5.0, 3.0, from_rollup=False)
    yesterday = by_day[today - timedelta(days=1)]
    assert (yesterday.runs, yesterday.succeeded, yesterday.failed) == (2, 0, 1)
    assert yesterday.duration_p50_seconds == pytest.approx(7)
    assert yesterday.lag_mean_seconds == pytest.approx(1.5)
    assert by_day[today - timedelta(days=10)] == DayStats(
        today - timedelta(days=10), 24, 21, 2, 1, 12.5, 0.75, from_rollup=True
    )
    assert sum(day.runs for day in days) == 4 + 2 + 24


def svg(page: str, element_id: str) -> str:
    found = re.search(rf'<svg[^>]*id="{element_id}".*?</svg>', page, re.S)
    assert found, f"no svg #{element_id}"
    return found.group(0)


def desc_of(chart: str) -> str:
    found = re.search(r"<desc[^>]*>(.*?)</desc>", chart, re.S)
    assert found
    return html.unescape(found.group(1))


def test_the_schedule_page_shows_the_charts_with_their_figures_in_words(
    app: Flask, world: World
) -> None:
    schedule, today = history(app, world)
    page = Panel(app, world.bob).get(f"/schedules/{schedule.id}").get_data(as_text=True)
    assert "Last 30 days" in page
    durations = svg(page, f"schedule-{schedule.id}-durations")
    assert 'role="img"' in durations
    assert "Median duration and mean lag per day, in seconds" in durations
    words = desc_of(durations)
    label = f"{today.day} {today:%b}"
    assert "Duration (median): " in words and f"{label}: 5 s" in words
    assert f"{label}: 3 s" in words  # the mean lag
    rollup_day = today - timedelta(days=10)
    assert f"{rollup_day.day} {rollup_day:%b}: 12.5 s" in words
    strip = desc_of(svg(page, f"schedule-{schedule.id}-outcomes"))
    assert strip.startswith("30 runs in 30 days; 2 days with failures: ")
    assert f"{rollup_day.day} {rollup_day:%b}: 24 runs, 21 succeeded, 2 failed, 1 skipped" in strip
    assert "27 days without runs" in strip
    # The axis says its unit; the figures table has every day.
    assert ">seconds</text>" in durations
    assert f"<td>{today}</td><td>4</td><td>4</td><td>0</td>" in page


def test_the_outcome_strip_tells_failure_days_apart_by_shape_and_symbol_not_colour(
    app: Flask, world: World
) -> None:
    schedule, today = history(app, world)
    page = Panel(app, world.alice).get(f"/schedules/{schedule.id}").get_data(as_text=True)
    strip = svg(page, f"schedule-{schedule.id}-outcomes")
    cells = re.findall(r'<g class="strip-(\w+)">\s*<title>([^<]*)</title>(.*?)</g>', strip, re.S)
    assert len(cells) == 30
    kinds = {html.unescape(title).split(":")[0]: (kind, body) for kind, title, body in cells}
    yesterday = today - timedelta(days=1)
    kind, body = kinds[f"{yesterday.day} {yesterday:%b}"]
    assert kind == "failed" and "✗" in body and "<rect" in body
    kind, body = kinds[f"{today.day} {today:%b}"]
    assert kind == "ok" and "✓" in body and "<rect" in body
    quiet = today - timedelta(days=2)
    kind, body = kinds[f"{quiet.day} {quiet:%b}"]
    assert kind == "none" and "<line" in body and "<rect" not in body
    # The legend names each symbol in words.
    for words in ("✗ failures", "✓ no failures", "\u2013 no runs"):
        assert words in html.unescape(page)


def test_a_schedule_without_runs_says_so_instead_of_drawing_an_empty_chart(
    app: Flask, world: World
) -> None:
    schedule = make_schedule(world.alpha, "Quiet job", by=world.alice, cron="0 0 * * *")
    db.session.commit()
    page = Panel(app, world.alice).get(f"/schedules/{schedule.id}").get_data(as_text=True)
    assert "No runs in the last 30 days" in page
    assert f"schedule-{schedule.id}-durations" not in page


def test_another_tenants_schedule_page_is_still_404(app: Flask, world: World) -> None:
    schedule, _today = history(app, world)
    assert Panel(app, world.charlie).get(f"/schedules/{schedule.id}").status_code == 404


def test_an_action_on_the_page_renders_the_charts_again(app: Flask, world: World) -> None:
    schedule, _today = history(app, world)
    response = Panel(app, world.alice).post(
        f"/schedules/{schedule.id}/pause", data={"place": "detail"}
    )
    assert response.status_code == 200
    assert f"schedule-{schedule.id}-outcomes" in response.get_data(as_text=True)


# The operator's fires per minute ------------------------------------------------------------


def add_schedules(world: World, cron: str, count: int, time_zone: str = "UTC") -> None:
    """`count` active schedules of `cron`, inserted directly: thousands would be slow through
    the service, and the forecast reads only cron, time zone and active."""
    start = db.session.query(Schedule).count()
    db.session.add_all(
        Schedule(
            tenant_id=world.beta.id if i % 2 else world.alpha.id,
            key=f"herd-{start + i}",
            name=f"Herd {start + i}",
            job="demo.echo",
            args={"message": "m"},
            cron=cron,
            time_zone=time_zone,
            next_run_at=datetime.now(UTC) + timedelta(hours=1),
        )
        for i in range(count)
    )
    db.session.commit()


def operator(world: World) -> User:
    world.alice.is_operator = True
    db.session.commit()
    return world.alice


def test_fires_are_counted_per_minute_once_per_expression_times_its_schedules(
    app: Flask, world: World
) -> None:
    add_schedules(world, "0 0 * * *", 50)
    add_schedules(world, "*/15 * * * *", 3)
    add_schedules(world, "30 0 * * *", 2, "Europe/Berlin")  # 22:30 or 23:30 UTC
    paused = Schedule(
        tenant_id=world.alpha.id, key="paused", name="Paused", job="demo.echo",
        cron="0 0 * * *", time_zone="UTC", active=False,
    )  # fmt: skip
    db.session.add(paused)
    db.session.commit()
    now = datetime(2025, 1, 14, 13, 7, 42, tzinfo=UTC)
    forecast = fires_per_minute(now)
    assert forecast.start == datetime(2025, 1, 14, 13, 7, tzinfo=UTC)
    assert len(forecast.fires) == MINUTES
    assert (forecast.schedules, forecast.expressions, forecast.approximate) == (55, 3, False)
    midnight = forecast.fires[(24 * 60 - (13 * 60 + 7))]
    assert midnight == 53
    assert forecast.top(2) == [
        (datetime(2025, 1, 15, 0, 0, tzinfo=UTC), 53),
        (datetime(2025, 1, 14, 23, 30, tzinfo=UTC), 3 + 2),  # */15 and Berlin's 00:30
    ]
    assert forecast.total == 50 + 3 * 96 + 2


def test_past_the_cap_the_forecast_says_how_many_expressions_it_left_out(
    app: Flask, world: World
) -> None:
    add_schedules(world, "0 0 * * *", 5)
    add_schedules(world, "*/15 * * * *", 2)
    add_schedules(world, "0 12 * * *", 1)
    forecast = fires_per_minute(datetime(2025, 1, 14, 13, 0, tzinfo=UTC), max_expressions=1)
    assert forecast.approximate
    assert (forecast.expressions, forecast.expressions_not_shown) == (1, 2)
    assert (forecast.schedules, forecast.schedules_not_shown) == (8, 3)
    assert forecast.total == 5  # the busiest expression, the herd, is the one shown


@pytest.mark.parametrize("name", ["alice", "bob", "charlie"])
def test_the_fires_page_is_404_for_tenant_users(app: Flask, world: World, name: str) -> None:
    assert Panel(app, getattr(world, name)).get("/operator/fires").status_code == 404


def test_the_fires_page_is_for_logged_in_operators_only(app: Flask, world: World) -> None:
    response = app.test_client().get("/operator/fires")
    assert response.status_code == 302 and "/login" in response.headers["Location"]


def test_the_fires_page_shows_the_midnight_herd_to_an_operator(app: Flask, world: World) -> None:
    add_schedules(world, "0 0 * * *", 50)
    add_schedules(world, "*/15 * * * *", 3)
    page = Panel(app, operator(world)).get("/operator/fires").get_data(as_text=True)
    chart = svg(page, "fires-per-minute")
    assert 'role="img"' in chart and "Fires per minute over the next 24 hours, UTC" in chart
    assert "the busiest minute is 00:00 UTC with 53 fires" in desc_of(chart)
    assert "00:00 UTC: 53 fires" in chart  # the peak's label on the chart
    table = page[page.index('id="busiest-minutes"') :]
    first_row = re.search(r"<tr><td[^>]*>([^<]*)</td><td[^>]*>([^<]*)</td></tr>", table)
    assert first_row and first_row.group(1).endswith("00:00 UTC") and first_row.group(2) == "53"
    assert "Times in UTC" in page
    assert "Approximate" not in page


def test_an_operator_without_a_tenant_sees_the_fires_page(app: Flask, world: World) -> None:
    olga = User(email="olga@example.com", password_hash=world.alice.password_hash)
    olga.is_operator = True
    db.session.add(olga)
    db.session.commit()
    add_schedules(world, "0 0 * * *", 3)
    response = Panel(app, olga).get("/operator/fires")
    assert response.status_code == 200
    assert "00:00 UTC: 3 fires" in response.get_data(as_text=True)


def test_with_no_schedules_the_fires_page_says_there_are_no_fires(app: Flask, world: World) -> None:
    page = Panel(app, operator(world)).get("/operator/fires").get_data(as_text=True)
    assert "No fires in the next 24 hours" in page
