"""Schedule changes: create, update, delete, pause, resume and run now.

The CLI, the import and the panel all come through here, so that validation, quotas and the
audit trail live in one place. Each change is one transaction.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from webapp import cron
from webapp.calendar_models import Calendar
from webapp.catalog import JobSpec, UnknownJobError, args_path, size_errors
from webapp.catalog.current import current_catalog
from webapp.config import settings
from webapp.cron.business_days import BusinessCalendar
from webapp.database import is_postgresql, retry_lost_race, write_transaction
from webapp.extensions import db
from webapp.models import AuditEvent, CalendarPolicy, Run, Schedule, Scope, Tenant
from webapp.scheduler import claims, runs
from webapp.scheduler.calendar_fires import fire_of, take_at
from webapp.scheduler.calendar_rules import calendar_of
from webapp.scheduler.fire_ahead import withdraw_fires_ahead
from webapp.scheduler.jitter import effective_jitter
from webapp.scheduler.run_rows import manual_run_row
from webapp.scheduler.wakeup import notify_workers
from webapp.services import scope
from webapp.services.audit import Actor, audit_row, changed_fields, record, schedule_snapshot
from webapp.services.calendar_marks import CalendarMark, calendar_marks
from webapp.services.schema import (
    ScheduleError,
    ScheduleIn,
    ScheduleRules,
    interval_problem,
    jitter_problem,
)

# Callers build a schedule's input with this; it is checked by ScheduleIn.
from webapp.services.schema import ScheduleInput as ScheduleInput

# How far ahead a run may be requested ("Run once later", the API's `at`, `schedule run --at`):
# a year, whatever its length, so that no forgotten run waits in the queue for the year 3000.
RUN_AT_HORIZON = timedelta(days=366)


@dataclass(frozen=True)
class Limits:
    max_schedules: int | None
    min_interval: int | None


def tenant_limits(tenant: Tenant) -> Limits:
    chosen = settings()
    return Limits(
        max_schedules=tenant.max_schedules
        if tenant.max_schedules is not None
        else chosen.SCHEDULER_MAX_SCHEDULES,
        min_interval=tenant.min_interval_seconds
        if tenant.min_interval_seconds is not None
        else chosen.SCHEDULER_MIN_INTERVAL,
    )


def tenant_rules(
    limits: Limits, now: datetime, tenant_id: int, more_calendars: Iterable[str] = ()
) -> ScheduleRules:
    """How a tenant's schedules are checked: the app's catalog and settings, the tenant's quota,
    its calendars (and `more_calendars`, an import's own, written first)."""
    return ScheduleRules(
        catalog=current_catalog(),
        settings=settings().job_settings(),
        now=now,
        min_interval=limits.min_interval,
        max_recipients=settings().SCHEDULER_NOTIFY_MAX_RECIPIENTS,
        calendars=frozenset(calendar_ids(tenant_id)) | frozenset(more_calendars),
    )


def calendar_ids(tenant_id: int) -> dict[str, int]:
    """The tenant's calendars: key -> id."""
    query = scope.calendars(tenant_id).with_only_columns(Calendar.key, Calendar.id)
    return {key: calendar_id for key, calendar_id in db.session.execute(query)}


def stored_values(asked: ScheduleIn, calendars: Mapping[str, int]) -> dict[str, Any]:
    """A checked schedule's fields as its columns: the calendar's key becomes its id
    (`calendars`: the tenant's, read in the saving transaction; a calendar deleted since the
    check is a field error)."""
    values = asked.model_dump(exclude={"calendar"})
    values["calendar_id"] = None
    if asked.calendar is not None:
        if asked.calendar not in calendars:
            raise ScheduleError({"calendar": f"no calendar with key {asked.calendar!r}"})
        values["calendar_id"] = calendars[asked.calendar]
    return values


def first_take(
    spec: cron.CronSpec, calendar_id: int | None, policy: CalendarPolicy, fire: datetime
) -> datetime:
    """When the tick first takes a schedule whose next fire is `fire`: earlier when its calendar
    moves that fire to a previous business day (calendar_fires.take_at). A time already past
    is taken at once; a fire already recorded meanwhile is refused by the database."""
    if calendar_id is None or policy != "previous_business_day":
        return fire
    return take_at(calendar_of(db.session(), calendar_id), policy, fire, spec, None)


def restart_cadence(
    schedule: Schedule, asked: ScheduleIn, now: datetime, calendar_id: int | None
) -> dict[str, Any]:
    """What an edit changes besides its fields: a new cron or zone, or a re-activation,
    restarts the cadence from now (missed fires skipped, as resuming without catch-up does);
    otherwise the cadence goes on. A new calendar (`calendar_id`) or policy takes the next fire
    when it now says (first_take). The one rule for the form, the import and the API."""
    reactivated = asked.active and not schedule.active
    changes: dict[str, Any] = {}
    spec = cron.validate(asked.cron, asked.time_zone)
    fire = None
    if reactivated or (asked.cron, asked.time_zone) != (schedule.cron, schedule.time_zone):
        fire = spec.next_fire_after(now)
    elif schedule.next_run_at is not None and (
        (calendar_id, asked.calendar_policy) != (schedule.calendar_id, schedule.calendar_policy)
        or asked.calendar_policy == "previous_business_day"  # a fire withdrawn: taken early again
    ):
        was_calendar = schedule.calendar_id is not None
        fire = fire_of(schedule.next_run_at, spec, was_calendar, schedule.calendar_policy)
    if fire is not None:
        changes["next_run_at"] = first_take(spec, calendar_id, asked.calendar_policy, fire)
    if reactivated:
        changes["inactive_reason"] = None
    return changes


def take_back_fires_ahead(
    session: Session, schedule: Schedule, now: datetime | None = None
) -> None:
    """Before any change of a schedule: a run queued ahead of its fire time
    (SCHEDULER_FIRE_AHEAD) holds the schedule as it was; it is withdrawn and the fire left due
    again."""
    if withdraw_fires_ahead(session, [schedule.id], now):
        session.expire(schedule, ["next_run_at"])


def slugify(name: str) -> str:
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:56]
    return slug or "schedule"


