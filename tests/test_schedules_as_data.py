"""Import/export, defaults, quotas and the catalog from the command line, on both databases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select, update

from tests.conftest import World, make_schedule, migrated_app
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule
from webapp.services import accounts


def item(key: str, **changes: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "key": key,
        "name": f"Schedule {key}",
        "job": "demo.echo",
        "args": {"message": key},
        "cron": "0 * * * *",
        "time_zone": "UTC",
    }
    fields.update(changes)
    return fields


def write(tmp_path: Path, document: object) -> str:
    path = tmp_path / "schedules.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def count(model: type) -> int:
    return int(db.session.scalar(select(func.count()).select_from(model)) or 0)


def import_file(cli: FlaskCliRunner, path: str, tenant: str = "alpha") -> tuple[int, str, str]:
    result = cli.invoke(args=["schedule", "import", path, "--tenant", tenant])
    return result.exit_code, result.stdout, result.stderr


def test_import_creates_every_schedule(cli: FlaskCliRunner, world: World, tmp_path: Path) -> None:
    path = write(tmp_path, [item("a"), item("b", misfire_policy="skip", active=False)])
    assert import_file(cli, path) == (
        0,
        "imported into alpha: 2 created, 0 updated, 0 unchanged\n",
        "",
    )
    rows = db.session.execute(
        select(Schedule.key, Schedule.active, Schedule.misfire_policy).order_by(Schedule.key)
    ).all()
    assert [tuple(r) for r in rows] == [("a", True, "fire_once"), ("b", False, "skip")]
    assert count(AuditEvent) == 2


def test_import_warns_of_a_shared_name_and_a_legacy_zone_and_matches_zones_by_case(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    make_schedule(world.beta, "Same", by=world.charlie)  # another tenant's: not told
    items = [item("a", name="Same"), item("b", name="Same", time_zone="est")]
    items.append(item("c", time_zone="europe/berlin"))
    code, out, err = import_file(cli, write(tmp_path, items))
    assert (code, out) == (0, "imported into alpha: 3 created, 0 updated, 0 unchanged\n")
    fixed = "EST is a legacy fixed offset, UTC-05:00 all year without daylight saving time"
    assert err.splitlines() == [
        "warning: key 'a': name: another schedule is named “Same” (key b)",
        "warning: key 'b': name: another schedule is named “Same” (key a)",
        f"warning: key 'b': time_zone: {fixed}: for a place's local time choose its zone, "
        "such as America/New_York",
    ]
    alphas = select(Schedule.key, Schedule.time_zone).where(Schedule.tenant_id == world.alpha.id)
    zones = db.session.execute(alphas.order_by(Schedule.key))
    assert [tuple(row) for row in zones] == [("a", "UTC"), ("b", "EST"), ("c", "Europe/Berlin")]


def test_import_is_idempotent_and_updates_by_key(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    import_file(cli, write(tmp_path, [item("a"), item("b")]))
    again = import_file(cli, write(tmp_path, [item("a"), item("b", cron="5 * * * *")]))
    assert again == (0, "imported into alpha: 0 created, 1 updated, 1 unchanged\n", "")
    db.session.expire_all()
    assert db.session.scalar(select(Schedule.cron).where(Schedule.key == "b")) == "5 * * * *"
    updated = db.session.scalars(
        select(AuditEvent).where(AuditEvent.action == "schedule.updated")
    ).one()
    assert (updated.before, updated.after) == ({"cron": "0 * * * *"}, {"cron": "5 * * * *"})


def test_export_then_import_is_a_no_op(cli: FlaskCliRunner, world: World, tmp_path: Path) -> None:
    import_file(cli, write(tmp_path, [item("b", args={"message": "ü"}), item("a", active=False)]))
    exported = cli.invoke(args=["schedule", "export", "--tenant", "alpha"]).stdout
    assert [entry["key"] for entry in json.loads(exported)] == ["a", "b"]
    assert json.loads(exported)[0] == {
        "key": "a",
        "name": "Schedule a",
        "job": "demo.echo",
        "args": {"message": "a"},
        "cron": "0 * * * *",
        "time_zone": "UTC",
        "active": False,
        "misfire_policy": "fire_once",
        "overlap_policy": "allow",
        "notify_emails": [],
        "notify_webhook_url": None,
        "pause_after_failures": None,
        "jitter_seconds": None,
        "calendar": None,
        "calendar_policy": "skip",
    }
    events = count(AuditEvent)
    assert import_file(cli, write(tmp_path, exported))[1] == (
        "imported into alpha: 0 created, 0 updated, 2 unchanged\n"
    )
    assert count(AuditEvent) == events


def test_one_bad_item_lists_every_problem_and_writes_nothing(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    document = [
        item("ok"),
        item("sys", job="os.system"),
        item("nightly", job="maintenance.prune_runs", args={}),
        item("typed", args={"message": 5}),
        item("extra", args={"message": "m", "shout": True}),
        item("missing", args={}),
        item("cron", cron="0 0 30 2 *"),
        item("zone", time_zone="Mars/Olympus"),
        item("ok"),
        {"name": "no key", "job": "demo.echo", "cron": "* * * * *", "colour": "red"},
        "not an object",
        item("eval", job="builtins.eval"),
        item("globals", job="demo.echo.__globals__"),
        item("empty", job=""),
    ]
    code, out, err = import_file(cli, write(tmp_path, document))
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "item 1 (key 'sys'): job 'os.system' is not in the catalog",
        "item 2 (key 'nightly'): job 'maintenance.prune_runs' is a system job and cannot be "
        "used in a tenant schedule",
        "item 3 (key 'typed'): args.message: Input should be a valid string",
        "item 4 (key 'extra'): args.shout: Extra inputs are not permitted",
        "item 5 (key 'missing'): args.message: Field required",
        "item 6 (key 'cron'): cron: February never has 30 days: this schedule would never fire",
        "item 7 (key 'zone'): time_zone: unknown time zone 'Mars/Olympus'",
        "item 8 (key 'ok'): duplicate key: item 0 has it too",
        "item 9: key: field required",
        "item 9: args.message: Field required",  # every problem of an item, not the first kind
        "item 9: colour: unknown field",
        "item 10: must be a JSON object",
        "item 11 (key 'eval'): job 'builtins.eval' is not in the catalog",
        "item 12 (key 'globals'): job 'demo.echo.__globals__' is not in the catalog",
        "item 13 (key 'empty'): job '' is not in the catalog",
        "nothing was imported",
    ]
    assert count(Schedule) == 0 and count(AuditEvent) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[{", "malformed JSON: Expecting property name enclosed in double quotes"),
        ('{"key": "a"}', "the file must hold a JSON list of schedule objects"),
    ],
)
def test_a_file_that_is_not_a_json_list_is_refused(
    cli: FlaskCliRunner, world: World, tmp_path: Path, content: str, message: str
) -> None:
    code, _, err = import_file(cli, write(tmp_path, content))
    assert code == 1 and err.startswith(message)
    assert count(Schedule) == 0


def test_import_into_a_missing_tenant_is_refused(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    assert import_file(cli, write(tmp_path, [item("a")]), tenant="gamma") == (
        1,
        "",
        "Error: no tenant with slug 'gamma'\n",
    )


def test_import_over_the_quota_writes_nothing(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    result = cli.invoke(args=["tenant", "set", "alpha", "--max-schedules", "2"])
    assert (
        result.stdout
        == "tenant alpha: max schedules 2, min interval default, retention days default, "
        "max running default\n"
    )
    code, _, err = import_file(cli, write(tmp_path, [item("a"), item("b"), item("c")]))
    assert code == 1
    assert err.splitlines()[0] == (
        "tenant 'alpha' may have at most 2 schedules: it has 0 and this adds 3"
    )
    assert count(Schedule) == 0


def test_the_minimum_interval_quota_names_the_item(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    cli.invoke(args=["tenant", "set", "alpha", "--min-interval", "3600"])
    code, _, err = import_file(cli, write(tmp_path, [item("a"), item("b", cron="*/5 * * * *")]))
    assert code == 1
    assert err.splitlines()[0] == (
        "item 1 (key 'b'): cron: fires as often as every 300 s; this tenant allows at most "
        "one fire every 3600 s"
    )


def test_tenant_set_refuses_a_bad_value(cli: FlaskCliRunner, world: World) -> None:
    result = cli.invoke(args=["tenant", "set", "alpha", "--max-schedules", "many"])
    assert result.exit_code == 2
    assert "'many' is not a whole number up to 2147483647 or 'default'" in result.stderr
    for huge in ("99999999999999999999999", "²"):
        result = cli.invoke(args=["tenant", "set", "alpha", "--max-schedules", huge])
        assert result.exit_code == 2 and "is not a whole number" in result.stderr


def test_ten_thousand_items_import_in_one_transaction(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    document = [item(f"s{n:05d}", cron=f"{n % 60} * * * *") for n in range(10_000)]
    assert import_file(cli, write(tmp_path, document))[0] == 0
    assert count(Schedule) == 10_000 and count(AuditEvent) == 10_000


def test_catalog_list_shows_jobs_and_parameters(cli: FlaskCliRunner) -> None:
    lines = cli.invoke(args=["catalog", "list"]).stdout.splitlines()
    assert "demo.echo  [tenant]  Echo a message" in lines
    assert "maintenance.prune_runs  [system]  Prune run history" in lines
    assert "    seconds (number, required, min 0, max 3600): How long the run lasts." in lines
    assert lines[0] == (
        "Arguments: each text at most 4096 bytes (UTF-8), all of a schedule's together at most "
        "16384 bytes as JSON (SCHEDULER_MAX_ARG_BYTES, SCHEDULER_MAX_ARGS_BYTES)."
    )
    assert (
        "    message (text, required): Written to the run's output. At most 4096 bytes (UTF-8)."
        in lines
    )


def test_schedule_run_queues_a_manual_run(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    import_file(cli, write(tmp_path, [item("a", time_zone="Europe/Berlin")]))
    day = datetime.now(UTC).date() + timedelta(days=40)
    result = cli.invoke(args=["schedule", "run", "a", "--tenant", "alpha", "--at", f"{day}T09:00"])
    assert result.exit_code == 0, result.output
    run = db.session.scalars(select(Run)).one()
    nine = datetime(day.year, day.month, day.day, 9, tzinfo=ZoneInfo("Europe/Berlin"))
    assert result.stdout == f"run {run.id} queued for {nine.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}\n"
    assert run.available_at == nine
    missing = cli.invoke(args=["schedule", "run", "zzz", "--tenant", "alpha"])
    assert missing.exit_code == 1
    assert missing.stderr == "Error: key: tenant 'alpha' has no schedule with key 'zzz'\n"
    bad = cli.invoke(args=["schedule", "run", "a", "--tenant", "alpha", "--at", "tomorrow"])
    assert bad.exit_code == 2 and "'tomorrow' is not an ISO 8601 date and time" in bad.stderr


@pytest.fixture
def operator_app(database_url: str) -> Iterator[Flask]:
    """The app with an operator job module that declares a default schedule."""
    application = migrated_app(database_url, SCHEDULER_JOB_MODULES=["tests.sample_jobs"])
    with application.app_context():
        yield application
        db.session.remove()
        db.engine.dispose()


def test_sync_materialises_defaults_once_and_never_overwrites(
    operator_app: Flask, password_hash: str
) -> None:
    cli = operator_app.test_cli_runner()
    for slug in ("alpha", "beta"):
        cli.invoke(args=["tenant", "create", slug, "--name", slug.title()])
    # Creating a tenant materialises its defaults right away, and the missing system ones.
    assert count(Schedule) == 3
    assert cli.invoke(args=["scheduler", "sync"]).stdout == "created 0 default schedules\n"
    keys = db.session.execute(select(Schedule.tenant_id, Schedule.key).order_by(Schedule.id)).all()
    assert sorted(k for _, k in keys) == [
        "maintenance.prune_runs",
        "sample.nightly-report",
        "sample.nightly-report",
    ]
    edited = db.session.scalars(
        select(Schedule).where(Schedule.key == "sample.nightly-report")
    ).first()
    assert edited is not None and edited.args == {"recipients": 1, "fmt": "csv"}
    edited.cron, edited.active, edited.args = "0 5 * * *", False, {"recipients": 9, "fmt": "pdf"}
    db.session.commit()
    assert cli.invoke(args=["scheduler", "sync"]).stdout == "created 0 default schedules\n"
    db.session.expire_all()
    assert (edited.cron, edited.active, edited.args) == (
        "0 5 * * *",
        False,
        {"recipients": 9, "fmt": "pdf"},
    )
    assert count(Schedule) == 3


def test_the_first_tenant_gets_the_system_defaults_without_a_sync(app: Flask) -> None:
    accounts.create_tenant("gamma", "Gamma", "UTC")
    system = db.session.execute(select(Schedule.tenant_id, Schedule.key, Schedule.scope)).all()
    assert system == [(None, "maintenance.prune_runs", "system")]
    accounts.create_tenant("delta", "Delta", "UTC")  # made once, not once per tenant
    assert count(Schedule) == 1


def last_sunday(year: int, month: int) -> date:
    day = date(year, month, 31)
    return day - timedelta(days=(day.weekday() - 6) % 7)


def next_last_sunday(month: int) -> date:
    """The next clock change of Berlin in that month (March, October): within a year."""
    today = datetime.now(UTC).date()
    day = last_sunday(today.year, month)
    return day if day > today else last_sunday(today.year + 1, month)


def test_schedule_run_at_follows_the_dst_rules_and_refuses_odd_years(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    import_file(cli, write(tmp_path, [item("a", time_zone="Europe/Berlin")]))
    spring, autumn = next_last_sunday(3), next_last_sunday(10)
    # 02:30 does not exist in Berlin when the clocks go forward: the run starts at 03:00 CEST.
    skipped = cli.invoke(
        args=["schedule", "run", "a", "--tenant", "alpha", "--at", f"{spring}T02:30"]
    )
    assert skipped.stdout.endswith(f"queued for {spring}T01:00:00Z\n"), skipped.output
    # 02:30 happens twice when they go back: the first one (CEST) counts.
    twice = cli.invoke(
        args=["schedule", "run", "a", "--tenant", "alpha", "--at", f"{autumn}T02:30"]
    )
    assert twice.stdout.endswith(f"queued for {autumn}T00:30:00Z\n"), twice.output
    aware = cli.invoke(
        args=["schedule", "run", "a", "--tenant", "alpha", "--at", f"{spring}T09:00+05:30"]
    )
    assert aware.stdout.endswith(f"queued for {spring}T03:30:00Z\n"), aware.output
    far = cli.invoke(args=["schedule", "run", "a", "--tenant", "alpha", "--at", "0001-01-01T00:00"])
    assert far.exit_code == 2 and "outside the years 1970 to 2999" in far.stderr
    # Year 2999 with the most negative offset is the year 3000 in UTC: refused as any run more
    # than a year ahead, in one line, and nothing is stored.
    runs = count(Run)
    extreme = cli.invoke(
        args=["schedule", "run", "a", "--tenant", "alpha", "--at", "2999-12-31T23:00-23:59"]
    )
    assert (extreme.exit_code, extreme.stderr) == (
        1,
        "Error: at: 3000-01-01 23:59 CET (+01:00) is more than a year (366 days) from now\n",
    )
    assert count(Run) == runs


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        ({"name": 123}, "item 0 (key 'a'): name: must be text"),
        (
            {"args": {"message": "a\u0000b"}},
            "item 0 (key 'a'): args.message: must not contain a NUL character",
        ),
        ({"name": "a\u0000b"}, "item 0 (key 'a'): name: must not contain a NUL character"),
        (
            {"name": "a\ud800b"},
            "item 0 (key 'a'): name: is not valid text: it holds a lone surrogate (U+D800)",
        ),
        (
            {"cron": "1," * 100 + "2 * * * *"},
            "item 0 (key 'a'): cron: cron expression is longer than 200 characters",
        ),
        (
            {"key": "a\n"},
            "item 0 (key 'a\\n'): key: invalid key 'a\\n': use 1-64 lower-case "
            "letters, digits, '_', '.', '-'",
        ),
        ({"time_zone": "localtime"}, "item 0 (key 'a'): time_zone: unknown time zone 'localtime'"),
    ],
)
def test_values_the_database_could_not_store_are_refused_first(
    cli: FlaskCliRunner, world: World, tmp_path: Path, changes: dict[str, object], line: str
) -> None:
    document = {**item("a"), **changes}
    code, _, err = import_file(cli, write(tmp_path, [document]))
    assert code == 1
    assert err.splitlines()[0] == line
    assert count(Schedule) == 0


def test_arguments_over_the_size_limits_are_refused_and_nothing_is_written(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    document = [
        item("a"),
        item("b", args={"message": "é" * 2049}),  # 2,049 characters, 4,098 bytes
        item("c", args={"message": "x" * 4000, "y" * 13_000: 1}),  # all together too large
        item("d", args={"message": "x" * 10 * 1024 * 1024}),  # the 10 MB of the report
    ]
    code, _, err = import_file(cli, write(tmp_path, document))
    assert code == 1
    assert err.splitlines() == [
        "item 1 (key 'b'): args.message: should be at most 4096 bytes, not 4098",
        "item 2 (key 'c'): args: should be at most 16384 bytes as JSON in all, not 17019",
        "item 3 (key 'd'): args: should be at most 16384 bytes as JSON in all, not 10485774",
        "nothing was imported",
    ]
    assert count(Schedule) == 0


def test_the_stored_arguments_are_checked_again_by_schedule_run(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    import_file(cli, write(tmp_path, [item("a")]))
    # Stored before the limits existed, or over limits lowered since.
    db.session.execute(update(Schedule).values(args={"message": "x" * 5000}))
    db.session.commit()
    result = cli.invoke(args=["schedule", "run", "a", "--tenant", "alpha"])
    assert (result.exit_code, result.stderr) == (
        1,
        "Error: args.message: should be at most 4096 bytes, not 5000\n",
    )
    assert count(Run) == 0


def test_deeply_nested_json_is_malformed_not_a_crash(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    code, _, err = import_file(cli, write(tmp_path, "[" * 100_000))
    assert code == 1 and err.startswith("malformed JSON: nested more than 32 levels deep")


def test_reactivating_through_an_import_skips_the_missed_fires(
    cli: FlaskCliRunner, world: World, tmp_path: Path
) -> None:
    import_file(cli, write(tmp_path, [item("a", active=False)]))
    db.session.execute(update(Schedule).values(next_run_at=datetime(2020, 1, 1, tzinfo=UTC)))
    db.session.commit()
    import_file(cli, write(tmp_path, [item("a", active=True)]))
    db.session.expire_all()
    schedule = db.session.scalars(select(Schedule)).one()
    assert schedule.active
    assert schedule.next_run_at is not None and schedule.next_run_at > datetime.now(UTC)
