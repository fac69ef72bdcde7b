"""The app factory, configuration, the login page and the security headers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from flask import Flask
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from tests.conftest import PASSWORD, World, make_run, make_schedule
from tests.panel_helpers import Panel, log_in
from webapp import create_app
from webapp.config import SCHEDULER_SETTINGS, ConfigError, load_settings, settings
from webapp.extensions import db
from webapp.models import Run, Schedule, Tenant


def read(instance_path: Path) -> dict[str, object]:
    """What load_settings gives Flask and the code: the settings as typed values."""
    loaded = load_settings(str(instance_path))
    return {
        **loaded.settings.model_dump(include=SCHEDULER_SETTINGS),
        **loaded.flask_config(str(instance_path)),
    }


def test_secret_key_is_required_outside_debug_and_tests(
    monkeypatch: pytest.MonkeyPatch, instance_folder: str
) -> None:
    monkeypatch.delenv("SECRET_KEY", raising=False)
    with pytest.raises(ConfigError) as missing:
        create_app({"SQLALCHEMY_DATABASE_URI": "sqlite://"})
    assert str(missing.value) == (
        f"SECRET_KEY is not set: export SECRET_KEY or set it in {instance_folder}/config.py "
        "(see docs/reference/settings.md)"
    )


def test_settings_come_from_defaults_instance_file_environment_and_mapping_in_that_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "config.py").write_text(
        'SECRET_KEY = "from-the-file"\n'
        "SCHEDULER_BATCH_SIZE = 10\n"
        "SCHEDULER_LOCK_TTL = 20\n"
        'SCHEDULER_POLL_INTERVAL = "2.5"\n'
        'SCHEDULER_JOB_MODULES = ("tests.sample_jobs",)\n'
        "SESSION_COOKIE_SECURE = False\n"
        'DATABASE_URL = "postgres://u@db/from-file"\n'
    )
    monkeypatch.setenv("SCHEDULER_INSTANCE_PATH", str(tmp_path))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("SCHEDULER_LOCK_TTL", "30")
    monkeypatch.setenv("SCHEDULER_POLL_INTERVAL", "3")
    app = create_app({"SCHEDULER_POLL_INTERVAL": 4.0, "SQLALCHEMY_DATABASE_URI": "sqlite://"})
    assert settings(app).SCHEDULER_CONCURRENCY == 4  # the default
    assert settings(app).SCHEDULER_BATCH_SIZE == 10  # the file
    assert settings(app).SCHEDULER_JOB_MODULES == ["tests.sample_jobs"]
    assert app.config["SECRET_KEY"] == "from-the-file"
    assert app.config["SESSION_COOKIE_SECURE"] is False
    assert settings(app).SCHEDULER_LOCK_TTL == 30  # the environment over the file
    assert settings(app).SCHEDULER_POLL_INTERVAL == 4.0  # the mapping over both
    assert read(tmp_path)["SQLALCHEMY_DATABASE_URI"] == ("postgresql+psycopg://u@db/from-file")
    monkeypatch.setenv("DATABASE_URL", "postgres://u@db/from-env")
    assert read(tmp_path)["SQLALCHEMY_DATABASE_URI"] == ("postgresql+psycopg://u@db/from-env")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("SCHEDULER_BATCH_SIZE = 'many'", "SCHEDULER_BATCH_SIZE='many' is not a valid int"),
        ("SCHEDULER_DEMO_JOBS = 1", "SCHEDULER_DEMO_JOBS=1 is not a valid bool"),
        ("SESSION_COOKIE_SECURE = 'maybe'", "SESSION_COOKIE_SECURE='maybe' is not a valid bool"),
        ("SCHEDULER_POLL_INTERVAL = True", "SCHEDULER_POLL_INTERVAL=True is not a valid float"),
        ("SCHEDULER_MAX_SCHEDULES = 2.5", "SCHEDULER_MAX_SCHEDULES=2.5 is not a valid int"),
        ("SCHEDULER_JOB_MODULES = 'a' 'b'", None),
        ("SCHEDULER_JOB_MODULES = 5", "SCHEDULER_JOB_MODULES=5 is not a valid list"),
        (
            "SCHEDULER_JOB_MODULES = ['acme.jobs', 5]",
            "SCHEDULER_JOB_MODULES=['acme.jobs', 5] is not a valid list of str",
        ),
    ],
)
def test_a_bad_value_in_the_instance_file_names_the_setting_and_the_file(
    tmp_path: Path, line: str, message: str | None
) -> None:
    (tmp_path / "config.py").write_text(line + "\n")
    if message is None:  # text is read as in the environment: 'ab' is one module
        assert read(tmp_path)["SCHEDULER_JOB_MODULES"] == ["ab"]
        return
    with pytest.raises(ConfigError) as bad:
        load_settings(str(tmp_path))
    assert str(bad.value) == f"{message} (in {tmp_path}/config.py)"


def test_an_instance_file_that_is_not_python_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "config.py").write_text("SECRET_KEY = (\n")
    with pytest.raises(ConfigError, match=r"^cannot read .*config.py: SyntaxError: "):
        load_settings(str(tmp_path))


def test_without_a_file_or_environment_the_defaults_hold_and_the_database_is_in_the_instance_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    values = read(tmp_path)
    assert values["SQLALCHEMY_DATABASE_URI"] == f"sqlite:///{tmp_path}/scheduler.db"
    assert values["SCHEDULER_BATCH_SIZE"] == 300
    assert values["SCHEDULER_POLL_INTERVAL"] == 1.0
    assert values["SCHEDULER_DEMO_JOBS"] is False
    assert values["SCHEDULER_MAX_SCHEDULES"] is None
    assert values["SCHEDULER_WEBHOOK_ALLOWED_HOSTS"] == []
    assert "SECRET_KEY" not in values and "SESSION_COOKIE_SECURE" not in values


def test_cookies_are_secure_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SESSION_COOKIE_SECURE", raising=False)
    production = {"SECRET_KEY": "k", "SQLALCHEMY_DATABASE_URI": "sqlite://"}
    assert create_app(production).config["SESSION_COOKIE_SECURE"] is True
    assert create_app(production).config["REMEMBER_COOKIE_SECURE"] is True
    monkeypatch.setenv("SESSION_COOKIE_SECURE", "0")
    assert create_app(production).config["SESSION_COOKIE_SECURE"] is False


def test_every_kind_of_setting_is_read_from_environment_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name, text in {
        "DATABASE_URL": "postgres://u@db/x",
        "SECRET_KEY": "from-the-environment",
        "SESSION_COOKIE_SECURE": "off",
        "SCHEDULER_BATCH_SIZE": " 50 ",
        "SCHEDULER_POLL_INTERVAL": "2.5",
        "SCHEDULER_SHUTDOWN_GRACE": "3",
        "SCHEDULER_DEMO_JOBS": "Yes",
        "SCHEDULER_JOB_MODULES": "acme.jobs, acme.more,",
        "SCHEDULER_WEBHOOK_ALLOWED_HOSTS": "a.example,b.example",
        "SCHEDULER_WEBHOOK_ALLOW_PRIVATE": "",
        "SCHEDULER_MAX_SCHEDULES": "",
        "SCHEDULER_MIN_INTERVAL": "300",
    }.items():
        monkeypatch.setenv(name, text)
    values = read(tmp_path)
    assert values["SQLALCHEMY_DATABASE_URI"] == "postgresql+psycopg://u@db/x"
    assert values["SECRET_KEY"] == "from-the-environment"
    assert values["SESSION_COOKIE_SECURE"] is False
    assert values["SCHEDULER_BATCH_SIZE"] == 50
    assert values["SCHEDULER_POLL_INTERVAL"] == 2.5
    assert values["SCHEDULER_SHUTDOWN_GRACE"] == 3.0
    assert values["SCHEDULER_DEMO_JOBS"] is True
    assert values["SCHEDULER_JOB_MODULES"] == ["acme.jobs", "acme.more"]
    assert values["SCHEDULER_WEBHOOK_ALLOWED_HOSTS"] == ["a.example", "b.example"]
    assert values["SCHEDULER_WEBHOOK_ALLOW_PRIVATE"] == []
    assert values["SCHEDULER_MAX_SCHEDULES"] is None  # empty: unlimited
    assert values["SCHEDULER_MIN_INTERVAL"] == 300
    assert values["SCHEDULER_LOCK_TTL"] == 60  # not set: the default


@pytest.mark.parametrize(
    ("name", "text", "kind"),
    [
        ("SCHEDULER_BATCH_SIZE", "many", "int"),
        ("SCHEDULER_BATCH_SIZE", "2.5", "int"),
        ("SCHEDULER_POLL_INTERVAL", "soon", "float"),
        ("SCHEDULER_DEMO_JOBS", "maybe", "bool"),
        ("SESSION_COOKIE_SECURE", "maybe", "bool"),
        ("SCHEDULER_MAX_SCHEDULES", "lots", "int"),
    ],
)
def test_a_malformed_setting_in_the_environment_names_the_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, text: str, kind: str
) -> None:
    monkeypatch.setenv(name, text)
    with pytest.raises(ConfigError) as bad:
        load_settings(str(tmp_path))
    assert str(bad.value) == f"{name}={text!r} is not a valid {kind}"


def test_the_environment_wins_over_a_bad_value_in_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "config.py").write_text("SCHEDULER_BATCH_SIZE = 'many'\n")
    monkeypatch.setenv("SCHEDULER_BATCH_SIZE", "7")
    assert read(tmp_path)["SCHEDULER_BATCH_SIZE"] == 7
    monkeypatch.setenv("SCHEDULER_BATCH_SIZE", "seven")
    with pytest.raises(ConfigError) as bad:
        load_settings(str(tmp_path))
    assert str(bad.value) == "SCHEDULER_BATCH_SIZE='seven' is not a valid int"


@pytest.mark.parametrize(
    ("digits", "written"),
    [
        ("0123456789", "ASCII"),
        ("\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669", "Arabic-Indic"),
        ("\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19", "fullwidth"),
    ],
)
def test_a_path_id_is_read_only_in_ascii_digits(
    app: Flask, world: World, digits: str, written: str
) -> None:
    schedule = make_schedule(world.alpha, "Nightly", by=world.alice, cron="0 0 * * *")
    path_id = "".join(digits[int(digit)] for digit in str(schedule.id))
    alice = Panel(app, world.alice)
    expected = 200 if written == "ASCII" else 404  # int() reads any of them as the same id
    assert alice.get(f"/schedules/{path_id}").status_code == expected
    assert alice.get(f"/schedules/{path_id}/edit").status_code == expected
    assert alice.get("/schedules/0").status_code == 404
    assert alice.get("/schedules/%2B1").status_code == 404  # "+1"


def test_timestamps_come_back_as_aware_utc(app: Flask, world: World) -> None:
    tenant = db.session.get(Tenant, world.alpha.id)
    assert tenant is not None
    created = tenant.created_at
    db.session.expire_all()
    reloaded = db.session.scalar(select(Tenant.created_at).where(Tenant.id == world.alpha.id))
    assert reloaded is not None and reloaded.tzinfo is not None
    assert reloaded.utcoffset() == timedelta(0)
    assert abs(reloaded - created) < timedelta(seconds=1)


def test_a_local_timestamp_is_stored_as_the_same_instant(app: Flask, world: World) -> None:
    local = datetime(2026, 3, 8, 3, 0, tzinfo=timezone(timedelta(hours=-4)))
    schedule = Schedule(
        tenant_id=world.alpha.id,
        key="k",
        name="n",
        job="demo.echo",
        cron="* * * * *",
        next_run_at=local,
    )
    db.session.add(schedule)
    db.session.commit()
    db.session.expire_all()
    stored = db.session.scalar(select(Schedule.next_run_at))
    assert stored == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)


FIRE = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_database_refuses_a_second_run_for_the_same_fire_time(app: Flask, world: World) -> None:
    schedule = Schedule(
        tenant_id=world.alpha.id, key="k", name="n", job="demo.echo", cron="* * * * *"
    )
    db.session.add(schedule)
    db.session.commit()
    make_run(schedule, trigger="schedule", scheduled_for=FIRE, idempotency_key="a")
    with pytest.raises(IntegrityError, match="scheduled_for"):
        make_run(schedule, trigger="catchup", scheduled_for=FIRE, idempotency_key="b")
    db.session.rollback()
    # Manual runs are outside the rule: two people may press Run now in the same second.
    for key in ("c", "d"):
        make_run(schedule, trigger="manual", scheduled_for=FIRE, idempotency_key=key)
    db.session.commit()
    assert len(db.session.scalars(select(Run)).all()) == 3


def test_schedule_keys_are_unique_per_tenant(app: Flask, world: World) -> None:
    for tenant in (world.alpha, world.beta):
        db.session.add(
            Schedule(
                tenant_id=tenant.id, key="nightly", name="n", job="demo.echo", cron="0 0 * * *"
            )
        )
    db.session.commit()
    db.session.add(
        Schedule(
            tenant_id=world.alpha.id, key="nightly", name="n", job="demo.echo", cron="0 0 * * *"
        )
    )
    with pytest.raises(IntegrityError):
        db.session.commit()


def test_system_schedule_keys_are_unique_too(app: Flask) -> None:
    for _ in range(2):
        db.session.add(
            Schedule(
                tenant_id=None,
                scope="system",
                key="prune",
                name="Prune",
                job="maintenance.prune_runs",
                cron="0 3 * * *",
            )
        )
    with pytest.raises(IntegrityError):
        db.session.commit()


def test_the_login_page_has_labelled_fields_and_security_headers(app: Flask) -> None:
    response = app.test_client().get("/login")
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    assert '<label for="email">Email</label>' in page
    assert '<label for="password">Password</label>' in page
    assert ">Log in</button>" in page
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"


def test_pages_need_a_login(app: Flask) -> None:
    response = app.test_client().get("/")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/login")


def test_a_user_logs_in_and_sees_their_tenant(app: Flask, world: World) -> None:
    client = app.test_client()
    response = log_in(client, "Alice@Example.com")
    assert response.status_code == 303
    home = client.get("/").get_data(as_text=True)
    assert "Alpha Corp" in home and "Beta Ltd" not in home


def test_a_wrong_password_gives_one_generic_message(app: Flask, world: World) -> None:
    for email in ("alice@example.com", "nobody@example.com"):
        response = log_in(app.test_client(), email, "wrong-password")
        assert response.status_code == 401
        assert "Wrong email or password." in response.get_data(as_text=True)


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/", "/\\evil.example"])
def test_next_never_leaves_the_site(app: Flask, world: World, target: str) -> None:
    response = log_in(app.test_client(), "alice@example.com", next_url=target)
    assert response.headers["Location"] == "/"


def test_login_without_csrf_token_is_refused(app: Flask, world: World) -> None:
    response = app.test_client().post(
        "/login", data={"email": "alice@example.com", "password": PASSWORD}
    )
    assert response.status_code == 400