def free_key(tenant: Tenant, name: str) -> str:
    base = slugify(name)
    mine = scope.schedules(tenant.id).with_only_columns(Schedule.key)
    taken = set(db.session.scalars(mine.where(Schedule.key.like(f"{base}%"))))
    key, number = base, 2
    while key in taken:
        key, number = f"{base}-{number}", number + 1
    return key


def schedule_warnings(
    tenant: Tenant,
    name: str,
    time_zone: str,
    key: str | None = None,
    shared: Mapping[str, list[str]] | None = None,
) -> dict[str, str]:
    """What a schedule's author may not have meant, by field: accepted all the same, and told
    wherever one is saved (the form, beside its fields and in the flash; the API's answer; the
    import and the command line, on stderr): a name another schedule has (`name_warning`), a
    legacy fixed-offset zone (`cron.zone_warning`)."""
    warnings = {"name": name_warning(tenant, name, key, shared)}
    try:
        warnings["time_zone"] = cron.zone_warning(cron.check_time_zone(time_zone))
    except cron.CronError:
        pass  # the zone's own error says why
    return {field: warning for field, warning in warnings.items() if warning}


def shared_names(tenant: Tenant) -> dict[str, list[str]]:
    """The tenant's names that more than one of its schedules has, with their keys in order:
    one query for the warnings of many saved schedules at once (an import's)."""
    mine = scope.schedules(tenant.id)
    shared = mine.with_only_columns(Schedule.name).group_by(Schedule.name).having(func.count() > 1)
    rows = mine.with_only_columns(Schedule.name, Schedule.key).where(Schedule.name.in_(shared))
    keys: dict[str, list[str]] = {}
    for name, key in db.session.execute(rows.order_by(Schedule.key)):
        keys.setdefault(name, []).append(key)
    return keys


def name_warning(
    tenant: Tenant,
    name: str,
    key: str | None = None,
    shared: Mapping[str, list[str]] | None = None,
) -> str | None:
    """Another of the tenant's schedules is named `name`: the keys tell them apart (`key`: this
    schedule's; None for one not saved yet, whose key the name gives). `shared`: the
    tenant's `shared_names`, when its schedules are saved and many are checked."""
    name = name.strip()
    if not name:
        return None
    if shared is not None:
        keys = [other for other in shared.get(name, ()) if other != key]
    else:
        others = scope.schedules(tenant.id).with_only_columns(Schedule.key)
        others = others.where(Schedule.name == name)
        if key is not None:
            others = others.where(Schedule.key != key)
        keys = sorted(db.session.scalars(others))
    if not keys:
        return None
    warning = f"another schedule is named “{name}” (key {', '.join(keys)})"
    if key is None:
        warning += f": this one gets the key {free_key(tenant, name)}"
    return warning


