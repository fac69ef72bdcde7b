"""Configuration: the defaults, overridden by the instance folder's config.py, overridden by the
environment (the test mapping given to `create_app` overrides all three)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal

import click
from flask import Config
from pydantic import BeforeValidator, Field, Strict, ValidationError
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


def parse_flag(text: str) -> bool:
    word = text.strip().lower()
    if word not in TRUE_WORDS | FALSE_WORDS:
        raise ValueError(text)
    return word in TRUE_WORDS


def parse_limit(text: str) -> int | None:
    return int(text) if text.strip() else None


def parse_names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def from_text(parse: Callable[[str], Any]) -> BeforeValidator:
    """Reads text (every environment value, and text in the instance file) the README's way;
    other Python values are checked as they are. Text that `parse` refuses is left as it is,
    so that the type check refuses it, naming the type the setting takes."""

    def parsed(value: object) -> object:
        if isinstance(value, str):
            try:
                return parse(value)
            except ValueError:
                return value
        return value

    return BeforeValidator(parsed)


Int = Annotated[int, from_text(int)]
Number = Annotated[float, from_text(float)]
Flag = Annotated[bool, from_text(parse_flag)]
OptionalFlag = Annotated[bool | None, from_text(parse_flag)]
Limit = Annotated[int | None, from_text(parse_limit)]  # empty text: not limited
# Days of run history (SCHEDULER_RUN_RETENTION_DAYS and a tenant's own): a day to ten years.
RETENTION_DAYS_RANGE = (1, 3650)
RetentionDays = Annotated[
    int, from_text(int), Field(ge=RETENTION_DAYS_RANGE[0], le=RETENTION_DAYS_RANGE[1])
]
# Comma-separated text (not JSON); in the instance file a list or a tuple of strings.
Names = Annotated[list[str], NoDecode, Strict(False), from_text(parse_names)]


class Settings(BaseSettings):
    """Every setting read from the instance file and the environment, with its type and default
    (the README's Configuration section says what each means). Values given to the constructor
    (the instance file's) are overridden by the environment's."""

    # Strict: in the instance file `SCHEDULER_DEMO_JOBS = 1` is a mistake, not True.
    model_config = SettingsConfigDict(case_sensitive=True, strict=True)

    DATABASE_URL: str = ""  # empty: a SQLite file in the instance folder
    SECRET_KEY: str | bytes = ""
    # None: on, except in debug and tests. Plain-http loopback set-ups (`make run`) turn it off.
    SESSION_COOKIE_SECURE: OptionalFlag = None
    SCHEDULER_BATCH_SIZE: Int = 300
    SCHEDULER_POLL_INTERVAL: Number = 1.0
    # Seconds before its fire time that a fire is queued (0: at its time). Up to an hour.
    SCHEDULER_FIRE_AHEAD: Annotated[float, from_text(float), Field(ge=0, le=3600)] = 0.0
    SCHEDULER_LOCK_TTL: Int = 60
    SCHEDULER_SHUTDOWN_GRACE: Number = 30.0
    SCHEDULER_CONCURRENCY: Int = 4
    SCHEDULER_MISFIRE_GRACE: Number = 60.0
    SCHEDULER_RECOVERY_WINDOW: Int = 86400
    SCHEDULER_MAX_CATCHUP: Int = 100
    SCHEDULER_RUN_RETENTION_DAYS: RetentionDays = 90
    SCHEDULER_ROLLUP_RETENTION_DAYS: Int = 730  # the daily roll-ups of pruned runs: 2 years
    SCHEDULER_OUTPUT_LIMIT: Int = 65536
    SCHEDULER_DEMO_JOBS: Flag = False
    SCHEDULER_JOB_MODULES: Names = []
    SCHEDULER_MAX_SCHEDULES: Limit = None
    SCHEDULER_MIN_INTERVAL: Limit = None
    # The most runs of one tenant `running` at once across all workers (a tenant's own
    # `max_running` replaces it); empty: unlimited.
    SCHEDULER_MAX_RUNNING: Limit = None
    SCHEDULER_WEBHOOK_ALLOWED_HOSTS: Names = []
    SCHEDULER_WEBHOOK_ALLOW_PRIVATE: Names = []
    SCHEDULER_WEBHOOK_TIMEOUT: Number = 10.0
    SCHEDULER_TRUSTED_PROXIES: Int = 0
    SCHEDULER_MAX_REQUEST_BYTES: Int = 1024 * 1024
    # Every run copies its schedule's arguments: a fire a minute stores them 1,440 times a day.
    # 4 KiB holds any URL a server takes and a small JSON body; 16 KiB, four such fields.
    SCHEDULER_MAX_ARG_BYTES: Int = 4096
    SCHEDULER_MAX_ARGS_BYTES: Int = 16384
    SCHEDULER_SESSION_IDLE_TIMEOUT: Int = 8 * 3600
    SCHEDULER_SESSION_MAX_AGE: Int = 7 * 86400
    SCHEDULER_API_RATE_LIMIT: Int = 600  # requests per token per minute; 0: no limit
    # A schedule whose fire time passed this many seconds ago undispatched is overdue; so is a
    # queued run not started this long after it could have.
    SCHEDULER_OVERDUE_GRACE: Int = 300
    # A schedule sends at most one notification per window (seconds); the others are recorded
    # as suppressed.
    SCHEDULER_NOTIFY_WINDOW: Int = 3600
    SCHEDULER_SMTP_HOST: str = ""  # empty: email notifications are not sent (recorded failed)
    SCHEDULER_SMTP_PORT: Int = 25
    SCHEDULER_SMTP_USERNAME: str = ""
    SCHEDULER_SMTP_PASSWORD: str = ""
    SCHEDULER_SMTP_FROM: str = "scheduler@localhost"
    SCHEDULER_SMTP_SECURITY: Literal["none", "starttls", "ssl"] = "none"
    # The panel's address as users reach it, for links in notifications ("" : no links).
    SCHEDULER_BASE_URL: str = ""
    # The bearer token /metrics asks for; empty: /metrics answers 404.
    SCHEDULER_METRICS_TOKEN: str = ""
    SCHEDULER_LOG_FORMAT: Literal["keyvalue", "json"] = "keyvalue"
    # Where leased runs execute: this worker's job pool, or a Celery fleet (README, Celery
    # execution); "celery" needs the broker's URL.
    SCHEDULER_EXECUTOR: Literal["pool", "celery"] = "pool"
    SCHEDULER_CELERY_BROKER_URL: str = ""
    SCHEDULER_CELERY_QUEUE: str = "scheduler"
    # Runs a worker has sent to Celery that no Celery worker has started yet, at most.
    SCHEDULER_CELERY_MAX_IN_FLIGHT: Int = 1000

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The environment over the instance file (passed to the constructor); no .env file."""
        return env_settings, init_settings

    def flask_config(self, instance_path: str) -> dict[str, Any]:
        """The settings as Flask takes them: the database URL for SQLAlchemy, the secret key and
        the cookie flag only where set, every SCHEDULER_* setting."""
        config: dict[str, Any] = {
            "SQLALCHEMY_DATABASE_URI": normalise_database_url(self.DATABASE_URL)
            if self.DATABASE_URL
            else f"sqlite:///{instance_path}/scheduler.db"
        }
        if self.SECRET_KEY:
            config["SECRET_KEY"] = self.SECRET_KEY
        if self.SESSION_COOKIE_SECURE is not None:
            config["SESSION_COOKIE_SECURE"] = self.SESSION_COOKIE_SECURE
        config.update(self.model_dump(include=SCHEDULER_SETTINGS))
        return config


SCHEDULER_SETTINGS = {name for name in Settings.model_fields if name.startswith("SCHEDULER_")}
# How messages name the type a value failed to be (pydantic's error type -> the README's word).
KINDS = {
    "int_type": "int",
    "float_type": "float",
    "bool_type": "bool",
    "list_type": "list",
    "string_type": "str",
}


class ConfigError(click.ClickException, ValueError):
    """A setting that is missing or has a value that cannot be used.

    A ClickException, so that `flask --app webapp ...` and `scheduler-worker`, which build the
    app inside click, report it as one line on stderr (exit 1) instead of a traceback.
    """


INSTANCE_FILE = "config.py"


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
        value = settings.get(name, Settings.model_fields[name].default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}={value!r} must be a whole number of bytes above zero")
        limits.append(value)
    return limits[0], limits[1]


def default_max_running(settings: Mapping[str, Any]) -> int | None:
    """SCHEDULER_MAX_RUNNING: the cap on a tenant's runs running at once where the tenant has
    none of its own; None (unset or empty): no cap. A cap below 1 would stop every tenant."""
    value = settings.get("SCHEDULER_MAX_RUNNING")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"SCHEDULER_MAX_RUNNING={value!r} must be a whole number of runs from 1, "
            "or empty for no cap"
        )
    return value


def overdue_grace(settings: Mapping[str, Any]) -> timedelta:
    """SCHEDULER_OVERDUE_GRACE as a duration (the default where the setting is missing)."""
    name = "SCHEDULER_OVERDUE_GRACE"
    return timedelta(seconds=settings.get(name, Settings.model_fields[name].default))


def lock_ttl(settings: Mapping[str, Any]) -> timedelta:
    """SCHEDULER_LOCK_TTL as a duration: how long a lease lasts unless renewed (the default where
    the setting is missing)."""
    name = "SCHEDULER_LOCK_TTL"
    return timedelta(seconds=float(settings.get(name, Settings.model_fields[name].default)))


def uses_celery(settings: Mapping[str, Any]) -> bool:
    """Whether runs are sent to a Celery fleet (SCHEDULER_EXECUTOR=celery), checked with the
    settings that need: the broker, a queue, an in-flight limit above zero."""
    if settings.get("SCHEDULER_EXECUTOR", "pool") != "celery":
        return False
    if not settings.get("SCHEDULER_CELERY_BROKER_URL"):
        raise ConfigError(
            "SCHEDULER_EXECUTOR=celery needs SCHEDULER_CELERY_BROKER_URL "
            "(the Celery broker, e.g. redis://localhost:6379/0)"
        )
    if not settings.get(
        "SCHEDULER_CELERY_QUEUE", Settings.model_fields["SCHEDULER_CELERY_QUEUE"].default
    ):
        raise ConfigError("SCHEDULER_CELERY_QUEUE must name a queue")
    limit = settings.get("SCHEDULER_CELERY_MAX_IN_FLIGHT", 1)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"SCHEDULER_CELERY_MAX_IN_FLIGHT={limit!r} must be a number above 0")
    return True


