"""Configuration: the defaults, overridden by the instance folder's config.py, overridden by the
environment (the test mapping given to `create_app` overrides all three)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from flask import Config, Flask, current_app
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    model_validator,
)
from sqlalchemy.engine import make_url

from webapp.models import MAX_NOTIFY_EMAILS, ROLES, Role

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
    """Reads text (every environment value, and text in the instance file) as the settings
    reference says; other Python values are checked as they are. Text that `parse` refuses is
    left as it is, so that the type check refuses it, naming the type the setting takes."""

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
Positive = Annotated[int, from_text(int), Field(gt=0)]
# Days of run history (SCHEDULER_RUN_RETENTION_DAYS and a tenant's own): a day to ten years.
RETENTION_DAYS_RANGE = (1, 3650)
RetentionDays = Annotated[
    int, from_text(int), Field(ge=RETENTION_DAYS_RANGE[0], le=RETENTION_DAYS_RANGE[1])
]
# Comma-separated text (not JSON); in the instance file a list or a tuple of strings.
Names = Annotated[list[str], Strict(False), from_text(parse_names)]
# An origin as CSP's frame-ancestors takes it: a scheme, a host (a name, an IPv4 address or an
# IPv6 one in brackets) and an optional port; nothing else.
ORIGIN = re.compile(r"https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


class Settings(BaseModel):
    """Every setting read from the instance file and the environment, with its type, default,
    bounds and meaning (the docstring under it), validated once by
    load_settings; the code reads this object (`settings()`), never the Flask config's
    strings."""

    # Strict: in the instance file `SCHEDULER_DEMO_JOBS = 1` is a mistake, not True.
    model_config = ConfigDict(strict=True, frozen=True, use_attribute_docstrings=True)

    DATABASE_URL: str = ""
    """SQLite file or `postgresql://user:pass@host/db` (psycopg 3 is used for `postgres://` and
    `postgresql://` URLs)."""
    SCHEDULER_DATABASE_POOLER: Literal["none", "pgbouncer"] = "none"
    """`pgbouncer`: `DATABASE_URL` goes through PgBouncer in transaction pooling mode, so no
    prepared statements and no LISTEN on it (see "Behind PgBouncer" in the deployment guide)."""
    SCHEDULER_LISTEN_DATABASE_URL: str = ""
    """PostgreSQL: a URL straight to the server, where workers LISTEN for wake-ups; empty: they
    LISTEN on `DATABASE_URL`, or, with `SCHEDULER_DATABASE_POOLER=pgbouncer`, nowhere (they
    poll)."""
    SECRET_KEY: str | bytes = ""
    """Signs sessions and CSRF tokens. Required outside debug and tests; `make run` generates one
    into `instance/config.py`."""
    SECRET_KEY_FALLBACKS: Names = []
    """Comma-separated keys `SECRET_KEY` had before: sessions signed and two-factor secrets sealed
    with them stay readable after a rotation (Two-factor login)."""
    SESSION_COOKIE_SECURE: OptionalFlag = None
    """Cookies only over HTTPS. Not set: on, except in debug and tests; `make run` turns it off
    because it serves plain HTTP on loopback."""
    SCHEDULER_BATCH_SIZE: Int = 300
    """Schedules claimed per tick transaction."""
    SCHEDULER_POLL_INTERVAL: Number = 1.0
    """Seconds a worker sleeps at most between ticks."""
    SCHEDULER_FIRE_AHEAD: Annotated[float, from_text(float), Field(ge=0, le=3600)] = 0.0
    """Seconds before its fire time that a fire is queued (0 to 3600; see Fire ahead)."""
    SCHEDULER_LOCK_TTL: Positive = 60
    """Seconds a running job's lease lasts before another worker may take it over."""
    SCHEDULER_SHUTDOWN_GRACE: Number = 30.0
    """Seconds running jobs get to finish after SIGTERM."""
    SCHEDULER_CONCURRENCY: Int = 4
    """Jobs one worker runs at once (`--concurrency` overrides)."""
    SCHEDULER_WEB_THREADS: Annotated[int, from_text(int), Field(ge=1, le=256)] = 2
    """gunicorn's threads per process (set it in the environment: `gunicorn.conf.py` reads it
    there); on PostgreSQL each process's database pool keeps at least this many connections, one per
    request in flight (1-256)."""
    SCHEDULER_MISFIRE_GRACE: Number = 60.0
    """Seconds after its fire time that a fire still counts as on time (older ones are *missed* and
    follow the misfire policy)."""
    SCHEDULER_RECOVERY_WINDOW: Int = 86400
    """Seconds back that `fire_all` catches up after downtime."""
    SCHEDULER_MAX_CATCHUP: Int = 100
    """Most runs `fire_all` enqueues for one schedule after downtime."""
    SCHEDULER_RUN_RETENTION_DAYS: RetentionDays = 90
    """Run history kept by `maintenance.prune_runs`."""
    SCHEDULER_ROLLUP_RETENTION_DAYS: Int = 730
    """Days the daily roll-ups of pruned runs (a schedule's charts and statistics beyond the run
    history) are kept before `maintenance.prune_runs` deletes them (730: two years)."""
    SCHEDULER_OUTPUT_LIMIT: Int = 65536
    """Bytes of job output kept per run."""
    SCHEDULER_DEMO_JOBS: Flag = False
    """`1` registers the `demo.*` jobs (the demo and the tests)."""
    SCHEDULER_JOB_MODULES: Names = []
    """Comma-separated modules that register the operator's jobs."""
    SCHEDULER_MAX_SCHEDULES: Limit = None
    """Default per-tenant schedule quota."""
    SCHEDULER_MIN_INTERVAL: Limit = None
    """Default per-tenant minimum seconds between fires."""
    SCHEDULER_MAX_RUNNING: Annotated[Annotated[int, Field(ge=1)] | None, from_text(parse_limit)] = (
        None
    )
    """Default per-tenant cap on runs running at once, across all workers (see Fairness)."""
    SCHEDULER_WEBHOOK_ALLOWED_HOSTS: Names = []
    """Comma-separated hosts a webhook may call: exact names (`hooks.example.com`) or
    `*.example.com` for any subdomain. Empty: no webhook can run."""
    SCHEDULER_WEBHOOK_ALLOW_PRIVATE: Names = []
    """Allowed hosts (exact names only) that may resolve to loopback, private, link-local or other
    non-public addresses. Every other host is refused if any of its addresses is not public."""
    SCHEDULER_WEBHOOK_TIMEOUT: Annotated[float, from_text(float), Field(gt=0)] = 10.0
    """Seconds the whole request may take: connecting, sending and reading the answer (DNS aside). A
    server that answers a byte at a time is cut off at this deadline (`timed out after 10 s`), and
    the attempt is retried."""
    SCHEDULER_TRUSTED_PROXIES: Annotated[int, from_text(int), Field(ge=0, le=10)] = 0
    """Reverse proxies in front of the panel (0 to 10): the client address, scheme and host are read
    from that many `X-Forwarded-*` entries. 0 trusts none, so a client cannot choose its own
    address."""
    SCHEDULER_MAX_REQUEST_BYTES: Int = 1024 * 1024
    """Largest request body the panel reads; a larger one answers 413 before it is read."""
    SCHEDULER_MAX_ARG_BYTES: Positive = 4096
    """Most UTF-8 bytes of one text argument of a schedule (any URL a server takes, a small JSON
    body)."""
    SCHEDULER_MAX_ARGS_BYTES: Positive = 16384
    """Most bytes of all of a schedule's arguments as JSON: every run stores a copy, 1,440 a day at
    `* * * * *`."""
    SCHEDULER_SESSION_IDLE_TIMEOUT: Positive = 8 * 3600
    """Seconds without a request after which a login ends (8 hours)."""
    SCHEDULER_SESSION_MAX_AGE: Positive = 7 * 86400
    """Seconds after which a login ends however active (7 days)."""
    SCHEDULER_API_RATE_LIMIT: Int = 600
    """Requests one API token may send per minute; more answer 429 with `Retry-After` (0: no
    limit)."""
    SCHEDULER_MAX_TOKENS: Positive = 100
    """Active (neither revoked nor expired) API tokens a tenant may hold; the panel and `token
    create` refuse another, saying so, until one is revoked."""
    SCHEDULER_OVERDUE_GRACE: Int = 300
    """Seconds after its fire time that an undispatched schedule, or a run that could start and has
    not (queued, or sent to Celery and not taken), counts as overdue (the panel, `/metrics`,
    `scheduler health`)."""
    SCHEDULER_NOTIFY_WINDOW: Int = 3600
    """Seconds in which a schedule sends at most one notification, and at most one `paused`
    notification; the others are recorded as suppressed (0: no window)."""
    SCHEDULER_NOTIFY_MAX_PER_HOUR: Annotated[int, from_text(int), Field(ge=1, le=100_000)] = 100
    """Notifications (one per recipient) a tenant sends at most in each UTC clock hour, 1 to 100000;
    the others are recorded as suppressed and counted in one digest at the hour's end (see
    Notifications)."""
    SCHEDULER_NOTIFY_MAX_RECIPIENTS: Annotated[
        int, from_text(int), Field(ge=1, le=MAX_NOTIFY_EMAILS)
    ] = 5
    """Email addresses a schedule, or a tenant's defaults, may name, 1 to 20 (besides one webhook
    URL); more are refused at save, next to the field."""
    SCHEDULER_SMTP_HOST: str = ""
    """Mail server for email notifications; empty: none is sent (each is recorded failed,
    `SCHEDULER_SMTP_HOST is not set`)."""
    SCHEDULER_SMTP_PORT: Int = 25
    """Its port (465 for `ssl`, 587 for `starttls` as a rule)."""
    SCHEDULER_SMTP_USERNAME: str = ""
    """Logs in with this name and `SCHEDULER_SMTP_PASSWORD` when set."""
    SCHEDULER_SMTP_PASSWORD: str = ""
    """The login's password (never logged)."""
    SCHEDULER_SMTP_FROM: str = "scheduler@localhost"
    """The notifications' `From`; its domain ends their `Message-ID`."""
    SCHEDULER_SMTP_SECURITY: Literal["none", "starttls", "ssl"] = "none"
    """`none`, `starttls` (upgrade a plain connection) or `ssl` (TLS from the start); the
    certificate is verified."""
    SCHEDULER_BASE_URL: str = ""
    """The panel's address as users reach it (`https://cron.example.com`), for the links in
    notifications (empty: no links) and sign-in links (empty: the address the API request came
    to)."""
    SCHEDULER_SIGN_IN_LINK_TTL: Annotated[int, from_text(int), Field(ge=1, le=3600)] = 60
    """Seconds a one-time sign-in link works after it is made (1 to 3600; see Embed it in your
    product)."""
    SCHEDULER_RETURN_URL_HOSTS: Names = []
    """Hosts a sign-in link's `return_url` may point to (the header's "Back to <host>"); empty: no
    return URL is accepted."""
    SCHEDULER_FRAME_ANCESTORS: Names = []
    """Origins (`https://app.example.com`, comma-separated) whose pages may show the panel in a
    frame; its cookies are then `SameSite=None; Secure; Partitioned`. Empty: no site may
    (`frame-ancestors 'none'`)."""
    SCHEDULER_METRICS_TOKEN: str = ""
    """The bearer token `/metrics` asks for; empty: `/metrics` answers 404."""
    SCHEDULER_LOG_FORMAT: Literal["keyvalue", "json"] = "keyvalue"
    """The worker's log lines: `keyvalue` (`action=... run_id=...`) or `json` (one per line)."""
    SCHEDULER_LOG_LEVEL: Literal["DEBUG", "INFO", "WARNING"] = "INFO"
    """The worker's least log level: `INFO` (successes one line per batch), `DEBUG` (a line
    per run leased, started, succeeded and per fire) or `WARNING` (only what went wrong)."""
    SCHEDULER_LIVENESS_FILE: str = ""
    """A file the worker touches at each turn of its loop, for the probe `scheduler alive`."""
    SCHEDULER_EXECUTOR: Literal["pool", "celery"] = "pool"
    """Where leased runs execute: `pool` (the worker's own job pool) or `celery` (sent to a Celery
    fleet; see Celery execution)."""
    SCHEDULER_CELERY_BROKER_URL: str = ""
    """The Celery broker, e.g. `redis://localhost:6379/0`; needed with
    `SCHEDULER_EXECUTOR=celery`."""
    SCHEDULER_CELERY_QUEUE: Annotated[str, Field(min_length=1)] = "scheduler"
    """The Celery queue runs are sent to and the fleet consumes."""
    SCHEDULER_CELERY_MAX_IN_FLIGHT: Positive = 1000
    """Runs one worker has sent to Celery that no Celery worker has started yet, at most."""
    SCHEDULER_OIDC_ISSUER: str = ""
    """Single sign-on: the OpenID Connect provider's issuer URL, exactly as its discovery document
    names it (`https://`, or `http://` on localhost); empty: no single sign-on (Single sign-on)."""
    SCHEDULER_OIDC_CLIENT_ID: str = ""
    """The panel's client id at the provider (needed with the issuer)."""
    SCHEDULER_OIDC_CLIENT_SECRET: str = ""
    """Its client secret (needed with the issuer; never logged)."""
    SCHEDULER_OIDC_NAME: str = ""
    """The provider's name on the login page's button, "Sign in with *name*"; empty: "Sign in with
    single sign-on"."""
    SCHEDULER_OIDC_CREATE_USERS: str = ""
    """`TENANT:ROLE` (`acme:viewer`): a verified email without an account here gets one, in that
    tenant with that role; empty: single sign-on never creates users."""

    @model_validator(mode="after")
    def listen_on_postgresql(self) -> Self:
        url = self.SCHEDULER_LISTEN_DATABASE_URL
        if url and not normalise_database_url(url).startswith("postgresql+psycopg://"):
            raise ValueError(
                "SCHEDULER_LISTEN_DATABASE_URL must be a PostgreSQL URL "
                "(postgresql://user:pass@host/db), straight to the server"
            )
        return self

    @model_validator(mode="after")
    def celery_needs_its_broker(self) -> Self:
        if self.SCHEDULER_EXECUTOR == "celery" and not self.SCHEDULER_CELERY_BROKER_URL:
            raise ValueError(
                "SCHEDULER_EXECUTOR=celery needs SCHEDULER_CELERY_BROKER_URL "
                "(the Celery broker, e.g. redis://localhost:6379/0)"
            )
        return self

    @model_validator(mode="after")
    def frame_ancestors_are_origins(self) -> Self:
        for origin in self.SCHEDULER_FRAME_ANCESTORS:
            if not ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"SCHEDULER_FRAME_ANCESTORS: {origin!r} is not an origin: write "
                    "scheme://host[:port] (https://app.example.com), no path, no wildcard"
                )
        if self.SCHEDULER_FRAME_ANCESTORS and self.SESSION_COOKIE_SECURE is False:
            raise ValueError(
                "SCHEDULER_FRAME_ANCESTORS needs SESSION_COOKIE_SECURE on: a framed panel's "
                "cookies are SameSite=None, which browsers take only with Secure (over https, "
                "or from http://localhost and http://127.0.0.1)"
            )
        return self

    @model_validator(mode="after")
    def single_sign_on_complete(self) -> Self:
        given = [name for name in OIDC_CLIENT if getattr(self, name)]
        if given and len(given) < len(OIDC_CLIENT):
            missing = " and ".join(name for name in OIDC_CLIENT if name not in given)
            raise ValueError(
                f"single sign-on needs {', '.join(OIDC_CLIENT)}: {missing} not set "
                "(docs/how-to/sign-in.md, Single sign-on)"
            )
        if self.SCHEDULER_OIDC_ISSUER:
            problem = issuer_problem(self.SCHEDULER_OIDC_ISSUER)
            if problem:
                raise ValueError(f"SCHEDULER_OIDC_ISSUER={self.SCHEDULER_OIDC_ISSUER!r} {problem}")
        if self.SCHEDULER_OIDC_CREATE_USERS:
            if not self.SCHEDULER_OIDC_ISSUER:
                raise ValueError("SCHEDULER_OIDC_CREATE_USERS needs SCHEDULER_OIDC_ISSUER")
            new_users_of(self.SCHEDULER_OIDC_CREATE_USERS)
        return self

    # What the code reads: typed values, derived once from the settings above.

    @property
    def framed(self) -> bool:
        """Whether other sites' pages may show the panel in a frame (SCHEDULER_FRAME_ANCESTORS)."""
        return bool(self.SCHEDULER_FRAME_ANCESTORS)

    @property
    def single_sign_on(self) -> bool:
        """Whether the login offers single sign-on (SCHEDULER_OIDC_ISSUER and its client)."""
        return bool(self.SCHEDULER_OIDC_ISSUER)

    @property
    def sso_provider(self) -> str:
        """The provider's name on the login button: "Sign in with <name>"."""
        return self.SCHEDULER_OIDC_NAME or "single sign-on"

    @property
    def oidc_new_users(self) -> tuple[str, Role] | None:
        """The tenant's slug and the role of users single sign-on creates, or None: it creates
        none (SCHEDULER_OIDC_CREATE_USERS)."""
        return new_users_of(self.SCHEDULER_OIDC_CREATE_USERS)

    @property
    def lock_ttl(self) -> timedelta:
        return timedelta(seconds=self.SCHEDULER_LOCK_TTL)

    @property
    def overdue_grace(self) -> timedelta:
        return timedelta(seconds=self.SCHEDULER_OVERDUE_GRACE)

    @property
    def args_limits(self) -> tuple[int, int]:
        """The most UTF-8 bytes of one text argument and of all of a schedule's arguments as
        JSON (SCHEDULER_MAX_ARG_BYTES, SCHEDULER_MAX_ARGS_BYTES)."""
        return self.SCHEDULER_MAX_ARG_BYTES, self.SCHEDULER_MAX_ARGS_BYTES

    @property
    def uses_celery(self) -> bool:
        """Whether runs are sent to a Celery fleet (SCHEDULER_EXECUTOR=celery)."""
        return self.SCHEDULER_EXECUTOR == "celery"

    def job_settings(self) -> Mapping[str, object]:
        """What a job receives as ctx.config and a job's parameters are checked with: the
        settings of JOB_SETTINGS, read-only. Never SECRET_KEY, the database URL or anything
        else of the app's."""
        return MappingProxyType({name: getattr(self, name) for name in JOB_SETTINGS})

    @property
    def pooled(self) -> bool:
        """Whether DATABASE_URL goes through a transaction pooler (SCHEDULER_DATABASE_POOLER)."""
        return self.SCHEDULER_DATABASE_POOLER != "none"

    def listen_url(self, database_url: str) -> str | None:
        """The libpq URL a PostgreSQL worker LISTENs on: SCHEDULER_LISTEN_DATABASE_URL, else
        the engine's `database_url` unless it is pooled (a transaction pooler hands each
        statement to any server connection, so a LISTEN through it hears nothing): None, the
        worker polls every SCHEDULER_POLL_INTERVAL."""
        if not self.SCHEDULER_LISTEN_DATABASE_URL and self.pooled:
            return None
        url = make_url(normalise_database_url(self.SCHEDULER_LISTEN_DATABASE_URL or database_url))
        return url.set(drivername="postgresql").render_as_string(hide_password=False)

    def engine_options(self, url: str) -> dict[str, Any]:
        """SQLAlchemy's engine for `url`: a connection is checked before use (a restarted
        server); on PostgreSQL the pool keeps one for each of the process's request threads (a
        request takes one), or SQLAlchemy's 5 if more, and behind a transaction pooler psycopg
        prepares no statement (a prepared statement lives on one server connection, and the
        pooler hands the next transaction to any). SQLite's pools are Flask-SQLAlchemy's."""
        if url.startswith("sqlite"):
            return {"pool_pre_ping": True}
        options: dict[str, Any] = {
            "pool_pre_ping": True,
            "pool_size": max(5, self.SCHEDULER_WEB_THREADS),
        }
        if self.pooled:
            options["connect_args"] = {"prepare_threshold": None}
        return options

    def flask_config(self, instance_path: str) -> dict[str, Any]:
        """What Flask itself reads: the database URL for SQLAlchemy, the secret key and the
        cookie flag only where set, the largest request body."""
        config: dict[str, Any] = {
            "SQLALCHEMY_DATABASE_URI": normalise_database_url(self.DATABASE_URL)
            if self.DATABASE_URL
            else f"sqlite:///{instance_path}/scheduler.db",
            # A body larger than this is refused (413) before it is read: nothing the panel
            # takes comes near it, and an anonymous POST must not make the process grow.
            "MAX_CONTENT_LENGTH": self.SCHEDULER_MAX_REQUEST_BYTES,
        }
        if self.SECRET_KEY:
            config["SECRET_KEY"] = self.SECRET_KEY
        if self.SECRET_KEY_FALLBACKS:
            config["SECRET_KEY_FALLBACKS"] = list(self.SECRET_KEY_FALLBACKS)
        if self.SESSION_COOKIE_SECURE is not None:
            config["SESSION_COOKIE_SECURE"] = self.SESSION_COOKIE_SECURE
        return config


