"""`flask calendar ...` on both databases: create, add, list, show, delete, .ics and JSON
files; every refusal one line on stderr with a non-zero exit and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flask.testing import FlaskCliRunner

from tests.conftest import World
from tests.test_calendars import ICS, calendar_audit, counts

CREATE = [
    "calendar",
    "create",
    "us-business",
    "--tenant",
    "alpha",
    "--name",
    "US business days",
    "--country",
    "us",
    "--subdivision",
    "ca",
]


def invoke(cli: FlaskCliRunner, *args: str) -> tuple[int, str, str]:
    result = cli.invoke(args=list(args))
    return result.exit_code, result.stdout, result.stderr


def test_create_add_list_and_show_a_year(cli: FlaskCliRunner, world: World) -> None:
    assert invoke(cli, *CREATE) == (0, "created calendar us-business for alpha\n", "")
    added = invoke(
        cli,
        "calendar",
        "add",
        "us-business",
        "--tenant",
        "alpha",
        "2027-12-24..2027-12-31",
        "--label",
        "Winter break",
    )
    assert added == (0, "us-business: added 2027-12-24..2027-12-31\n", "")
    window = "2027-01-12T01:00..2027-01-12T05:00"
    assert invoke(cli, "calendar", "add", "us-business", "--tenant", "alpha", window)[0] == 0
    listed = invoke(cli, "calendar", "list")
    assert listed[1] == "alpha\tus-business\tUS business days\tUS-CA\tsat,sun\t2\n"
    assert invoke(cli, "calendar", "list", "--tenant", "beta")[1] == ""
    code, out, err = invoke(
        cli, "calendar", "show", "us-business", "--tenant", "alpha", "--year", "2027"
    )
    lines = out.splitlines()
    assert code == 0 and err == "122 closed days in 2027\n"
    assert "2027-03-31\tWed\tCesar Chavez Day (US-CA holidays)" in lines
    assert "2027-12-27\tMon\tWinter break" in lines
    assert lines[-1] == "window\tMaintenance window, 2027-01-12 01:00 to 05:00"
    assert [action for action, *_ in calendar_audit()] == [
        "calendar.created",
        "calendar.entries_added",
        "calendar.entries_added",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--country", "XX"], "Error: country: 'XX' is not a country the holidays package knows"),
        (["--subdivision", "QQ"], "Error: subdivision: 'QQ' is not a subdivision of US"),
        (["--closed-weekdays", "sat,sux"], "Error: closed_weekdays: sux is not a day of the week"),
    ],
)
def test_bad_options_are_refused_in_one_line(
    cli: FlaskCliRunner, world: World, args: list[str], message: str
) -> None:
    code, out, err = invoke(cli, *CREATE, *args)
    assert (code, out) == (1, "")
    assert err.startswith(message) and err.count("\n") == 1
    assert counts() == (0, 0)


def test_a_duplicate_key_a_bad_span_and_an_unknown_calendar_are_refused(
    cli: FlaskCliRunner, world: World
) -> None:
    invoke(cli, *CREATE)
    assert invoke(cli, *CREATE) == (
        1,
        "",
        "Error: key: the tenant has a calendar with key 'us-business' already\n",
    )
    code, _, err = invoke(
        cli, "calendar", "add", "us-business", "--tenant", "alpha", "2027-12-31..2027-12-24"
    )
    assert code == 1 and err.startswith(
        "Error: 2027-12-31..2027-12-24: the range ends (2027-12-24) before it starts (2027-12-31)"
    )
    assert err.count("\n") == 1
    missing = invoke(cli, "calendar", "show", "nope", "--tenant", "alpha", "--year", "2027")
    assert missing == (1, "", "Error: key: tenant alpha has no calendar 'nope'\n")
    assert counts() == (1, 0)


def test_ics_import_and_json_export_import(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    invoke(cli, *CREATE)
    ics = tmp_path / "acme.ics"
    ics.write_bytes(ICS)
    code, out, _ = invoke(
        cli, "calendar", "import-ics", "us-business", str(ics), "--tenant", "alpha"
    )
    assert (code, out) == (0, f"us-business: 3 added from {ics}\n")
    ics.write_bytes(ICS.replace(b"UID:3@acme\n", b"UID:3@acme\nRRULE:FREQ=DAILY\n"))
    code, _, err = invoke(
        cli, "calendar", "import-ics", "us-business", str(ics), "--tenant", "alpha"
    )
    assert code == 1 and "event 3 ('Storage migration'): it repeats (RRULE)" in err
    exported = invoke(cli, "calendar", "export", "--tenant", "alpha")[1]
    assert [c["key"] for c in json.loads(exported)] == ["us-business"]
    copy = tmp_path / "calendars.json"
    copy.write_text(exported, encoding="utf-8")
    into_beta = invoke(cli, "calendar", "import", str(copy), "--tenant", "beta")
    assert into_beta == (0, "imported into beta: 1 created, 0 updated, 0 unchanged\n", "")
    copy.write_text(json.dumps([{"key": "bad", "name": "Bad", "country": "XX"}]))
    code, _, err = invoke(cli, "calendar", "import", str(copy), "--tenant", "beta")
    assert code == 1 and err.endswith("nothing was imported\n")
    assert counts() == (2, 6)


def test_delete(cli: FlaskCliRunner, world: World) -> None:
    invoke(cli, *CREATE)
    assert invoke(cli, "calendar", "delete", "us-business", "--tenant", "alpha")[0] == 0
    assert counts() == (0, 0)


def test_a_schedule_file_carries_the_calendars_all_or_nothing(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    invoke(cli, *CREATE)
    schedule = {
        "key": "nightly",
        "name": "Nightly",
        "job": "demo.echo",
        "cron": "0 2 * * *",
        "args": {"message": "hi"},
    }
    listed = tmp_path / "schedules.json"
    listed.write_text(json.dumps([schedule]), encoding="utf-8")
    assert invoke(cli, "schedule", "import", str(listed), "--tenant", "alpha")[0] == 0
    code, out, _ = invoke(cli, "schedule", "export", "--tenant", "alpha", "--with-calendars")
    document = json.loads(out)
    assert code == 0 and list(document) == ["calendars", "schedules"]
    assert [c["key"] for c in document["calendars"]] == ["us-business"]
    assert [s["key"] for s in document["schedules"]] == ["nightly"]
    assert isinstance(json.loads(invoke(cli, "schedule", "export", "--tenant", "alpha")[1]), list)
    both = tmp_path / "both.json"
    document["calendars"].append({"key": "bad", "name": "Bad", "country": "XX"})
    both.write_text(json.dumps(document), encoding="utf-8")
    code, _, err = invoke(cli, "schedule", "import", str(both), "--tenant", "beta")
    assert code == 1 and "calendars: item 1 (key 'bad'): country: 'XX' is not a country" in err
    assert counts() == (1, 0)
    del document["calendars"][1]
    both.write_text(json.dumps(document), encoding="utf-8")
    imported = invoke(cli, "schedule", "import", str(both), "--tenant", "beta")
    assert imported[:2] == (
        0,
        "imported into beta: 1 created, 0 updated, 0 unchanged\n"
        "calendars: 1 created, 0 updated, 0 unchanged\n",
    )
    assert counts() == (2, 0)
