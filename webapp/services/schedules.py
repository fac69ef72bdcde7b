"""Schedule changes: create, update, delete, pause, resume and run now.

The CLI, the import and the panel all come through here, so that validation, quotas and the
audit trail live in one place. Each change is one transaction.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from flask import current_app
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from webapp import cron
from webapp.catalog import ArgsError, Catalog, JobSpec, UnknownJobError, args_path, size_errors
from webapp.catalog.current import current_catalog
from webapp.config import args_limits
from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import MISFIRE_POLICIES, OVERLAP_POLICIES, Run, Schedule, Tenant
from webapp.scheduler.wakeup import notify_workers
from webapp.services.accounts import AccountError, check_time_zone
from webapp.services.audit import Actor, audit_row, changed_fields, record, schedule_snapshot

KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
MAX_NAME_LENGTH = 200
MAX_CRON_LENGTH = 200  # the width of schedules.cron
# How far from now a run may be requested: as far as the cron module plans (a valid schedule
# fires at least once in that time), so that no run is queued for the year 3000.
RUN_AT_HORIZON = timedelta(days=cron.MAX_GAP_DAYS)
# Fires looked at to find a schedule's shortest gap for the minimum-interval quota.
INTERVAL_SAMPLE = 500


class ScheduleError(ValueError):
    """Bad input for a schedule: field name -> message, shown next to the field."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(format_error(f, m) for f, m in self.errors.items()))


def format_error(field_name: str, message: str) -> str:
    # A job message names the job already ("job 'os.system' is not in the catalog").
    return message if field_name == "job" else f"{field_name}: {message}"


@dataclass
class ScheduleInput:
    """What a form, an import item or the CLI asks for."""

    name: str
    job: str
    cron: str
    time_zone: str
    args: dict[str, Any] = field(default_factory=dict)
    active: bool = True
    misfire_policy: str = "fire_once"
    overlap_policy: str = "allow"
    key: str | None = None  # None: derived from the name


@dataclass(frozen=True)
class Limits:
    max_schedules: int | None
    min_interval: int | None


def tenant_limits(tenant: Tenant) -> Limits:
    config = current_app.config
    return Limits(
        max_schedules=tenant.max_schedules
        if tenant.max_schedules is not None
        else config["SCHEDULER_MAX_SCHEDULES"],
        min_interval=tenant.min_interval_seconds
        if tenant.min_interval_seconds is not None
        else config["SCHEDULER_MIN_INTERVAL"],
    )


def shortest_gap(spec: cron.CronSpec, now: datetime) -> timedelta | None:
    fires = [spec.next_fire_after(now)]
    fires += spec.fire_times_between(fires[0], fires[0] + timedelta(days=800), INTERVAL_SAMPLE)
    gaps = [later - earlier for earlier, later in itertools.pairwise(fires)]
    return min(gaps) if gaps else None


def clean_job(catalog: Catalog, job: str, scope: str) -> JobSpec:
    spec = catalog.get(job)
    if spec.scope != scope:
        raise ScheduleError(
            {"job": f"job '{job}' is a {spec.scope} job and cannot be used in a {scope} schedule"}
        )
    return spec


def nul_errors(args: dict[str, Any]) -> dict[str, str]:
    """PostgreSQL cannot store NUL in text: refuse it here rather than fail in the database."""
    return {
        f"args.{name}": "must not contain a NUL character"
        for name, value in args.items()
        if isinstance(value, str) and "\x00" in value
    }