OIDC_CLIENT = ("SCHEDULER_OIDC_ISSUER", "SCHEDULER_OIDC_CLIENT_ID", "SCHEDULER_OIDC_CLIENT_SECRET")
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def new_users_of(text: str) -> tuple[str, Role] | None:
    """SCHEDULER_OIDC_CREATE_USERS read: the tenant's slug and the role, or None when empty."""
    if not text:
        return None
    slug, _, role = text.partition(":")
    roles = {known: known for known in ROLES}
    if slug and slug == slug.strip() and role in roles:
        return slug, roles[role]
    raise ValueError(
        f"SCHEDULER_OIDC_CREATE_USERS={text!r} must be TENANT:ROLE, a tenant's slug and one of "
        f"{', '.join(ROLES)} (e.g. acme:viewer)"
    )


def issuer_problem(issuer: str) -> str | None:
    """What is wrong with an OpenID Connect issuer URL, or None: HTTPS (plain HTTP only on this
    machine, for development and tests), a host, no query or fragment."""
    try:
        parts = urlsplit(issuer)
        host = parts.hostname
    except ValueError:
        return "is not a URL"
    if not host or parts.query or parts.fragment:
        return "must be the provider's URL, without a query or fragment"
    if parts.scheme != "https" and not (parts.scheme == "http" and host in LOOPBACK_HOSTS):
        return "must be an https:// URL (http:// only for localhost)"
    return None