def lock_tenant(session: Session, tenant: Tenant) -> None:
    """Serialises the tenant's schedule changes (and token creations), so that two creations
    cannot both pass the quota or take the same key (PostgreSQL row lock; SQLite's write lock
    is already exclusive). FOR NO KEY UPDATE: the tick and Run now, inserting runs and audit
    rows of the tenant meanwhile, take FOR KEY SHARE on it through the foreign keys, which FOR
    UPDATE would make wait (a deadlock with a tick that holds a schedule this change then
    locks)."""
    tenant_row = select(Tenant.id).where(Tenant.id == tenant.id)
    session.execute(tenant_row.with_for_update(key_share=True))


def key_taken(tenant: Tenant, key: str) -> bool:
    return scope.schedule_by_key(tenant.id, key) is not None


def check_quota(tenant: Tenant, limits: Limits, adding: int) -> None:
    """The one quota rule (the form, the API, the import): ScheduleError if `adding` more
    schedules would take the tenant past its maximum."""
    if limits.max_schedules is None or adding <= 0:
        return
    existing = scope.schedule_count(tenant.id)
    if existing + adding > limits.max_schedules:
        raise ScheduleError(
            {
                "quota": f"tenant '{tenant.slug}' may have at most {limits.max_schedules} "
                f"schedules: it has {existing} and this adds {adding}"
            }
        )


@dataclass(frozen=True)
class NewSchedule:
    """A checked schedule (its key decided) and its owner: a tenant, or none for system scope."""

    asked: ScheduleIn
    tenant_id: int | None
    scope: Scope = "tenant"


def add_schedules(
    session: Session,
    new: Sequence[NewSchedule],
    actor: Actor,
    now: datetime,
    quota: tuple[Tenant, Limits] | None = None,
) -> list[Schedule]:
    """The one way schedules come to be (the form, the API, the import, the catalog's
    defaults), inside the caller's transaction: the tenant's quota when `quota` is given, the
    rows with their first fire time after `now`, a `schedule.created` audit event each, and the
    workers woken when the transaction commits."""
    if not new:
        return []
    if quota is not None:
        check_quota(*quota, adding=len(new))
    calendars = calendar_ids(quota[0].id) if quota is not None else {}
    rows = []
    for item in new:
        values = stored_values(item.asked, calendars)
        spec = cron.validate(item.asked.cron, item.asked.time_zone)
        first = first_take(
            spec, values["calendar_id"], item.asked.calendar_policy, spec.next_fire_after(now)
        )
        rows.append(
            {
                **values,
                "tenant_id": item.tenant_id,
                "scope": item.scope,
                "next_run_at": first,
                "created_by": actor.user_id,
            }
        )
    statement = insert(Schedule).returning(Schedule, sort_by_parameter_order=True)
    schedules = list(session.scalars(statement, rows))
    events = [
        audit_row(actor, "schedule.created", s, after=schedule_snapshot(s)) for s in schedules
    ]
    session.execute(insert(AuditEvent), events)
    notify_workers(session)
    return schedules


@retry_lost_race
def create_schedule(
    tenant: Tenant, data: Mapping[str, object], actor: Actor, now: datetime
) -> Schedule:
    """Validates and stores a new schedule in the tenant, with its audit event."""
    with write_transaction(db.session) as session:
        lock_tenant(session, tenant)
        limits = tenant_limits(tenant)
        asked = ScheduleIn.check(data, tenant_rules(limits, now, tenant.id))
        key = asked.key or free_key(tenant, asked.name)
        if key_taken(tenant, key):
            raise ScheduleError({"key": f"a schedule with key '{key}' already exists"})
        new = NewSchedule(asked.model_copy(update={"key": key}), tenant.id)
        [schedule] = add_schedules(session, [new], actor, now, quota=(tenant, limits))
    return schedule


# Asked of a schedule as it is once the change holds its lock (an API client's If-Match): it
# raises to refuse the change.
Precondition = Callable[[Schedule], None]


