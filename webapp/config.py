"""Configuration: the defaults, overridden by the instance folder's config.py, overridden by the
environment (the test mapping given to `create_app` overrides all three)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import click
from flask import Config

# Each SCHEDULER_* setting with its default; the type of the default says how the environment
# value is parsed. None means "not limited" for the quotas.
SCHEDULER_DEFAULTS: dict[str, Any] = {
    "SCHEDULER_BATCH_SIZE": 300,
    "SCHEDULER_POLL_INTERVAL": 1.0,
    "SCHEDULER_LOCK_TTL": 60,
    "SCHEDULER_SHUTDOWN_GRACE": 30.0,
    "SCHEDULER_CONCURRENCY": 4,
    "SCHEDULER_MISFIRE_GRACE": 60.0,
    "SCHEDULER_RECOVERY_WINDOW": 86400,
    "SCHEDULER_MAX_CATCHUP": 100,
    "SCHEDULER_RUN_RETENTION_DAYS": 90,
    "SCHEDULER_OUTPUT_LIMIT": 65536,
    "SCHEDULER_DEMO_JOBS": False,
    "SCHEDULER_JOB_MODULES": [],
    "SCHEDULER_MAX_SCHEDULES": None,
    "SCHEDULER_MIN_INTERVAL": None,
    "SCHEDULER_WEBHOOK_ALLOWED_HOSTS": [],
    "SCHEDULER_WEBHOOK_ALLOW_PRIVATE": [],
    "SCHEDULER_WEBHOOK_TIMEOUT": 10.0,
    "SCHEDULER_TRUSTED_PROXIES": 0,
    "SCHEDULER_MAX_REQUEST_BYTES": 1024 * 1024,
    # Every run copies its schedule's arguments: a fire a minute stores them 1,440 times a day.
    # 4 KiB holds any URL a server takes and a small JSON body; 16 KiB, four such fields.
    "SCHEDULER_MAX_ARG_BYTES": 4096,
    "SCHEDULER_MAX_ARGS_BYTES": 16384,
    "SCHEDULER_SESSION_IDLE_TIMEOUT": 8 * 3600,
    "SCHEDULER_SESSION_MAX_AGE": 7 * 86400,
}

INT_OR_NONE = {"SCHEDULER_MAX_SCHEDULES", "SCHEDULER_MIN_INTERVAL"}
TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


class ConfigError(click.ClickException, ValueError):
    """A setting that is missing or has a value that cannot be used.

    A ClickException, so that `flask --app webapp ...` and `scheduler-worker`, which build the
    app inside click, report it as one line on stderr (exit 1) instead of a traceback.
    """


INSTANCE_FILE = "config.py"
# Read from the instance file and the environment besides the SCHEDULER_* settings.
OTHER_SETTINGS = ("DATABASE_URL", "SECRET_KEY", "SESSION_COOKIE_SECURE")


def parse_setting(name: str, raw: str, where: str = "") -> Any:
    """Turns one text value into the type its default has."""
    default = SCHEDULER_DEFAULTS[name]
    try:
        if name in INT_OR_NONE:
            return int(raw) if raw.strip() else None
        if isinstance(default, bool):
            return parse_flag(raw)
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, list):
            return [item.strip() for item in raw.split(",") if item.strip()]
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a valid {kind(name)}{where}") from None
    return raw


def trusted_proxies(settings: Mapping[str, Any]) -> int:
    """How many proxies in front of the app may set X-Forwarded-* (0: trust none)."""
    count = settings.get("SCHEDULER_TRUSTED_PROXIES", 0)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 10:
        raise ConfigError(f"SCHEDULER_TRUSTED_PROXIES={count!r} must be a number from 0 to 10")
    return count


def parse_flag(raw: str) -> bool:
    word = raw.strip().lower()
    if word not in TRUE_WORDS | FALSE_WORDS:
        raise ValueError(raw)
    return word in TRUE_WORDS


def kind(name: str) -> str:
    return "int" if name in INT_OR_NONE else type(SCHEDULER_DEFAULTS[name]).__name__


def check_value(name: str, value: object, where: str) -> Any:
    """A value written in Python (the instance file): text is parsed, other types checked."""
    if isinstance(value, str):
        return parse_setting(name, value, where)
    default = SCHEDULER_DEFAULTS[name]
    if name in INT_OR_NONE:
        valid = value is None or (isinstance(value, int) and not isinstance(value, bool))
    elif isinstance(default, bool):
        valid = isinstance(value, bool)
    elif isinstance(default, int):
        valid = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        valid = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        valid = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        if valid:
            return list(value)  # type: ignore[call-overload]
    if not valid:
        raise ConfigError(f"{name}={value!r} is not a valid {kind(name)}{where}")
    return value


def args_limits(settings: Mapping[str, Any]) -> tuple[int, int]:
    """The most UTF-8 bytes of one text argument and of all of a schedule's arguments as JSON
    (SCHEDULER_MAX_ARG_BYTES, SCHEDULER_MAX_ARGS_BYTES); the defaults where a setting is
    missing."""
    limits = []
    for name in ("SCHEDULER_MAX_ARG_BYTES", "SCHEDULER_MAX_ARGS_BYTES"):
        value = settings.get(name, SCHEDULER_DEFAULTS[name])
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}={value!r} must be a whole number of bytes above zero")
        limits.append(value)
    return limits[0], limits[1]


def default_settings(instance_path: str) -> dict[str, Any]:
    """Every setting's default; the database is a SQLite file in the instance folder."""
    return {
        **SCHEDULER_DEFAULTS,
        "SQLALCHEMY_DATABASE_URI": f"sqlite:///{instance_path}/scheduler.db",
    }


