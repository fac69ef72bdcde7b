"""A webhook URL on a host the operator does not allow is refused when the schedule is saved,
by the panel, the import and the CLI alike, naming the allowed hosts; the form shows them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select

from tests.conftest import World
from tests.panel_helpers import Panel
from tests.settings_support import reconfigure
from webapp.extensions import db
from webapp.models import Schedule
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleError, ScheduleInput, create_schedule

NOW = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
ALLOWED = "host 'evil.example' is not allowed; allowed hosts: a.example, *.b.example"
NONE_ALLOWED = (
    "host 'evil.example' is not allowed: no hosts are allowed "
    "(SCHEDULER_WEBHOOK_ALLOWED_HOSTS is empty)"
)


@pytest.fixture
def allowed(app: Flask) -> None:
    reconfigure(app, SCHEDULER_WEBHOOK_ALLOWED_HOSTS=["a.example", "*.b.example"])


def webhook(url: str) -> ScheduleInput:
    return ScheduleInput(
        name="Hook", job="http.webhook", args={"url": url}, cron="@daily", time_zone="UTC"
    )


def schedules() -> int:
    return int(db.session.scalar(select(func.count()).select_from(Schedule)) or 0)


def test_the_service_refuses_a_host_that_is_not_allowed(
    app: Flask, world: World, allowed: None
) -> None:
    actor = Actor.for_user(world.alice)
    with pytest.raises(ScheduleError) as refused:
        create_schedule(world.alpha, webhook("https://Evil.example/hook"), actor, NOW)
    assert refused.value.errors == {"args.url": ALLOWED}
    assert schedules() == 0
    for url in ("https://a.example/hook", "https://x.b.example:8443/hook?token=1"):
        create_schedule(world.alpha, webhook(url), actor, NOW)
    assert schedules() == 2


def test_without_allowed_hosts_every_webhook_is_refused_and_the_message_says_so(
    app: Flask, world: World
) -> None:
    with pytest.raises(ScheduleError) as refused:
        create_schedule(
            world.alpha, webhook("https://evil.example/"), Actor.for_user(world.alice), NOW
        )
    assert refused.value.errors == {"args.url": NONE_ALLOWED}


def test_the_form_shows_the_allowed_hosts_and_refuses_another_with_422_and_input_kept(
    app: Flask, world: World, allowed: None
) -> None:
    alice = Panel(app, world.alice)
    fields = alice.get("/schedules/form/params?job=http.webhook", htmx=True).get_data(as_text=True)
    assert "Allowed hosts: a.example, *.b.example." in fields
    form = {
        "name": "Hook",
        "job": "http.webhook",
        "args.method": "POST",
        "args.url": "https://evil.example/hook",
        "args.expected_status": "200",
        "cron": "@daily",
        "time_zone": "UTC",
        "misfire_policy": "fire_once",
        "overlap_policy": "allow",
        "active": "on",
    }
    for htmx in (True, False):
        response = alice.post("/schedules/new", form, htmx=htmx)
        assert response.status_code == 422
        page = response.get_data(as_text=True)
        assert (
            f'<p class="field-error" id="args-url-error">{ALLOWED}</p>'.replace("'", "&#39;")
            in page
        )
        assert 'value="https://evil.example/hook"' in page
        assert "Allowed hosts: a.example, *.b.example." in page
    assert schedules() == 0


def test_the_form_says_when_no_host_is_allowed(app: Flask, world: World) -> None:
    page = Panel(app, world.alice).get("/schedules/form/params?job=http.webhook", htmx=True)
    assert "No hosts are allowed yet: ask the operator." in page.get_data(as_text=True)


def test_the_import_and_the_cli_refuse_it_naming_the_item(
    cli: FlaskCliRunner, world: World, allowed: None, tmp_path: Path
) -> None:
    path = tmp_path / "schedules.json"
    items: list[dict[str, object]] = [
        {"key": "ok", "name": "Ok", "job": "http.webhook", "cron": "@daily"},
        {"key": "k", "name": "Bad", "job": "http.webhook", "cron": "@daily"},
    ]
    items[0]["args"] = {"url": "https://a.example/"}
    items[1]["args"] = {"url": "https://evil.example/"}
    path.write_text(json.dumps(items))
    result = cli.invoke(args=["schedule", "import", str(path), "--tenant", "alpha"])
    assert result.exit_code != 0
    assert f"item 1 (key 'k'): args.url: {ALLOWED}" in result.stderr
    assert schedules() == 0  # all or nothing


def test_the_cli_catalog_lists_the_allowed_hosts(cli: FlaskCliRunner, allowed: None) -> None:
    listing = cli.invoke(args=["catalog", "list"]).stdout
    assert "Allowed hosts: a.example, *.b.example." in listing