# The only settings a job receives as ctx.config: those the bundled jobs and the validation of
# arguments read.
JOB_SETTINGS = (
    "SCHEDULER_MAX_ARG_BYTES",
    "SCHEDULER_MAX_ARGS_BYTES",
    "SCHEDULER_OUTPUT_LIMIT",
    "SCHEDULER_ROLLUP_RETENTION_DAYS",
    "SCHEDULER_RUN_RETENTION_DAYS",
    "SCHEDULER_WEBHOOK_ALLOWED_HOSTS",
    "SCHEDULER_WEBHOOK_ALLOW_PRIVATE",
    "SCHEDULER_WEBHOOK_TIMEOUT",
)
SCHEDULER_SETTINGS = {name for name in Settings.model_fields if name.startswith("SCHEDULER_")}
# How messages name the type a value failed to be (pydantic's error type -> the docs' word).
KINDS = {
    "int_type": "int",
    "float_type": "float",
    "bool_type": "bool",
    "list_type": "list",
    "string_type": "str",
}
EXTENSION_KEY = "scheduler_settings"


class ConfigError(ValueError):
    """A setting that is missing or has a value that cannot be used; the message names it.
    (The app factory hands it to the command line as one line, not a traceback.)"""


INSTANCE_FILE = "config.py"


