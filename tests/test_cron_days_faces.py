"""The extended day syntax (L, LW, #) through every face that takes a cron expression: the API
(a save, its description and next fire; the preview), the form's preview, the command line's
preview and the tick, on both databases where one is involved. The refusals share the one
message of every face: see BAD_INPUTS in test_schedule_schema."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from click.testing import CliRunner
from flask import Flask

from tests.api_helpers import NEW, Api, problem_fields
from tests.conftest import World, make_schedule
from tests.panel_helpers import Panel
from tests.scheduler_helpers import all_runs, catalog, settings
from webapp.cli.cron import cron_cli
from webapp.extensions import db
from webapp.models import Schedule
from webapp.scheduler.tick import tick


def test_the_api_saves_a_last_friday_and_says_when_it_fires(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    saved = api.post("/api/v1/schedules", {**NEW, "cron": "30 17 * * FRI#L", "time_zone": "UTC"})
    assert saved.status_code == 201, saved.get_json()
    body = saved.get_json()
    assert body["description"] == "At 17:30, on the last Friday of the month"
    next_run = datetime.fromisoformat(body["next_run_at"])
    assert next_run.weekday() == 4 and next_run.day + 7 > 27  # a Friday in the last week
    fires = api.get(f"/api/v1/schedules/{body['id']}/fires?count=3").get_json()["fires"]
    assert [fire["local"][:10] for fire in fires][:1] == [body["next_run_at"][:10]]


def test_the_api_refuses_a_sixth_monday_by_field(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    refused = api.post("/api/v1/schedules", {**NEW, "cron": "0 9 * * MON#6"})
    assert refused.status_code == 422
    assert problem_fields(refused)["cron"].startswith("day-of-week 'MON#6': the number after #")


def test_the_api_preview_lists_the_last_days(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    preview = api.get("/api/v1/cron/preview?expression=0+0+L+*+*&time_zone=UTC&count=3")
    assert preview.status_code == 200
    body = preview.get_json()
    assert body["description"] == "At 00:00, on the last day of the month"
    days = [datetime.fromisoformat(fire["at"]) for fire in body["fires"]]
    assert len(days) == 3
    assert all(  # each the day before a 1st
        (datetime(day.year + day.month // 12, day.month % 12 + 1, 1, tzinfo=UTC) - day).days == 1
        for day in days
    )
    wrong = api.get("/api/v1/cron/preview?expression=0+0+*+*+LW")
    assert wrong.status_code == 400
    assert "belongs in the day-of-month field" in problem_fields(wrong)["expression"]


def test_the_form_preview_describes_the_first_monday(app: Flask, world: World) -> None:
    page = (
        Panel(app, world.alice)
        .get("/schedules/form/preview?cron=0 8 * * MON%231&time_zone=Europe/Berlin", htmx=True)
        .get_data(as_text=True)
    )
    assert "At 08:00, on the first Monday of the month" in page
    fires = [
        datetime.fromisoformat(at).astimezone(ZoneInfo("Europe/Berlin"))
        for at in re.findall(r'<time datetime="([^"]+)"', page)
    ]
    assert len(fires) == 5
    assert all(fire.weekday() == 0 and fire.day <= 7 and fire.hour == 8 for fire in fires)


def test_the_command_line_preview_lists_the_last_weekdays() -> None:
    result = CliRunner().invoke(
        cron_cli, ["preview", "0 18 LW * *", "--after", "2026-01-01T00:00", "--count", "3"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "At 18:00, on the last weekday of the month",
        "2026-01-30T18:00:00Z  2026-01-30 18:00 UTC (+00:00)",
        "2026-02-27T18:00:00Z  2026-02-27 18:00 UTC (+00:00)",
        "2026-03-31T18:00:00Z  2026-03-31 18:00 UTC (+00:00)",
    ]


def test_the_command_line_preview_refuses_l_in_the_minute_field() -> None:
    result = CliRunner().invoke(cron_cli, ["preview", "L 0 * * *"])
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: minute 'L': L (the last) belongs in the day-of-month field (L, LW) or the "
        "day-of-week field (FRI#L, 5L)\n"
    )


def test_the_tick_fires_on_the_last_day_and_advances_to_the_next(app: Flask, world: World) -> None:
    due = datetime(2026, 2, 28, tzinfo=UTC)
    schedule = make_schedule(world.alpha, "month-end", due, cron="0 0 L * *")
    result = tick(db.session(), catalog(), settings(), datetime(2026, 2, 28, 0, 0, 5, tzinfo=UTC))
    assert result.queued == 1
    assert [run.scheduled_for for run in all_runs()] == [due]
    db.session.expire_all()
    fresh = db.session.get(Schedule, schedule.id)
    assert fresh is not None and fresh.next_run_at == datetime(2026, 3, 31, tzinfo=UTC)
