"""The data model. Table and column names are a public contract: operators query them directly."""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, get_args

from flask_login import UserMixin
from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    ColumnElement,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    literal_column,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Mapped, mapped_column, relationship

from webapp.database import UTCDateTime, utcnow
from webapp.extensions import db

if TYPE_CHECKING:
    from webapp.extensions import Base as Model
else:
    Model = db.Model

# JSONB on PostgreSQL (indexable, compact), JSON text on SQLite.
JSONDocument = JSON().with_variant(postgresql.JSONB(), "postgresql")

# The closed vocabularies: each a Literal type for the code and a tuple for checks and choices.
Role = Literal["admin", "viewer"]
Scope = Literal["tenant", "system"]
MisfirePolicy = Literal["fire_once", "fire_all", "skip"]
OverlapPolicy = Literal["allow", "skip"]
# What a fire at a time its calendar closes does: recorded as skipped, or run on an open day.
CalendarPolicy = Literal["skip", "next_business_day", "previous_business_day"]
# backfill: an admin asked for the fire times of a past window (one run each, like the tick's).
Trigger = Literal["schedule", "manual", "catchup", "backfill"]
# cancelled: an admin cancelled it while queued, or a running job stopped when asked to.
RunStatus = Literal["queued", "running", "succeeded", "failed", "skipped", "cancelled"]
# What a notification is about, how it travels, and where it is in the outbox.
# digest: how many notifications the tenant's hourly limit held back (scheduler.notify).
NotificationEvent = Literal["failure", "recovery", "overdue", "paused", "digest"]
NotificationChannel = Literal["email", "webhook"]
# suppressed: not sent: the schedule was notified within the window, or past the hourly limit.
NotificationStatus = Literal["pending", "sent", "failed", "suppressed"]
# What a `workers` row is: a scheduler worker with its thread or process pool (it ticks, leases
# and runs), one that sends its runs to Celery (SCHEDULER_EXECUTOR=celery), or a Celery worker
# of the fleet that runs them.
WorkerKind = Literal["thread", "process", "celery-sender", "celery-worker"]
ROLES: tuple[Role, ...] = get_args(Role)
SCOPES: tuple[Scope, ...] = get_args(Scope)
MISFIRE_POLICIES: tuple[MisfirePolicy, ...] = get_args(MisfirePolicy)
OVERLAP_POLICIES: tuple[OverlapPolicy, ...] = get_args(OverlapPolicy)
CALENDAR_POLICIES: tuple[CalendarPolicy, ...] = get_args(CalendarPolicy)
TRIGGERS: tuple[Trigger, ...] = get_args(Trigger)
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
NOTIFICATION_EVENTS: tuple[NotificationEvent, ...] = get_args(NotificationEvent)
NOTIFICATION_CHANNELS: tuple[NotificationChannel, ...] = get_args(NotificationChannel)
NOTIFICATION_STATUSES: tuple[NotificationStatus, ...] = get_args(NotificationStatus)
WORKER_KINDS: tuple[WorkerKind, ...] = get_args(WorkerKind)
# A run in one of these has not finished: overlap, deletion and the run-now status poll ask this.
UNFINISHED_STATUSES: tuple[RunStatus, ...] = ("queued", "running")
# What a schedule's key may look like (it is the column's width) and the width of its name: checked
# when a schedule is saved and when a job module declares a default one.
SCHEDULE_KEY = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
# The one email rule (a user's login, a notification's recipient): local part, @, a domain of
# letters, digits and hyphens with at least one dot. Stricter than RFC 5322 on purpose: quoted
# local parts and IP literals are typos far more often than real addresses a mail server takes.
EMAIL = re.compile(
    r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@"
    r"(?=.{1,253}$)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}"
)
MAX_SCHEDULE_NAME = 200
# SQLite reuses the id of a deleted newest row unless the table has AUTOINCREMENT: a new schedule
# would inherit the old one's audit trail, links and log lines. PostgreSQL sequences never reuse.
NEVER_REUSE_IDS = {"sqlite_autoincrement": True}
# The widest notification webhook URL and the most addresses a schedule or tenant may list.
MAX_URL = 2000
MAX_NOTIFY_EMAILS = 20


def one_of(column: str, values: tuple[str, ...]) -> str:
    quoted = ", ".join(f"'{value}'" for value in values)
    return f"{column} IN ({quoted})"


def any_of(column: str, values: tuple[str, ...]) -> str:
    """`values` as ORed equalities, the form of predicate SQLite matches a query's term to."""
    return " OR ".join(f"{column} = '{value}'" for value in values)