def settings(app: Flask | None = None) -> Settings:
    """The app's settings (the current app's by default), validated once by create_app."""
    chosen: Settings = (app or current_app).extensions[EXTENSION_KEY]
    return chosen


@dataclass(frozen=True)
class Loaded:
    """What load_settings read: our settings, validated, and the other upper-case names of the
    instance file and of the mapping given to create_app, which go to Flask as they are."""

    settings: Settings
    flask_file: dict[str, Any]
    flask_given: dict[str, Any]

    def flask_config(self, instance_path: str) -> dict[str, Any]:
        """Flask's configuration: the file's, ours, then what create_app was given."""
        return {**self.flask_file, **self.settings.flask_config(instance_path), **self.flask_given}


def load_settings(instance_path: str, given: Mapping[str, Any] | None = None) -> Loaded:
    """The settings from the defaults, the instance folder's config.py, the environment and
    `given` (tests pass a mapping to create_app), the later winning, validated once. A value
    that cannot be used is a ConfigError naming the setting, and the file if it was written
    there.

    The file (`make run` writes one) uses the environment's names as Python values; its other
    upper-case names are passed to Flask as they are.
    """
    path = os.path.join(instance_path, INSTANCE_FILE)
    written = Config(instance_path)
    try:
        written.from_pyfile(path, silent=True)
    except Exception as error:  # the operator's Python: a syntax error, a failing import
        raise ConfigError(f"cannot read {path}: {type(error).__name__}: {error}") from None
    given = dict(given or {})
    ours = Settings.model_fields
    file_values = {name: value for name, value in written.items() if name in ours}
    environment = {name: os.environ[name] for name in ours if name in os.environ}
    given_values = {name: value for name, value in given.items() if name in ours}
    merged = {**file_values, **environment, **given_values}
    try:
        # model_validate, not the constructor: the environment is already in `merged`, below
        # what create_app was given.
        checked = Settings.model_validate(merged)
    except ValidationError as error:
        raise refused(error, merged, file_values, given_values, path) from None
    return Loaded(
        settings=checked,
        flask_file={name: value for name, value in written.items() if name not in ours},
        flask_given={name: value for name, value in given.items() if name not in ours},
    )


