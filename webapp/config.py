"""Configuration read from the environment, with the defaults every setting falls back to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


class ConfigError(ValueError):
    """A setting in the environment has a value that cannot be used."""


def parse_setting(name: str, raw: str) -> Any:
    """Turns one environment value into the type its default has."""
    default = SCHEDULER_DEFAULTS[name]
    try:
        if name in INT_OR_NONE:
            return int(raw) if raw.strip() else None
        if isinstance(default, bool):
            word = raw.strip().lower()
            if word not in TRUE_WORDS | FALSE_WORDS:
                raise ValueError(raw)
            return word in TRUE_WORDS
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, list):
            return [item.strip() for item in raw.split(",") if item.strip()]
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a valid {type(default).__name__}") from None
    return raw


def trusted_proxies(settings: Mapping[str, Any]) -> int:
    """How many proxies in front of the app may set X-Forwarded-* (0: trust none)."""
    count = settings.get("SCHEDULER_TRUSTED_PROXIES", 0)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 10:
        raise ConfigError(f"SCHEDULER_TRUSTED_PROXIES={count!r} must be a number from 0 to 10")
    return count


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


def from_environment(environ: Mapping[str, str], instance_path: str) -> dict[str, Any]:
    """Builds the app's settings from the environment."""
    settings: dict[str, Any] = dict(SCHEDULER_DEFAULTS)
    for name in SCHEDULER_DEFAULTS:
        if name in environ:
            settings[name] = parse_setting(name, environ[name])
    database_url = environ.get("DATABASE_URL") or f"sqlite:///{instance_path}/scheduler.db"
    settings["SQLALCHEMY_DATABASE_URI"] = normalise_database_url(database_url)
    if "SESSION_COOKIE_SECURE" in environ:
        # Plain-http loopback set-ups (`make run`) turn it off; production keeps it on.
        settings["SESSION_COOKIE_SECURE"] = environ["SESSION_COOKIE_SECURE"].lower() in TRUE_WORDS
    if environ.get("SECRET_KEY"):
        settings["SECRET_KEY"] = environ["SECRET_KEY"]
    return settings


def normalise_database_url(url: str) -> str:
    """Points plain postgres:// URLs at psycopg 3, the driver we ship."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def is_secret_key_optional(settings: Mapping[str, Any]) -> bool:
    """A SECRET_KEY may be left out only where sessions need not survive: debug and tests."""
    return bool(settings.get("DEBUG") or settings.get("TESTING"))