# What the partial history indexes of runs hold: every status and trigger but the bulk's. A
# new status or trigger joins them here; its migration must rebuild the index to match.
RARE_STATUSES = any_of("status", tuple(s for s in RUN_STATUSES if s != "succeeded"))
RARE_TRIGGERS = any_of('"trigger"', tuple(t for t in TRIGGERS if t != "schedule"))
MANUAL = "\"trigger\" = 'manual'"


class Tenant(Model):
    __tablename__ = "tenants"
    __table_args__ = NEVER_REUSE_IDS

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(63), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    time_zone: Mapped[str] = mapped_column(String(64), default="UTC")
    # Quotas; NULL falls back to the operator's SCHEDULER_MAX_SCHEDULES / SCHEDULER_MIN_INTERVAL.
    max_schedules: Mapped[int | None] = mapped_column(Integer)
    min_interval_seconds: Mapped[int | None] = mapped_column(Integer)
    # NULL: SCHEDULER_RUN_RETENTION_DAYS.
    retention_days: Mapped[int | None] = mapped_column(Integer)
    # The default recipients of a schedule's notifications (a schedule's own replace them).
    notify_emails: Mapped[list[str]] = mapped_column(
        JSONDocument, default=list, server_default="[]"
    )
    notify_webhook_url: Mapped[str | None] = mapped_column(String(MAX_URL))
    # The key of the HMAC-SHA256 signature on this tenant's notification webhooks; made when
    # first needed, shown to the tenant's admins.
    webhook_secret: Mapped[str | None] = mapped_column(String(64))
    # The most of this tenant's runs `running` at once across all workers; NULL:
    # SCHEDULER_MAX_RUNNING (unlimited unless set). Enforced by the lease (scheduler.claims).
    max_running: Mapped[int | None] = mapped_column(Integer)
    # The default spread of a schedule's start after its fire time (a schedule's own replaces
    # it); NULL: none.
    jitter_seconds: Mapped[int | None] = mapped_column(Integer)
    require_two_factor_admins: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class User(UserMixin, Model):
    __tablename__ = "users"
    __table_args__ = NEVER_REUSE_IDS

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    is_operator: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_login_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    totp_secret: Mapped[str | None] = mapped_column(String(255))  # sealed: services.sealing
    totp_last_step: Mapped[int | None] = mapped_column(Integer)  # services.two_factor
    two_factor_enabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    memberships: Mapped[list[Membership]] = relationship(
        back_populates="user", cascade="all, delete-orphan"
    )

    def get_id(self) -> str:
        """What Flask-Login keeps in the session cookie: the token of this login (see
        UserSession), never the bare user id, so that a session can be ended on the server."""
        token = self.__dict__.get("session_token")
        if not isinstance(token, str):
            raise RuntimeError("log users in through webapp.services.sessions.start")
        return token

    def holding(self, token: str) -> User:
        """This user as the holder of the login `token` (what get_id returns)."""
        self.__dict__["session_token"] = token
        return self