@retry_lost_race
def update_schedule(
    schedule: Schedule,
    data: Mapping[str, object],
    actor: Actor,
    now: datetime,
    precondition: Precondition | None = None,
) -> Schedule:
    """Applies an edit; the cadence restarts from now only if the cron or the zone changed."""
    with write_transaction(db.session) as session:
        tenant = schedule.tenant
        assert tenant is not None
        lock_tenant(session, tenant)
        if precondition is not None:
            session.refresh(schedule)  # as it is now that changes wait for this one
            precondition(schedule)
        asked = ScheduleIn.check(data, tenant_rules(tenant_limits(tenant), now, tenant.id))
        key = asked.key or schedule.key
        if key != schedule.key and key_taken(tenant, key):
            raise ScheduleError({"key": f"a schedule with key '{key}' already exists"})
        before = schedule_snapshot(schedule)
        take_back_fires_ahead(session, schedule, now)
        stored = stored_values(asked, calendar_ids(tenant.id))
        values = {
            **stored,
            "key": key,
            **restart_cadence(schedule, asked, now, stored["calendar_id"]),
        }
        for name, value in values.items():
            setattr(schedule, name, value)
        session.expire(schedule, ["calendar_row"])  # read again by the new calendar_id
        old, new = changed_fields(before, schedule_snapshot(schedule))
        if new:
            record(session, audit_row(actor, "schedule.updated", schedule, old, new))
        notify_workers(session)
    return schedule


@retry_lost_race
def delete_schedule(
    schedule: Schedule, actor: Actor, precondition: Precondition | None = None
) -> None:
    """Deletes the schedule; its run history stays."""
    with write_transaction(db.session) as session:
        if precondition is not None:
            tenant = schedule.tenant
            assert tenant is not None
            lock_tenant(session, tenant)
            session.refresh(schedule)
            precondition(schedule)
        record(
            session,
            audit_row(actor, "schedule.deleted", schedule, before=schedule_snapshot(schedule)),
        )
        withdraw_fires_ahead(session, [schedule.id])
        db.session.delete(schedule)


@retry_lost_race
def pause_schedule(schedule: Schedule, actor: Actor) -> None:
    with write_transaction(db.session) as session:
        if not schedule.active:
            return
        take_back_fires_ahead(session, schedule)
        schedule.active = False
        record(
            session,
            audit_row(actor, "schedule.paused", schedule, {"active": True}, {"active": False}),
        )


@retry_lost_race
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
            fire = spec.next_fire_after(now)
            policy = schedule.calendar_policy
            schedule.next_run_at = first_take(spec, schedule.calendar_id, policy, fire)
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


def runnable_job(schedule: Schedule) -> JobSpec:
    """The schedule's job if a run of it may be queued (Run now, a backfill), or ScheduleError:
    the job is in the catalog, of the schedule's scope, and its arguments within the size limits
    (arguments stored before the limits, or over lowered ones, are not copied again)."""
    try:
        spec = current_catalog().get(schedule.job)
    except UnknownJobError as error:
        raise ScheduleError({"job": str(error)}) from None
    refused = spec.scope_problem(schedule.scope)
    if refused:
        raise ScheduleError({"job": refused})
    too_large = size_errors(schedule.args, settings().args_limits)
    if too_large:
        raise ScheduleError({args_path(path): message for path, message in too_large})
    return spec


@retry_lost_race
def run_now(schedule: Schedule, actor: Actor, now: datetime, at: datetime | None = None) -> Run:
    """Queues a manual run (at `at`, or now) without touching the schedule's cadence.

    With the overlap policy `skip`, a run while an earlier one is unfinished is recorded as
    skipped, so that the history explains why nothing ran.
    """
    if at is not None:
        refused = run_at_problem(at, now, schedule.time_zone)
        if refused:
            raise ScheduleError({"at": refused})
    with write_transaction(db.session) as session:
        spec = runnable_job(schedule)
        start = at or now
        busy = schedule.overlap_policy == "skip" and bool(
            claims.schedules_with_unfinished_runs(session, [schedule.id])
        )
        row = manual_run_row(schedule, start, now, spec.max_attempts, actor.user_id, busy)
        event = audit_row(actor, "schedule.run_now", schedule, after={"at": start.isoformat()})
        if is_postgresql(session):  # the run, its audit event and the wake-up: one statement
            run_id = runs.insert_manual_run_audited(session, row, event)
        else:
            run_id = runs.insert_manual_run(session, row)
            record(session, {**event, "after": {"run_id": run_id, **event["after"]}})
            notify_workers(session)
    run: Run | None = db.session.get(Run, run_id)
    assert run is not None
    return run


def run_at_problem(at: datetime, now: datetime, time_zone: str) -> str | None:
    """Why a run may not be queued for `at` (shown in the schedule's zone), or None: the one
    rule of the panel's "Run once later", the API's `at` and `schedule run --at`."""
    if at < now:
        return f"{local_label(at, time_zone)} is in the past"
    if at - now > RUN_AT_HORIZON:
        return (
            f"{local_label(at, time_zone)} is more than a year ({RUN_AT_HORIZON.days} days) "
            "from now"
        )
    return None