def load_settings(instance_path: str) -> dict[str, Any]:
    """The Flask settings from the defaults, the instance folder's config.py and the
    environment, the later winning. A value that cannot be used is a ConfigError naming the
    setting, and the file if it was written there.

    The file (`make run` writes one) uses the environment's names as Python values; its other
    upper-case names are passed to Flask as they are.
    """
    path = os.path.join(instance_path, INSTANCE_FILE)
    written = Config(instance_path)
    try:
        written.from_pyfile(path, silent=True)
    except Exception as error:  # the operator's Python: a syntax error, a failing import
        raise ConfigError(f"cannot read {path}: {type(error).__name__}: {error}") from None
    ours = {name: value for name, value in written.items() if name in Settings.model_fields}
    try:
        settings = Settings(**ours)
    except ValidationError as error:
        raise refused(error, ours, path) from None
    passed_on = {name: value for name, value in written.items() if name not in ours}
    return {**passed_on, **settings.flask_config(instance_path)}


def refused(error: ValidationError, written: Mapping[str, Any], path: str) -> ConfigError:
    """One line naming the first refused setting, its value as written, and where."""
    problem = error.errors()[0]
    name = str(problem["loc"][0])
    # The environment wins over the file, so a value it sets is the one that was refused.
    if name in os.environ:
        value, where = os.environ[name], ""
    else:
        value, where = written[name], f" (in {path})"
    context = problem.get("ctx", {})
    if problem["type"] in ("greater_than_equal", "less_than_equal"):
        field = Settings.model_fields[name]
        low, high = (
            next(getattr(rule, bound) for rule in field.metadata if hasattr(rule, bound))
            for bound in ("ge", "le")
        )
        return ConfigError(f"{name}={value!r} must be from {low} to {high}{where}")
    if problem["type"] == "literal_error":
        return ConfigError(f"{name}={value!r} must be one of {context['expected']}{where}")
    in_a_list = isinstance(problem["loc"][-1], int)  # the position of an item that is no str
    kind = "list of str" if in_a_list else KINDS.get(problem["type"], "value")
    return ConfigError(f"{name}={value!r} is not a valid {kind}{where}")


def normalise_database_url(url: str) -> str:
    """Points plain postgres:// URLs at psycopg 3, the driver we ship."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def is_secret_key_optional(settings: Mapping[str, Any]) -> bool:
    """A SECRET_KEY may be left out only where sessions need not survive: debug and tests."""
    return bool(settings.get("DEBUG") or settings.get("TESTING"))