class Membership(Model):
    __tablename__ = "memberships"
    __table_args__ = (
        UniqueConstraint("user_id", "tenant_id"),
        CheckConstraint(one_of("role", ROLES), name="role"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(16))

    user: Mapped[User] = relationship(back_populates="memberships")
    tenant: Mapped[Tenant] = relationship()


# The predicate of SQLite's partial indexes of active schedules, as SQLAlchemy writes the
# condition `Schedule.active` there: SQLite uses a partial index only when the query's WHERE
# holds the predicate as written (`active` alone was never used; migration 0012).
SQLITE_ACTIVE = "active = 1"


class Schedule(Model):
    __tablename__ = "schedules"
    __table_args__ = (
        UniqueConstraint("tenant_id", "key"),
        # Tenant-less (system) schedules need their own uniqueness: NULLs never collide.
        Index(
            "uq_schedules_system_key",
            "key",
            unique=True,
            postgresql_where=text("tenant_id IS NULL"),
            sqlite_where=text("tenant_id IS NULL"),
        ),
        # The tick's probe: only active rows are indexed, so an idle tick costs one index seek
        # whatever the number of schedules.
        Index(
            "ix_schedules_due",
            "next_run_at",
            postgresql_where=text("active"),
            sqlite_where=text(SQLITE_ACTIVE),
        ),
        # The schedules list and the history's schedule filter page through names.
        Index("ix_schedules_tenant_name", "tenant_id", "name", "id"),
        # The watchdog looks for flagged schedules that recovered: only flagged rows indexed.
        Index(
            "ix_schedules_overdue",
            "overdue_since",
            postgresql_where=text("overdue_since IS NOT NULL"),
            sqlite_where=text("overdue_since IS NOT NULL"),
        ),
        # Next runs loads a tenant's active schedules by next_run_at.
        Index(
            "ix_schedules_tenant_upcoming",
            "tenant_id",
            "next_run_at",
            "id",
            postgresql_where=text("active"),
            sqlite_where=text(SQLITE_ACTIVE),
        ),
        CheckConstraint(one_of("scope", SCOPES), name="scope"),
        CheckConstraint(
            "(scope = 'system' AND tenant_id IS NULL)"
            " OR (scope = 'tenant' AND tenant_id IS NOT NULL)",
            name="scope_tenant",
        ),
        CheckConstraint(one_of("misfire_policy", MISFIRE_POLICIES), name="misfire_policy"),
        CheckConstraint(one_of("overlap_policy", OVERLAP_POLICIES), name="overlap_policy"),
        CheckConstraint(one_of("calendar_policy", CALENDAR_POLICIES), name="calendar_policy"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    scope: Mapped[Scope] = mapped_column(String(16), default="tenant")
    key: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(MAX_SCHEDULE_NAME))
    job: Mapped[str] = mapped_column(String(200))
    args: Mapped[dict[str, Any]] = mapped_column(JSONDocument, default=dict)
    cron: Mapped[str] = mapped_column(String(200))
    time_zone: Mapped[str] = mapped_column(String(64), default="UTC")
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    # Why the scheduler deactivated it (tampered data, job gone from the catalog); NULL otherwise.
    inactive_reason: Mapped[str | None] = mapped_column(Text)
    misfire_policy: Mapped[MisfirePolicy] = mapped_column(String(16), default="fire_once")
    overlap_policy: Mapped[OverlapPolicy] = mapped_column(String(16), default="allow")
    next_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Notification recipients; empty / NULL: the tenant's defaults.
    notify_emails: Mapped[list[str]] = mapped_column(
        JSONDocument, default=list, server_default="[]"
    )
    notify_webhook_url: Mapped[str | None] = mapped_column(String(MAX_URL))
    # After this many failed runs in a row the schedule pauses itself; NULL: never.
    pause_after_failures: Mapped[int | None] = mapped_column(Integer)
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # When the watchdog found it overdue (see schedule_overdue); NULL when it is not.
    overdue_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Each run starts up to this many seconds after its fire time (a deterministic spread, see
    # the tick); NULL: the tenant's default.
    jitter_seconds: Mapped[int | None] = mapped_column(Integer)
    # The business calendar its fires follow (NULL: none; a calendar in use is not deleted) and
    # what a fire on a closed day or in a maintenance window does (scheduler.calendar_fires).
    calendar_id: Mapped[int | None] = mapped_column(ForeignKey("calendars.id"))
    calendar_policy: Mapped[CalendarPolicy] = mapped_column(
        String(32), default="skip", server_default="skip"
    )
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    tenant: Mapped[Tenant | None] = relationship()
    calendar_row: Mapped[Any] = relationship("Calendar", viewonly=True)

    @property
    def calendar(self) -> str | None:
        """The calendar's key: the field's public name (the form, the API, the export)."""
        return self.calendar_row.key if self.calendar_row is not None else None


class Worker(Model):
    __tablename__ = "workers"
    __table_args__ = (CheckConstraint(one_of("kind", WORKER_KINDS), name="kind"), NEVER_REUSE_IDS)

    id: Mapped[int] = mapped_column(primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    # WORKER_KINDS; NULL: a row written before the column (the workers page says "-").
    kind: Mapped[str | None] = mapped_column(String(16))
    concurrency: Mapped[int] = mapped_column(Integer, default=1)
    # The release of the package it runs (webapp.__version__ / the installed distribution).
    version: Mapped[str | None] = mapped_column(String(32))
    # Job threads that overran their timeout and were left behind (the thread pool cannot kill
    # a thread); reported with each heartbeat.
    abandoned_jobs: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Set on a clean exit; a row without it and with an old heartbeat is a worker that died.
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Run(Model):
    __tablename__ = "runs"
    __table_args__ = (
        # The database itself forbids a double fire. Manual runs are outside it: two people may
        # press Run now in the same second.
        Index(
            "uq_runs_schedule_id_scheduled_for",
            "schedule_id",
            "scheduled_for",
            unique=True,
            postgresql_where=text("\"trigger\" <> 'manual'"),
            sqlite_where=text("\"trigger\" <> 'manual'"),
        ),
        # Every idempotency key is unique, but only manual runs need this index for it: any other
        # run's key is `schedule:<id>:<fire time>` (tick.fire_key), one per fire time, which the
        # index above already makes unique (and ids are never reused). Indexing every run's key
        # wrote a 35-byte entry on each of a run's four writes (bench/README.md, "The indexes of
        # runs").
        Index(
            "uq_runs_idempotency_key",
            "idempotency_key",
            unique=True,
            postgresql_where=text(MANUAL),
            sqlite_where=text(MANUAL),
        ),
        # The lease's order: with `id` in the index, many runs queued for the same instant (a
        # tick batch, the herd) are read in order instead of scanned and sorted.
        Index(
            "ix_runs_queue",
            "available_at",
            "id",
            postgresql_where=text("status = 'queued'"),
            sqlite_where=text("status = 'queued'"),
        ),
        Index(
            "ix_runs_leases",
            "locked_until",
            postgresql_where=text("status = 'running'"),
            sqlite_where=text("status = 'running'"),
        ),
        # Fair leasing takes each tenant's oldest queued runs in turn.
        Index(
            "ix_runs_tenant_queue",
            "tenant_id",
            "available_at",
            "id",
            postgresql_where=text("status = 'queued'"),
            sqlite_where=text("status = 'queued'"),
        ),
        Index("ix_runs_tenant_history", "tenant_id", "id"),
        # The history's status and trigger filters, newest first, without walking the tenant's
        # whole history when few runs match. Partial: the bulk of the runs (succeeded, fired
        # by the schedule) are never in them, so a run's insert, lease and outcome write fewer
        # index entries (filtering on those values walks ix_runs_tenant_history, where most runs
        # match). The predicates are ORs of equalities because SQLite uses a partial index only
        # when the query's term appears in the predicate as written (`status = ?` matches one
        # of the ORs; it never implies `status <> 'succeeded'`).
        Index(
            "ix_runs_tenant_status_history",
            "tenant_id",
            "status",
            "id",
            postgresql_where=text(RARE_STATUSES),
            sqlite_where=text(RARE_STATUSES),
        ),
        Index(
            "ix_runs_tenant_trigger_history",
            "tenant_id",
            "trigger",
            "id",
            postgresql_where=text(RARE_TRIGGERS),
            sqlite_where=text(RARE_TRIGGERS),
        ),
        Index("ix_runs_schedule_history", "schedule_id", "id"),
        CheckConstraint(one_of('"trigger"', TRIGGERS), name="trigger"),
        CheckConstraint(one_of("status", RUN_STATUSES), name="status"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    # History survives the deletion of its schedule.
    schedule_id: Mapped[int | None] = mapped_column(ForeignKey("schedules.id", ondelete="SET NULL"))
    job: Mapped[str] = mapped_column(String(200))
    args: Mapped[dict[str, Any]] = mapped_column(JSONDocument, default=dict)
    trigger: Mapped[str] = mapped_column(String(16), default="schedule")
    scheduled_for: Mapped[datetime] = mapped_column(UTCDateTime)
    # Unique; the index holds manual runs only (see uq_runs_idempotency_key).
    idempotency_key: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    # Copied from the catalog at enqueue time, so that the reaper decides in one statement.
    max_attempts: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    fires_covered: Mapped[int] = mapped_column(Integer, default=1)
    queued_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    available_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    worker_id: Mapped[int | None] = mapped_column(ForeignKey("workers.id", ondelete="SET NULL"))
    locked_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # What tenants see: the exception's type and message and the job's own frames.
    error: Mapped[str | None] = mapped_column(Text)
    # The full traceback, for operators only (server paths, framework frames): never rendered
    # on tenant pages.
    error_detail: Mapped[str | None] = mapped_column(Text)
    output: Mapped[str | None] = mapped_column(Text)
    requested_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    # A running job asked to stop (it sees it through its context); NULL: not asked.
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Who cancelled a queued run or asked a running one to stop, and when it ended cancelled.
    cancelled_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    cancelled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    schedule: Mapped[Schedule | None] = relationship()
    worker: Mapped[Worker | None] = relationship()
    requester: Mapped[User | None] = relationship(foreign_keys=[requested_by])  # Run now
    canceller: Mapped[User | None] = relationship(foreign_keys=[cancelled_by])


def run_status_is(status: RunStatus) -> ColumnElement[bool]:
    """`runs.status = '<status>'` with the status in the statement's text, not a bound
    parameter: for the statements that a partial index of runs serves (the queue, the running
    runs, the history's rare statuses). psycopg prepares a statement from its fifth execution,
    and PostgreSQL may then run it on a generic plan, which can use a partial index only if the
    statement's text implies its predicate: a lease on that plan read each tenant's whole
    history (test_query_plans.py)."""
    return written_value(Run.status, status, RUN_STATUSES)


def run_trigger_is(trigger: Trigger) -> ColumnElement[bool]:
    """`runs.trigger = '<trigger>'` in the statement's text, as run_status_is (the history's
    rare triggers have a partial index)."""
    return written_value(Run.trigger, trigger, TRIGGERS)


def written_value(column: Any, value: str, allowed: tuple[str, ...]) -> ColumnElement[bool]:
    if value not in allowed:  # the only text that goes into the statement
        raise ValueError(f"not one of {allowed}: {value!r}")
    return column == literal_column(f"'{value}'")


class AuditEvent(Model):
    __tablename__ = "audit_events"
    __table_args__ = (
        Index("ix_audit_events_tenant_history", "tenant_id", "id"),
        # A schedule's audit trail on its page.
        Index("ix_audit_events_object_history", "tenant_id", "object_type", "object_id", "id"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    # Who acted, readable even after the user is gone: an email, or "cli" / "scheduler".
    actor_label: Mapped[str] = mapped_column(String(254))
    action: Mapped[str] = mapped_column(String(64))
    object_type: Mapped[str] = mapped_column(String(32))
    object_id: Mapped[int | None] = mapped_column(Integer)
    object_label: Mapped[str | None] = mapped_column(String(200))
    before: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class LoginAttempt(Model):
    """A failed login, by client address and by account: the limiter counts recent ones."""

    __tablename__ = "login_attempts"
    __table_args__ = (
        Index("ix_login_attempts_subject", "subject", "attempted_at"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    subject: Mapped[str] = mapped_column(String(300))  # "ip:203.0.113.5" or "email:a@b.example"
    attempted_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class UserSession(Model):
    """A login. The session cookie carries a random token; this row only its SHA-256, so that
    logging out, a password change, leaving a tenant or an operator ends the session on the
    server (a copied cookie stops working at once)."""

    __tablename__ = "user_sessions"
    __table_args__ = NEVER_REUSE_IDS

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    user: Mapped[User] = relationship()


class RecoveryCode(Model):
    """A user's single-use two-factor recovery code: only its SHA-256 is kept."""

    __tablename__ = "recovery_codes"
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    code_hash: Mapped[str] = mapped_column(String(64))


class Notification(Model):
    """The outbox: a message to send, written in the transaction that decided it (a run's
    outcome, the watchdog's overdue flag) and sent by a worker. The idempotency key makes a
    second write of the same message a no-op and travels with it (header, Message-ID)."""

    __tablename__ = "notifications"
    __table_args__ = (
        Index(
            "ix_notifications_outbox",
            "available_at",
            postgresql_where=text("status = 'pending'"),
            sqlite_where=text("status = 'pending'"),
        ),
        Index("ix_notifications_schedule_history", "schedule_id", "id"),
        Index("ix_notifications_tenant_history", "tenant_id", "id"),
        CheckConstraint(one_of("event", NOTIFICATION_EVENTS), name="event"),
        CheckConstraint(one_of("channel", NOTIFICATION_CHANNELS), name="channel"),
        CheckConstraint(one_of("status", NOTIFICATION_STATUSES), name="status"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    schedule_id: Mapped[int | None] = mapped_column(ForeignKey("schedules.id", ondelete="SET NULL"))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    event: Mapped[NotificationEvent] = mapped_column(String(16))
    channel: Mapped[NotificationChannel] = mapped_column(String(16))
    target: Mapped[str] = mapped_column(String(MAX_URL))  # an email address or a webhook URL
    subject: Mapped[str] = mapped_column(String(300))
    body: Mapped[str] = mapped_column(Text)  # the email's text; the webhook's JSON
    idempotency_key: Mapped[str] = mapped_column(String(200), unique=True)
    status: Mapped[NotificationStatus] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    available_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    locked_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    worker_id: Mapped[int | None] = mapped_column(ForeignKey("workers.id", ondelete="SET NULL"))
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