def refused(
    error: ValidationError,
    merged: Mapping[str, Any],
    file_values: Mapping[str, Any],
    given_values: Mapping[str, Any],
    path: str,
) -> ConfigError:
    """One line naming the first refused setting, its value as written, and where."""
    problem = error.errors()[0]
    if not problem["loc"]:  # a rule between settings (Settings' model validators)
        return ConfigError(str(problem["msg"]).removeprefix("Value error, "))
    name = str(problem["loc"][0])
    value = merged[name]
    where = (
        f" (in {path})"
        if name in file_values and name not in os.environ and name not in given_values
        else ""
    )
    context = problem.get("ctx", {})
    field = Settings.model_fields[name]
    if problem["type"] in ("greater_than_equal", "less_than_equal", "greater_than"):
        bounds = {  # the one refused is in the error; the other only in the field's rules
            **{
                bound: getattr(rule, bound)
                for rule in field.metadata
                for bound in ("ge", "le", "gt")
                if getattr(rule, bound, None) is not None
            },
            **context,
        }
        if "gt" in bounds:
            whole = "a whole number " if isinstance(field.default, int) else ""
            return ConfigError(f"{name}={value!r} must be {whole}above {bounds['gt']}{where}")
        if "ge" in bounds and "le" in bounds:
            low, high = bounds["ge"], bounds["le"]
            return ConfigError(f"{name}={value!r} must be from {low} to {high}{where}")
        empty = ", or empty" if field.default is None else ""
        return ConfigError(f"{name}={value!r} must be {bounds['ge']} or more{empty}{where}")
    if problem["type"] == "string_too_short":
        return ConfigError(f"{name}={value!r} must not be empty{where}")
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


def is_secret_key_optional(config: Mapping[str, Any]) -> bool:
    """A SECRET_KEY may be left out only where sessions need not survive: debug and tests."""
    return bool(config.get("DEBUG") or config.get("TESTING"))


def args_limits(job_settings: Mapping[str, Any] | None) -> tuple[int, int]:
    """Settings.args_limits from a job's settings (Settings.job_settings()); the defaults where
    none are given (a default schedule checked at registration)."""
    given, (arg, args) = job_settings or {}, DEFAULTS.args_limits
    return given.get("SCHEDULER_MAX_ARG_BYTES", arg), given.get("SCHEDULER_MAX_ARGS_BYTES", args)


DEFAULTS = Settings()
