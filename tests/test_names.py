"""Names (of tenants, schedules and tokens) hold no control character: a CR/LF would split the
name's line in a log, a header or an email subject. The panel, the API, an import and the
command line refuse it alike, naming the field, and write nothing (both databases)."""

from __future__ import annotations

import json
from pathlib import Path

from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select

from tests.api_helpers import NEW, Api, problem_fields
from tests.conftest import World
from tests.panel_helpers import Panel
from webapp.extensions import db
from webapp.models import Schedule, Tenant
from webapp.token_models import ApiToken

LINE_BREAK = "Nightly\r\nX-Injected: yes"
MESSAGE = "must not contain a control character such as a line break (U+000D)"


def count(model: type) -> int:
    return int(db.session.scalar(select(func.count()).select_from(model)) or 0)


def test_the_panel_refuses_a_schedule_or_token_name_with_a_line_break(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    form = {
        "name": LINE_BREAK,
        "job": "demo.echo",
        "args.message": "hello",
        "cron": "*/7 * * * *",
        "time_zone": "UTC",
    }
    page = alice.post("/schedules/new", form, htmx=False)
    assert page.status_code == 422
    assert f"the name {MESSAGE}" in page.get_data(as_text=True)
    tab = alice.post("/schedules/new", {**form, "name": "a\tb"}, htmx=False)
    assert tab.status_code == 422 and "(U+0009)" in tab.get_data(as_text=True)
    token = alice.post("/tokens", {"name": LINE_BREAK, "scope": "read", "expires_in": ""}, False)
    assert token.status_code == 422
    assert f"the name {MESSAGE}" in token.get_data(as_text=True)
    assert (count(Schedule), count(ApiToken)) == (0, 0)


def test_the_api_refuses_a_name_with_a_line_break(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    answer = api.post("/api/v1/schedules", {**NEW, "name": LINE_BREAK})
    assert answer.status_code == 422
    assert problem_fields(answer)["name"] == f"the name {MESSAGE}"
    assert count(Schedule) == 0


def test_an_import_and_the_command_line_refuse_a_name_with_a_line_break(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    document = [
        {
            "key": "a",
            "name": "Nightly\nreport",
            "job": "demo.echo",
            "args": {"message": "m"},
            "cron": "0 * * * *",
            "time_zone": "UTC",
        }
    ]
    path = tmp_path / "schedules.json"
    path.write_text(json.dumps(document))
    imported = cli.invoke(args=["schedule", "import", str(path), "--tenant", "alpha"])
    assert imported.exit_code == 1
    assert imported.stderr.splitlines()[0] == (
        "item 0 (key 'a'): name: the name must not contain a control character such as a line "
        "break (U+000A)"
    )
    tenants = count(Tenant)
    tenant = cli.invoke(args=["tenant", "create", "acme", "--name", LINE_BREAK])
    assert (tenant.exit_code, tenant.stderr) == (1, f"Error: the tenant name {MESSAGE}\n")
    token = cli.invoke(
        args=["token", "create", "--tenant", "alpha", "--name", LINE_BREAK, "--scope", "read"]
    )
    assert token.exit_code == 1 and MESSAGE in token.stderr
    assert (count(Schedule), count(Tenant), count(ApiToken)) == (0, tenants, 0)
