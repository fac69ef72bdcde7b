"""One schedule schema behind every face: the panel form, the import and `flask schedule import`
refuse the same input with the same message, keyed by the field at fault, on both databases."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from markupsafe import escape
from sqlalchemy import func, select, update

from tests.conftest import World
from tests.panel_helpers import Panel
from webapp import config
from webapp.catalog import Catalog, CatalogError, JobContext
from webapp.catalog.current import current_catalog
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Run, Schedule
from webapp.scheduler.tick import TickSettings, tick
from webapp.services.audit import Actor
from webapp.services.defaults import materialise_defaults
from webapp.services.schedules import ScheduleError, create_schedule
from webapp.services.transfer import ImportProblems, import_schedules

VALID = {
    "name": "Hello",
    "job": "demo.echo",
    "args": {"message": "hi"},
    "cron": "0 * * * *",
    "time_zone": "UTC",
    "misfire_policy": "fire_once",
    "overlap_policy": "allow",
}
SYSTEM_SCOPE = (
    "job 'maintenance.prune_runs' is a system job and cannot be used in a tenant schedule"
)
# (what differs from VALID, the field at fault, the message every face shows)
BAD_INPUTS = [
    ({"cron": "61 * * * *"}, "cron", "minute 61 is out of range 0-59"),
    ({"cron": "1," * 100 + "2 * * * *"}, "cron", "cron expression is longer than 200 characters"),
    (
        {"cron": "0 9 * * MON#6"},
        "cron",
        "day-of-week 'MON#6': the number after # must be 1 to 5 (a month has at most five of "
        "each weekday), or L for the last",
    ),
    ({"time_zone": "Mars/Olympus"}, "time_zone", "unknown time zone 'Mars/Olympus'"),
    (
        {"misfire_policy": "sometimes"},
        "misfire_policy",
        "'sometimes' is not one of fire_once, fire_all, skip",
    ),
    ({"overlap_policy": "maybe"}, "overlap_policy", "'maybe' is not one of allow, skip"),
    (
        {"job": "demo.sleep", "args": {"seconds": "soon"}},
        "args.seconds",
        "Input should be a valid number, unable to parse string as a number",
    ),
    ({"job": "os.system", "args": {}}, "job", "job 'os.system' is not in the catalog"),
    ({"job": "maintenance.prune_runs", "args": {}}, "job", SYSTEM_SCOPE),
]
CASE_IDS = [
    "bad-cron",
    "long-cron",
    "nth-weekday",
    "zone",
    "misfire",
    "overlap",
    "args-type",
    "job",
    "scope",
]


def posted(changes: dict[str, object]) -> dict[str, str]:
    """The schedule as the panel form posts it: strings, arguments as `args.<name>` fields."""
    values = {**VALID, **changes}
    args = values.pop("args")
    assert isinstance(args, dict)
    form = {name: str(value) for name, value in values.items()}
    return {**form, "active": "on", **{f"args.{name}": str(v) for name, v in args.items()}}


def item_line(field: str, message: str) -> str:
    # A job message names the job already, so its line does not name the field.
    shown = message if field == "job" else f"{field}: {message}"
    return f"item 0 (key 'k'): {shown}"


def schedule_count() -> int:
    return int(db.session.scalar(select(func.count()).select_from(Schedule)) or 0)


@pytest.mark.parametrize(("changes", "field", "message"), BAD_INPUTS, ids=CASE_IDS)
def test_the_form_shows_the_message_next_to_the_field(
    app: Flask, world: World, changes: dict[str, object], field: str, message: str
) -> None:
    response = Panel(app, world.alice).post("/schedules/new", posted(changes))
    assert response.status_code == 422
    page = response.get_data(as_text=True)
    error_id = f"{field.replace('.', '-')}-error"
    assert f'<p class="field-error" id="{error_id}">{escape(message)}</p>' in page
    assert re.search(f'aria-describedby="[^"]*{error_id}" aria-invalid="true"', page)
    assert schedule_count() == 0


@pytest.mark.parametrize(("changes", "field", "message"), BAD_INPUTS, ids=CASE_IDS)
def test_the_import_prints_the_same_message_with_its_item_and_field(
    app: Flask, world: World, changes: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(ImportProblems) as refused:
        import_schedules(
            world.alpha, json.dumps([{**VALID, "key": "k", **changes}]), Actor.cli(), utcnow()
        )
    assert refused.value.problems == [item_line(field, message)]
    assert schedule_count() == 0


@pytest.mark.parametrize(("changes", "field", "message"), BAD_INPUTS, ids=CASE_IDS)
def test_the_command_line_prints_the_same_message(
    cli: FlaskCliRunner,
    world: World,
    tmp_path: Path,
    changes: dict[str, object],
    field: str,
    message: str,
) -> None:
    path = tmp_path / "schedules.json"
    path.write_text(json.dumps([{**VALID, "key": "k", **changes}]))
    result = cli.invoke(args=["schedule", "import", str(path), "--tenant", "alpha"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [item_line(field, message), "nothing was imported"]
    assert schedule_count() == 0


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "Nightly Report",
            "invalid key 'Nightly Report': use 1-64 lower-case letters, digits, '_', '.', '-'",
        ),
        (7, "must be text"),
    ],
)
def test_a_bad_key_is_refused_by_the_import_and_by_code(
    app: Flask, world: World, key: object, message: str
) -> None:
    # The form has no key field: the panel derives the key from the name.
    with pytest.raises(ImportProblems) as refused:
        import_schedules(world.alpha, json.dumps([{**VALID, "key": key}]), Actor.cli(), utcnow())
    label = f"item 0 (key {key!r})" if isinstance(key, str) else "item 0"
    assert refused.value.problems == [f"{label}: key: {message}"]
    with pytest.raises(ScheduleError) as caught:
        create_schedule(world.alpha, {**VALID, "key": key}, Actor.cli(), utcnow())
    assert caught.value.errors == {"key": message}


def test_a_line_names_the_field_unless_the_message_does(app: Flask, world: World) -> None:
    document = [{**VALID, "key": "a", "job": 5}, {**VALID, "key": "b", "job": "os.system"}]
    with pytest.raises(ImportProblems) as refused:
        import_schedules(world.alpha, json.dumps(document), Actor.cli(), utcnow())
    assert refused.value.problems == [
        "item 0 (key 'a'): job: must be text",
        "item 1 (key 'b'): job 'os.system' is not in the catalog",
    ]


def test_arguments_left_out_are_checked_against_the_job(app: Flask, world: World) -> None:
    without_args = {name: value for name, value in VALID.items() if name != "args"}
    with pytest.raises(ScheduleError) as caught:
        create_schedule(world.alpha, without_args, Actor.cli(), utcnow())
    assert caught.value.errors == {"args.message": "Field required"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "x" * 201}, "name: the name is longer than 200 characters"),
        ({"cron": "61 * * * *"}, "cron: minute 61 is out of range 0-59"),
        ({"time_zone": "Mars/Olympus"}, "time_zone: unknown time zone 'Mars/Olympus'"),
    ],
)
def test_a_job_modules_default_schedule_is_checked_as_any_other(
    app: Flask, world: World, changes: dict[str, str], message: str
) -> None:
    catalog = Catalog()

    @catalog.job("acme.hello", title="Hello")
    def hello(ctx: JobContext, params: object) -> None:
        return None

    fields = {"name": "Hello", "cron": "0 * * * *", "time_zone": "UTC", **changes}
    catalog.register_default(
        "hello", "acme.hello", fields["cron"], time_zone=fields["time_zone"], name=fields["name"]
    )
    with pytest.raises(CatalogError) as refused:
        materialise_defaults(db.session(), catalog, utcnow(), [world.alpha])
    assert str(refused.value) == f"default schedule 'hello': {message}"


def test_a_form_error_sits_between_its_field_and_the_next_one(app: Flask, world: World) -> None:
    page = (
        Panel(app, world.alice)
        .post("/schedules/new", posted({"cron": "61 * * * *"}))
        .get_data(as_text=True)
    )
    assert page.index('id="cron"') < page.index('id="cron-error"') < page.index('id="time_zone"')
    assert "Please fix the fields marked below." in page


def paused_since_2020(world: World) -> Schedule:
    schedule = create_schedule(
        world.alpha, {**VALID, "key": "k", "active": False}, Actor.cli(), utcnow()
    )
    db.session.execute(update(Schedule).values(next_run_at=datetime(2020, 1, 1, tzinfo=UTC)))
    db.session.commit()
    return schedule


def reactivate_by_form(app: Flask, world: World, schedule: Schedule) -> None:
    response = Panel(app, world.alice).post(f"/schedules/{schedule.id}/edit", posted({}))
    assert response.status_code < 400


def reactivate_by_import(app: Flask, world: World, schedule: Schedule) -> None:
    document = json.dumps([{**VALID, "key": schedule.key, "active": True}])
    assert import_schedules(world.alpha, document, Actor.cli(), utcnow()).updated == 1


@pytest.mark.parametrize("reactivate", [reactivate_by_form, reactivate_by_import])
def test_reactivating_restarts_from_now_and_skips_the_missed_fires(
    app: Flask, world: World, reactivate: Callable[[Flask, World, Schedule], None]
) -> None:
    schedule = paused_since_2020(world)
    before = utcnow()
    reactivate(app, world, schedule)
    db.session.expire_all()
    fresh = db.session.get(Schedule, schedule.id)
    assert fresh is not None and fresh.active
    assert fresh.next_run_at is not None
    assert before < fresh.next_run_at <= before + timedelta(hours=1)  # the next hour, not 2020
    settings = TickSettings.of(config.settings(app))
    assert tick(db.session(), current_catalog(), settings, utcnow()).queued == 0
    assert db.session.scalar(select(func.count()).select_from(Run)) == 0