def clean(
    data: ScheduleInput,
    limits: Limits,
    catalog: Catalog,
    now: datetime,
    scope: str = "tenant",
    settings: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Validates one schedule: (normalised fields, errors by field). Reads nothing else.

    `settings` (the app's configuration; the current app's if None) reach the job's parameter
    validation, for checks such as the webhook's host allowlist.
    """
    errors: dict[str, str] = {}
    values: dict[str, Any] = {}
    for field_name in ("name", "job", "cron", "time_zone"):
        if not isinstance(getattr(data, field_name), str):
            errors[field_name] = "must be text"
    if errors:
        return values, errors
    name = data.name.strip()
    if not name:
        errors["name"] = "a name is required"
    elif len(name) > MAX_NAME_LENGTH:
        errors["name"] = f"the name is longer than {MAX_NAME_LENGTH} characters"
    elif "\x00" in name:
        errors["name"] = "the name must not contain a NUL character"
    values["name"] = name
    if data.key is not None:
        if not isinstance(data.key, str) or not KEY_PATTERN.fullmatch(data.key):
            errors["key"] = (
                f"invalid key {data.key!r}: use 1-64 lower-case letters, digits, '_', '.', '-'"
            )
        values["key"] = data.key
    try:
        spec = clean_job(catalog, data.job, scope)
    except (UnknownJobError, ScheduleError) as error:
        errors["job"] = error.errors["job"] if isinstance(error, ScheduleError) else str(error)
    else:
        values["job"] = spec.name
        try:
            values["args"] = spec.validate_args(
                data.args, current_app.config if settings is None else settings
            )
            errors.update(nul_errors(values["args"]))
        except ArgsError as error:
            for path, message in error.errors:
                errors[args_path(path)] = message
    try:
        values["time_zone"] = check_time_zone(data.time_zone)
    except (AccountError, TypeError) as error:
        errors["time_zone"] = str(error)
    else:
        try:
            if len(data.cron) > MAX_CRON_LENGTH:
                raise cron.CronError(
                    f"the cron expression is longer than {MAX_CRON_LENGTH} characters"
                )
            compiled = cron.validate(data.cron, data.time_zone)
        except cron.CronError as error:
            errors["cron"] = str(error)
        else:
            values["cron"] = compiled.expression
            values["next_run_at"] = compiled.next_fire_after(now)
            if limits.min_interval:
                gap = shortest_gap(compiled, now)
                if gap is not None and gap < timedelta(seconds=limits.min_interval):
                    errors["cron"] = (
                        f"fires as often as every {int(gap.total_seconds())} s; this tenant "
                        f"allows at most one fire every {limits.min_interval} s"
                    )
    for name_, allowed, value in (
        ("misfire_policy", MISFIRE_POLICIES, data.misfire_policy),
        ("overlap_policy", OVERLAP_POLICIES, data.overlap_policy),
    ):
        if value not in allowed:
            errors[name_] = f"{value!r} is not one of {', '.join(allowed)}"
        values[name_] = value
    if not isinstance(data.active, bool):
        errors["active"] = "must be true or false"
    values["active"] = data.active
    return values, errors


def slugify(name: str) -> str:
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:56]
    return slug or "schedule"


def free_key(tenant: Tenant, name: str) -> str:
    base = slugify(name)
    taken = set(
        db.session.scalars(
            select(Schedule.key).where(
                Schedule.tenant_id == tenant.id, Schedule.key.like(f"{base}%")
            )
        )
    )
    key, number = base, 2
    while key in taken:
        key, number = f"{base}-{number}", number + 1
    return key


def lock_tenant(session: Session, tenant: Tenant) -> None:
    """Serialises the tenant's schedule changes, so that two creations cannot both pass the quota
    or take the same key (PostgreSQL row lock; SQLite's write lock is already exclusive)."""
    session.execute(select(Tenant.id).where(Tenant.id == tenant.id).with_for_update())


def key_taken(tenant: Tenant, key: str) -> bool:
    query = select(Schedule.id).where(Schedule.tenant_id == tenant.id, Schedule.key == key)
    return db.session.scalar(query) is not None


def count_schedules(tenant: Tenant) -> int:
    query = select(func.count()).select_from(Schedule).where(Schedule.tenant_id == tenant.id)
    return int(db.session.scalar(query) or 0)


def check_quota(tenant: Tenant, limits: Limits, adding: int) -> None:
    if limits.max_schedules is None or adding <= 0:
        return
    existing = count_schedules(tenant)
    if existing + adding > limits.max_schedules:
        raise ScheduleError(
            {
                "quota": f"tenant '{tenant.slug}' may have at most {limits.max_schedules} "
                f"schedules and has {existing}"
            }
        )


def create_schedule(tenant: Tenant, data: ScheduleInput, actor: Actor, now: datetime) -> Schedule:
    """Validates and stores a new schedule in the tenant, with its audit event."""
    with write_transaction(db.session) as session:
        lock_tenant(session, tenant)
        limits = tenant_limits(tenant)
        values, errors = clean(data, limits, current_catalog(), now)
        if errors:
            raise ScheduleError(errors)
        values["key"] = values.get("key") or free_key(tenant, values["name"])
        if key_taken(tenant, values["key"]):
            raise ScheduleError({"key": f"a schedule with key '{values['key']}' already exists"})
        check_quota(tenant, limits, adding=1)
        schedule = Schedule(tenant_id=tenant.id, scope="tenant", created_by=actor.user_id, **values)
        db.session.add(schedule)
        db.session.flush()
        record(
            session,
            audit_row(actor, "schedule.created", schedule, after=schedule_snapshot(schedule)),
        )
        notify_workers(session)
    return schedule


def update_schedule(
    schedule: Schedule, data: ScheduleInput, actor: Actor, now: datetime
) -> Schedule:
    """Applies an edit; the cadence restarts from now only if the cron or the zone changed."""
    with write_transaction(db.session) as session:
        tenant = schedule.tenant
        assert tenant is not None
        lock_tenant(session, tenant)
        values, errors = clean(data, tenant_limits(tenant), current_catalog(), now)
        if errors:
            raise ScheduleError(errors)
        values["key"] = values.get("key") or schedule.key
        if values["key"] != schedule.key and key_taken(tenant, values["key"]):
            raise ScheduleError({"key": f"a schedule with key '{values['key']}' already exists"})
        before = schedule_snapshot(schedule)
        reactivated = values["active"] and not schedule.active
        if not reactivated and (values["cron"], values["time_zone"]) == (
            schedule.cron,
            schedule.time_zone,
        ):
            del values["next_run_at"]  # the cadence goes on; a re-activated one restarts from now
        if reactivated:
            schedule.inactive_reason = None
        for name, value in values.items():
            setattr(schedule, name, value)
        old, new = changed_fields(before, schedule_snapshot(schedule))
        if new:
            record(session, audit_row(actor, "schedule.updated", schedule, old, new))
        notify_workers(session)
    return schedule


def delete_schedule(schedule: Schedule, actor: Actor) -> None:
    """Deletes the schedule; its run history stays."""
    with write_transaction(db.session) as session:
        record(
            session,
            audit_row(actor, "schedule.deleted", schedule, before=schedule_snapshot(schedule)),
        )
        db.session.delete(schedule)


def pause_schedule(schedule: Schedule, actor: Actor) -> None:
    with write_transaction(db.session) as session:
        if not schedule.active:
            return
        schedule.active = False
        record(
            session,
            audit_row(actor, "schedule.paused", schedule, {"active": True}, {"active": False}),
        )


def resume_schedule(schedule: Schedule, actor: Actor, now: datetime, catch_up: bool) -> None:
    """Resumes; missed fire times are skipped, or left due so the misfire policy handles them."""
    with write_transaction(db.session) as session:
        if schedule.active:
            return
        try:  # the checks of the tick: a schedule it would deactivate again is not resumed
            spec = cron.validate(schedule.cron, schedule.time_zone)
        except cron.CronError as error:
            raise ScheduleError({"resume": f"cannot resume: {error}; edit it first"}) from None
        if not catch_up or schedule.next_run_at is None:
            schedule.next_run_at = spec.next_fire_after(now)
        schedule.active = True
        schedule.inactive_reason = None
        record(
            session,
            audit_row(
                actor,
                "schedule.resumed",
                schedule,
                {"active": False},
                {"active": True, "catch_up": catch_up},
            ),
        )
        notify_workers(session)


def has_unfinished_run(schedule_id: int) -> bool:
    query = (
        select(Run.id)
        .where(Run.schedule_id == schedule_id, Run.status.in_(("queued", "running")))
        .limit(1)
    )
    return db.session.scalar(query) is not None


def run_now(schedule: Schedule, actor: Actor, now: datetime, at: datetime | None = None) -> Run:
    """Queues a manual run (at `at`, or now) without touching the schedule's cadence.

    With the overlap policy `skip`, a run while an earlier one is unfinished is recorded as
    skipped, so that the history explains why nothing ran.
    """
    if at is not None and abs(at - now) > RUN_AT_HORIZON:
        raise ScheduleError(
            {
                "at": f"{at:%Y-%m-%dT%H:%M:%SZ} is more than {RUN_AT_HORIZON.days} days from "
                "now, further than any schedule fires"
            }
        )
    with write_transaction(db.session) as session:
        try:
            spec = clean_job(current_catalog(), schedule.job, schedule.scope)
        except UnknownJobError as error:
            raise ScheduleError({"job": str(error)}) from None
        # Arguments stored before the size limits (or over lowered ones) are not copied again.
        too_large = size_errors(schedule.args, args_limits(current_app.config))
        if too_large:
            raise ScheduleError({args_path(path): message for path, message in too_large})
        start = at or now
        run = Run(
            tenant_id=schedule.tenant_id,
            schedule_id=schedule.id,
            job=schedule.job,
            args=schedule.args,
            trigger="manual",
            scheduled_for=start,
            available_at=start,
            queued_at=now,
            idempotency_key=f"manual:{uuid.uuid4()}",
            max_attempts=spec.max_attempts,
            requested_by=actor.user_id,
        )
        if schedule.overlap_policy == "skip" and has_unfinished_run(schedule.id):
            run.status = "skipped"
            run.finished_at = now
            run.error = "skipped: an earlier run of this schedule is still queued or running"
        db.session.add(run)
        db.session.flush()
        record(
            session,
            audit_row(
                actor,
                "schedule.run_now",
                schedule,
                after={"run_id": run.id, "at": start.isoformat()},
            ),
        )
        notify_workers(session)
    return run


@dataclass(frozen=True)
class CronPreview:
    description: str
    fires: list[tuple[datetime, str, str | None]]  # (UTC, local label, DST note)
    clock_changes: list[cron.ClockChange]  # the zone's next two, and what the schedule does
    no_clock_changes: str | None  # what to say instead when the zone has none


def local_label(moment: datetime, time_zone: str) -> str:
    local = moment.astimezone(ZoneInfo(time_zone))
    offset = local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()} ({offset[:3]}:{offset[3:]})"


def preview_cron(
    expression: str, time_zone: str, now: datetime, count: int = 5, start: date | None = None
) -> CronPreview:
    """The description, the next fire times after ``now`` (or from the start of the local day
    ``start``) and the zone's next clock changes, or ScheduleError naming the field at fault."""
    try:
        check_time_zone(time_zone)
    except AccountError as error:
        raise ScheduleError({"time_zone": str(error)}) from None
    try:
        spec = cron.validate(expression, time_zone)
    except cron.CronError as error:
        raise ScheduleError({"cron": str(error)}) from None
    if start is not None:
        # Fires are whole minutes: just before local midnight includes a fire at 00:00.
        midnight = datetime(start.year, start.month, start.day)
        now = cron.wall_time_to_utc(midnight, time_zone) - timedelta(microseconds=1)
    fires = [spec.next_fire_after(now)]
    if count > 1:
        fires += spec.fire_times_between(fires[0], fires[0] + timedelta(days=3660), count - 1)
    changes = cron.clock_changes(spec, now)
    return CronPreview(
        description=cron.describe(spec),
        fires=[(fire, local_label(fire, time_zone), spec.dst_note(fire)) for fire in fires],
        clock_changes=changes,
        no_clock_changes=None if changes else cron.no_clock_changes(time_zone),
    )


def find_schedule(tenant: Tenant, key: str) -> Schedule:
    schedule = db.session.scalar(
        select(Schedule).where(Schedule.tenant_id == tenant.id, Schedule.key == key)
    )
    if schedule is None:
        raise ScheduleError({"key": f"tenant '{tenant.slug}' has no schedule with key '{key}'"})
    return schedule