@dataclass(frozen=True)
class CronPreview:
    description: str
    fires: list[PreviewFire]
    clock_changes: list[cron.ClockChange]  # the zone's next two, and what the schedule does
    no_clock_changes: str | None  # what to say instead when the zone has none
    time_zone: str  # the zone as it is named (`europe/berlin` asked: `Europe/Berlin`)
    jitter: str | None = None  # how late after its fire time each run may start, in words
    jitter_error: str | None = None  # the jitter asked for is out of the schedule's bounds
    zone_warning: str | None = None  # a legacy fixed offset (cron.zone_warning)
    interval_error: str | None = None  # fires more often than the tenant allows: refused on save


class PreviewFire(NamedTuple):
    at: datetime  # UTC
    label: str  # local
    note: str | None  # how a DST change moved it
    mark: CalendarMark | None  # what the schedule's calendar does to it


def local_label(moment: datetime, time_zone: str) -> str:
    local = moment.astimezone(ZoneInfo(time_zone))
    offset = local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()} ({offset[:3]}:{offset[3:]})"


def jitter_words(
    spec: cron.CronSpec, own: int | None, tenant_default: int | None, now: datetime
) -> tuple[str | None, str | None]:
    """The preview's jitter line and the error of the jitter asked for (at most one of them):
    the schedule's own, else the tenant's default, capped as the tick caps it."""
    if own is not None:
        refused = jitter_problem(own, spec, now)
        if refused:
            return None, refused
    seconds = effective_jitter(own, tenant_default, spec.expression, spec.tz, now)
    if seconds <= 0:
        return None, None
    line = f"Each run starts up to {seconds} s after its fire time (spread per fire"
    if own is None:
        capped = seconds < (tenant_default or 0)
        line += f"; the tenant's default of {tenant_default} s"
        line += ", shortened for this schedule)" if capped else ")"
    else:
        line += ")"
    return line, None


def preview_cron(
    expression: str,
    time_zone: str,
    now: datetime,
    count: int = 5,
    start: date | None = None,
    jitter: int | None = None,
    tenant_jitter: int | None = None,
    min_interval: int | None = None,
    calendar: BusinessCalendar | None = None,
    policy: CalendarPolicy = "skip",
) -> CronPreview:
    """The description, the next fire times after ``now`` (or from the start of the local day
    ``start``) and the zone's next clock changes, or ScheduleError naming the field at fault;
    with the refusal a save would meet when it fires more often than ``min_interval`` (the
    tenant's limit) allows; with a business `calendar`, each fire marked as `policy` treats it
    (skipped or moved, and why: calendar_marks)."""
    try:
        time_zone = cron.check_time_zone(time_zone)
    except cron.CronError as error:
        raise ScheduleError({"time_zone": str(error)}) from None
    try:
        spec = cron.validate(expression, time_zone)
    except cron.CronError as error:
        raise ScheduleError({"cron": str(error)}) from None
    interval_error = interval_problem(spec, min_interval, now)  # as a save now would find
    if start is not None:
        # Fires are whole minutes: just before local midnight includes a fire at 00:00.
        midnight = datetime(start.year, start.month, start.day)
        now = cron.wall_time_to_utc(midnight, time_zone) - timedelta(microseconds=1)
    fires = [spec.next_fire_after(now)]
    if count > 1:
        fires += spec.fire_times_between(fires[0], fires[0] + timedelta(days=3660), count - 1)
    changes = cron.clock_changes(spec, now)
    jitter_line, jitter_error = jitter_words(spec, jitter, tenant_jitter, now)
    return CronPreview(
        description=cron.describe(spec),
        fires=[
            PreviewFire(fire, local_label(fire, time_zone), spec.dst_note(fire), mark)
            for fire, mark in zip(fires, calendar_marks(fires, spec, calendar, policy), strict=True)
        ],
        clock_changes=changes,
        no_clock_changes=None if changes else cron.no_clock_changes(time_zone),
        time_zone=time_zone,
        jitter=jitter_line,
        jitter_error=jitter_error,
        zone_warning=cron.zone_warning(time_zone),
        interval_error=interval_error,
    )


def find_schedule(tenant: Tenant, key: str) -> Schedule:
    schedule = scope.schedule_by_key(tenant.id, key)
    if schedule is None:
        raise ScheduleError({"key": f"tenant '{tenant.slug}' has no schedule with key '{key}'"})
    return schedule