def read_settings(source: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """The settings that `source` sets (the environment, or the instance file's names), parsed.

    `where` is appended to error messages (" in /srv/instance/config.py").
    """
    settings: dict[str, Any] = {}
    for name in SCHEDULER_DEFAULTS:
        if name in source:
            settings[name] = check_value(name, source[name], where)
    if source.get("DATABASE_URL"):
        settings["SQLALCHEMY_DATABASE_URI"] = normalise_database_url(str(source["DATABASE_URL"]))
    if "SESSION_COOKIE_SECURE" in source:
        # Plain-http loopback set-ups (`make run`) turn it off; production keeps it on.
        value = source["SESSION_COOKIE_SECURE"]
        try:
            settings["SESSION_COOKIE_SECURE"] = (
                value if isinstance(value, bool) else parse_flag(str(value))
            )
        except ValueError:
            message = f"SESSION_COOKIE_SECURE={value!r} is not a valid bool{where}"
            raise ConfigError(message) from None
    if source.get("SECRET_KEY"):
        settings["SECRET_KEY"] = source["SECRET_KEY"]
    return settings


def from_environment(environ: Mapping[str, str], instance_path: str) -> dict[str, Any]:
    """The defaults overridden by the environment (without the instance file)."""
    return {**default_settings(instance_path), **read_settings(environ)}


def from_instance_file(instance_path: str) -> dict[str, Any]:
    """The settings in the instance folder's config.py (`make run` writes one), if it exists.

    It uses the environment's names (SECRET_KEY, DATABASE_URL, SCHEDULER_*), as Python values;
    other upper-case names are passed to Flask as they are.
    """
    path = os.path.join(instance_path, INSTANCE_FILE)
    loaded = Config(instance_path)
    try:
        loaded.from_pyfile(path, silent=True)
    except Exception as error:  # the operator's Python: a syntax error, a failing import
        raise ConfigError(f"cannot read {path}: {type(error).__name__}: {error}") from None
    passed_on = {
        name: value
        for name, value in loaded.items()
        if name not in SCHEDULER_DEFAULTS and name not in OTHER_SETTINGS
    }
    return {**passed_on, **read_settings(loaded, f" (in {path})")}


def normalise_database_url(url: str) -> str:
    """Points plain postgres:// URLs at psycopg 3, the driver we ship."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def is_secret_key_optional(settings: Mapping[str, Any]) -> bool:
    """A SECRET_KEY may be left out only where sessions need not survive: debug and tests."""
    return bool(settings.get("DEBUG") or settings.get("TESTING"))
