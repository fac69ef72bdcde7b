"""The documentation's generated reference (webapp/reference/, put in place by docs/hooks.py when
`make docs` builds the site): every command, option, setting and API parameter has a
description, and the pages name every command, option, setting, endpoint, bundled job and table
the code has. The pages are rendered here by the very functions the hook calls."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import pytest
from pydantic import BaseModel

from webapp.api import openapi
from webapp.catalog import build_catalog
from webapp.config import Settings
from webapp.extensions import db
from webapp.reference import MARKER, RENDERERS, api, catalog, cli, fill_markers, settings, tables
from webapp.reference.app import reference_app

DOCS = Path(__file__).resolve().parent.parent / "docs"
# The tables DESIGN.md names as a public contract, with the columns it promises.
CONTRACT = {
    "tenants": {"id", "slug", "name", "time_zone", "created_at"},
    "users": {"id", "email", "password_hash", "is_operator", "created_at", "last_login_at"},
    "memberships": {"user_id", "tenant_id", "role"},
    "schedules": {"id", "tenant_id", "scope", "key", "name", "job", "args", "cron", "time_zone"},
    "runs": {"id", "schedule_id", "scheduled_for", "idempotency_key", "status", "locked_until"},
    "audit_events": set(),
    "workers": {"id", "hostname", "pid", "started_at", "last_heartbeat_at"},
    "login_attempts": set(),
    "user_sessions": set(),
    "api_tokens": set(),
    "api_idempotency_keys": set(),
    "notifications": set(),
    "run_rollups": set(),
    "calendars": set(),
    "sign_in_links": set(),
}


def undocumented_commands(entries: list[cli.Entry]) -> list[str]:
    """The commands without a help text and the options without one, as `path --option`."""
    missing = [entry.path for entry in entries if not (entry.command.help or "").strip()]
    missing += [
        f"{entry.path} {option.opts[0]}"
        for entry in entries
        for option in cli.options(entry)
        if not (option.help or "").strip()
    ]
    return missing


def undocumented_settings(model: type[BaseModel]) -> list[str]:
    return [name for name, field in model.model_fields.items() if not field.description]


def undocumented_operations(spec: dict[str, Any]) -> list[str]:
    """Operations whose summary is only their id (no docstring), and parameters without a
    description, as `GET /path` and `GET /path name`."""
    missing = []
    for method, path, operation in api.operations(spec):
        named = f"{method.upper()} {path}"
        if operation["summary"].strip() in ("", operation["operationId"]):
            missing.append(named)
        missing += [
            f"{named} {parameter['name']}"
            for parameter in operation.get("parameters", [])
            if not parameter.get("description")
        ]
    return missing


def test_every_command_and_option_has_help() -> None:
    assert undocumented_commands(cli.entries()) == []


def test_every_setting_has_a_description() -> None:
    assert undocumented_settings(Settings) == []


def test_every_api_operation_and_parameter_is_described() -> None:
    assert undocumented_operations(api.document()) == []


def test_the_checks_find_what_is_missing() -> None:
    """The three checks above can fail: a command, an option, a setting, an operation and a
    parameter without words are each found."""

    @click.command("bare")
    @click.option("--quiet", is_flag=True)
    def bare(quiet: bool) -> None:
        pass

    entry = cli.Entry("flask --app webapp bare", bare, click.Context(bare, info_name="bare"))
    assert undocumented_commands([entry]) == [
        "flask --app webapp bare",
        "flask --app webapp bare --quiet",
    ]

    class Bare(BaseModel):
        SCHEDULER_SOMETHING: int = 1

    assert undocumented_settings(Bare) == ["SCHEDULER_SOMETHING"]
    spec = {
        "tags": [{"name": "schedules"}],
        "paths": {
            "/api/v1/things/{thing_id}": {
                "get": {
                    "operationId": "thing",
                    "tags": ["schedules"],
                    "summary": "thing",
                    "parameters": [{"name": "thing_id", "in": "path"}],
                    "responses": {},
                }
            }
        },
    }
    assert undocumented_operations(spec) == [
        "GET /api/v1/things/{thing_id}",
        "GET /api/v1/things/{thing_id} thing_id",
    ]


def test_the_command_line_page_names_every_command_and_option() -> None:
    page = cli.render()
    entries = cli.entries()
    paths = {entry.path for entry in entries}
    # Each command of the app (a group's too), and the console script.
    for name in ("tenant create", "user reset-two-factor", "calendar import-ics", "serve"):
        assert f"flask --app webapp {name}" in paths
    assert {"flask --app webapp scheduler-worker", "scheduler-worker"} <= paths
    for entry in entries:
        assert f"`{entry.path}`" in page
        assert entry.command.get_usage(entry.context) in page
        for option in cli.options(entry):
            for name in [*option.opts, *option.secondary_opts]:
                assert f"`{name}`" in page
    assert "--require-two-factor`, `--no-require-two-factor`" in page


def test_the_settings_page_names_every_setting_with_its_default_and_meaning() -> None:
    page = settings.render()
    for name, field in Settings.model_fields.items():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{name}` |"))
        assert (field.description or "").split()[0] in row
    batch = next(line for line in page.splitlines() if "`SCHEDULER_BATCH_SIZE`" in line)
    assert batch.startswith("| `SCHEDULER_BATCH_SIZE` | integer | `300` |")
    ttl = next(line for line in page.splitlines() if "`SCHEDULER_SIGN_IN_LINK_TTL`" in line)
    assert "| integer, 1 to 3600 | `60` |" in ttl
    pooler = next(line for line in page.splitlines() if "`SCHEDULER_DATABASE_POOLER`" in line)
    assert "one of `none`, `pgbouncer`" in pooler


def test_the_api_page_lists_every_operation_the_app_serves() -> None:
    app = reference_app()
    served = app.test_client().get("/api/v1/openapi.json").get_json()
    page = api.render()
    operations = [(method, path) for path, item in served["paths"].items() for method in item]
    assert len(operations) == len(openapi.OPERATIONS)
    for method, path in operations:
        assert f"### `{method.upper()} {path}`" in page
    for name in served["components"]["schemas"]:
        assert f"### `{name}`" in page


def test_the_catalog_page_lists_every_bundled_job_and_parameter() -> None:
    page = catalog.render()
    jobs = build_catalog(demo_jobs=True).jobs()
    assert {job.name for job in jobs} >= {"http.webhook", "maintenance.prune_runs", "demo.echo"}
    for job in jobs:
        assert f"### `{job.name}`: {job.title}" in page
        for field in job.form_fields():
            assert f"| `{field.name}` |" in page
    assert "| `maintenance.prune_runs` | `maintenance.prune_runs` | `17 3 * * *` |" in page


def test_the_tables_page_lists_every_table_and_column() -> None:
    page = tables.render()
    reference_app()
    for name, table in db.metadata.tables.items():
        section = page.split(f"## `{name}`\n", 1)[1].split("\n## ", 1)[0]
        for column in table.columns:
            assert f"| `{column.name}` |" in section, (name, column.name)
    for name, columns in CONTRACT.items():
        assert name in db.metadata.tables, name
        assert columns <= {column.name for column in db.metadata.tables[name].columns}


@pytest.mark.parametrize(
    "page", sorted(path for path in DOCS.rglob("*.md") if MARKER.search(path.read_text()))
)
def test_every_marker_of_the_docs_is_filled(page: Path) -> None:
    filled = fill_markers(page.read_text(encoding="utf-8"))
    assert not MARKER.search(filled)
    assert "<!-- reference:" not in filled


def test_every_reference_has_its_page() -> None:
    marked = {
        found.group(1)
        for path in DOCS.rglob("*.md")
        for found in MARKER.finditer(path.read_text(encoding="utf-8"))
    }
    assert marked == set(RENDERERS)


def test_an_unknown_marker_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown reference 'clis'"):
        fill_markers("# Page\n\n<!-- reference: clis -->\n")


def test_help_texts_are_shown_as_written() -> None:
    """A help text's `<host>` is shown, never read as an HTML tag; code spans stay as they are;
    a pipe never splits a table cell."""
    from webapp.reference.text import cell, prose

    assert prose("Back to <host>, see `a <b>`") == "Back to &lt;host&gt;, see `a <b>`"
    assert cell("a | b") == "a \\| b"
    assert re.search(r"Back to &lt;host&gt;", settings.render())
