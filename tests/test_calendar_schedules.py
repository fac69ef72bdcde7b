"""A schedule's `calendar` and `calendar_policy` on both databases, through every way in and
out: the service (checked by ScheduleIn, audited), the API (with its OpenAPI document), the
import and export (a file's own calendars), the command line; bad input refused by field with
nothing written; a calendar in use cannot be deleted (the API, the panel, the CLI)."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError

from tests.api_helpers import Api, problem_fields
from tests.conftest import World, make_schedule
from tests.panel_helpers import Panel, schedule_form
from tests.test_calendar_cli import invoke
from tests.test_panel_builder import post_new, stored, text
from webapp.api.openapi import EXAMPLE_CALENDAR
from webapp.calendar_models import Calendar
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import AuditEvent, Schedule, Tenant
from webapp.services import calendars, transfer
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleError, update_schedule

CLI = Actor.cli()
NOW = datetime(2027, 6, 28, tzinfo=UTC)
SCHEDULE = {
    "key": "report",
    "name": "Report",
    "job": "demo.echo",
    "args": {"message": "hi"},
    "cron": "0 9 L * *",
    "time_zone": "UTC",
}


def us_business(world: World) -> Calendar:
    return calendars.create_calendar(world.alpha, EXAMPLE_CALENDAR, CLI, utcnow())


def schedule_count() -> int:
    return int(db.session.scalar(select(func.count()).select_from(Schedule)) or 0)


def test_a_schedule_names_a_calendar_and_its_policy_and_the_audit_log_says_so(
    app: Flask, world: World
) -> None:
    calendar = us_business(world)
    schedule = make_schedule(
        world.alpha,
        "Report",
        by=world.alice,
        now=datetime(2027, 7, 1, tzinfo=UTC),
        cron="0 9 L * *",
        calendar="us-business",
        calendar_policy="previous_business_day",
    )
    assert (schedule.calendar_id, schedule.calendar, schedule.calendar_policy) == (
        calendar.id,
        "us-business",
        "previous_business_day",
    )
    # July 31st 2027 is a Saturday: "the last business day of the month" is Friday the 30th.
    assert schedule.next_run_at == datetime(2027, 7, 30, 9, tzinfo=UTC)
    data = {**SCHEDULE, "args": {"message": "Report"}, "key": schedule.key, "calendar": None}
    update_schedule(schedule, data, CLI, NOW)
    assert (schedule.calendar_id, schedule.calendar, schedule.calendar_policy) == (
        None,
        None,
        "skip",
    )
    assert schedule.next_run_at == datetime(2027, 7, 31, 9, tzinfo=UTC)  # its fire time again
    before, after = db.session.execute(
        select(AuditEvent.before, AuditEvent.after).where(AuditEvent.action == "schedule.updated")
    ).one()
    assert before == {"calendar": "us-business", "calendar_policy": "previous_business_day"}
    assert after == {"calendar": None, "calendar_policy": "skip"}


@pytest.mark.parametrize(
    ("fields", "problems"),
    [
        (
            {"calendar": "uk"},
            {"calendar": "no calendar with key 'uk'; the valid keys: us-business"},
        ),
        (
            {"calendar_policy": "sometimes"},
            {
                "calendar_policy": "'sometimes' is not one of skip, next_business_day, "
                "previous_business_day"
            },
        ),
    ],
)
def test_bad_input_is_refused_by_field_on_the_api_and_nothing_written(
    app: Flask, world: World, fields: dict[str, str], problems: dict[str, str]
) -> None:
    us_business(world)
    api = Api(app, world.alpha, world.alice)
    refused = api.post("/api/v1/schedules", json={**SCHEDULE, **fields})
    assert refused.status_code == 422 and problem_fields(refused) == problems
    assert schedule_count() == 0


def test_the_api_creates_reads_changes_and_documents_the_fields(app: Flask, world: World) -> None:
    us_business(world)
    api = Api(app, world.alpha, world.alice)
    created = api.post("/api/v1/schedules", json={**SCHEDULE, "calendar": "us-business"})
    document = created.get_json()
    assert (document["calendar"], document["calendar_policy"]) == ("us-business", "skip")
    url = f"/api/v1/schedules/{document['id']}"
    changed = api.patch(url, json={"calendar_policy": "next_business_day"}).get_json()
    assert (changed["calendar"], changed["calendar_policy"]) == ("us-business", "next_business_day")
    other_tenant = Api(app, world.beta, world.charlie)
    refused = other_tenant.post("/api/v1/schedules", json={**SCHEDULE, "calendar": "us-business"})
    assert problem_fields(refused)["calendar"].endswith("none: this tenant has no calendars")
    spec = api.get("/api/v1/openapi.json").get_json()
    out = spec["components"]["schemas"]["ScheduleOut"]["properties"]
    assert {"calendar", "calendar_policy"} <= set(out)


def test_a_calendar_in_use_is_not_deleted_on_the_api_the_panel_or_the_cli(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    calendar = us_business(world)
    make_schedule(world.alpha, "Report", by=world.alice, now=NOW, calendar="us-business")
    message = "calendar 'us-business' is used by schedules report: change them first"
    api = Api(app, world.alpha, world.alice)
    refused = api.delete(f"/api/v1/calendars/{calendar.id}")
    assert refused.status_code == 409 and message in refused.get_data(as_text=True)
    page = Panel(app, world.alice).post(f"/calendars/{calendar.id}/delete")
    assert page.status_code == 409 and message in html.unescape(page.get_data(as_text=True))
    code, _, err = invoke(cli, "calendar", "delete", "us-business", "--tenant", "alpha")
    assert code == 1 and message in err
    assert db.session.get(Calendar, calendar.id) is not None


def test_export_and_import_carry_the_fields_and_a_files_own_calendars(
    app: Flask, world: World
) -> None:
    us_business(world)
    make_schedule(
        world.alpha,
        "Report",
        by=world.alice,
        now=NOW,
        calendar="us-business",
        calendar_policy="next_business_day",
    )
    exported = transfer.export_schedules(world.alpha, with_calendars=True)
    (item,) = json.loads(exported)["schedules"]
    assert (item["calendar"], item["calendar_policy"]) == ("us-business", "next_business_day")
    assert transfer.import_schedules(world.alpha, exported, CLI, NOW).unchanged == 1
    into_beta = transfer.import_schedules(world.beta, exported, CLI, NOW)
    assert into_beta.created == 1
    (copied,) = db.session.scalars(select(Schedule).where(Schedule.tenant_id == world.beta.id))
    assert copied.calendar == "us-business"
    assert copied.calendar_row.tenant_id == world.beta.id


def test_an_import_naming_an_unknown_calendar_writes_nothing(
    app: Flask, world: World, cli: FlaskCliRunner, tmp_path: Path
) -> None:
    us_business(world)
    items: list[dict[str, Any]] = [
        {**SCHEDULE, "key": "good", "calendar": "us-business"},
        {**SCHEDULE, "key": "bad", "calendar": "uk", "calendar_policy": "never"},
    ]
    listed = tmp_path / "schedules.json"
    listed.write_text(json.dumps(items), encoding="utf-8")
    code, _, err = invoke(cli, "schedule", "import", str(listed), "--tenant", "alpha")
    assert code == 1
    assert "item 1 (key 'bad'): calendar_policy: 'never' is not one of skip" in err
    assert "item 1 (key 'bad'): calendar: no calendar with key 'uk'" in err
    assert schedule_count() == 0
    with pytest.raises(ScheduleError):
        make_schedule(world.alpha, "Report", by=world.alice, now=NOW, calendar="uk")


def test_the_form_shows_a_bad_calendar_or_policy_next_to_its_field(
    app: Flask, world: World
) -> None:
    us_business(world)
    panel = Panel(app, world.alice)
    form = schedule_form(calendar="uk", calendar_policy="whenever")
    refused = panel.post("/schedules/new", data=form)
    page = html.unescape(refused.get_data(as_text=True))
    assert refused.status_code == 422
    assert 'id="calendar-error"' in page and "no calendar with key 'uk'" in page
    assert 'id="calendar_policy-error"' in page and "'whenever' is not one of skip" in page
    assert schedule_count() == 0
    saved = panel.post("/schedules/new", data=schedule_form(calendar="us-business"))
    assert saved.status_code in (200, 302) and schedule_count() == 1


LAST_BUSINESS_DAY: dict[str, object] = {"repeat": "monthly", "on": "LB", "times": "17:00"}


def test_the_builder_offers_the_last_business_day_by_name(app: Flask, world: World) -> None:
    us_business(world)
    alice = Panel(app, world.alice)
    refused = post_new(alice, LAST_BUSINESS_DAY)  # no calendar chosen
    assert refused.status_code == 422
    assert "the last business day counts the days of a calendar: choose one" in text(refused)
    assert stored() is None
    post_new(alice, LAST_BUSINESS_DAY, calendar="us-business")
    schedule = stored()
    assert schedule is not None
    assert (schedule.cron, schedule.calendar, schedule.calendar_policy) == (
        "0 17 L * *",
        "us-business",
        "previous_business_day",
    )
    edit = text(alice.get(f"/schedules/{schedule.id}/edit"))
    assert '<option value="LB" selected>The last business day' in edit


def test_the_database_keeps_a_used_calendar_but_a_tenant_goes_whole(
    app: Flask, world: World
) -> None:
    calendar_id, tenant_id = us_business(world).id, world.alpha.id
    make_schedule(world.alpha, "Report", by=world.alice, now=NOW, calendar="us-business")
    with pytest.raises(IntegrityError):
        db.session.execute(delete(Calendar).where(Calendar.id == calendar_id))
    db.session.rollback()
    db.session.execute(delete(Tenant).where(Tenant.id == tenant_id))
    db.session.commit()
    assert schedule_count() == 0 and db.session.get(Calendar, calendar_id) is None
