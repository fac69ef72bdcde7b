"""The reads of the schedule pages: a page of the list, a schedule with its trail and runs.

Each takes the tenant's id and runs statements built once (the list's once per shape of its
filters) with the tenant as a bound parameter (webapp.services.scope): a statement holding no
value cannot hold another tenant's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    func,
    literal,
    null,
    or_,
    select,
    true,
    union_all,
)
from sqlalchemy.orm import Session, aliased, load_only

from webapp.database import UTCDateTime, contains_text, like_pattern
from webapp.models import AuditEvent, Run, Schedule
from webapp.services import scope
from webapp.services.history import HistoryRow, history_query, history_row
from webapp.services.notifications import recent_notifications
from webapp.services.upcoming import ONE_OFF


def time_has_come(now: Any) -> ColumnElement[bool]:
    """A run whose time has come: its fire time, or the time it was asked for, is not after
    `now`: it started, ended, or waits to start. "Last run" is the latest of these and a
    schedule's history starts with them; a run for later (a one-off queued for tomorrow, even
    cancelled, or a fire queued ahead) is not a last run: one-offs wait in their own list."""
    return Run.scheduled_for <= now


@dataclass(frozen=True, slots=True)
class LastRun:
    """The latest run of a listed schedule: what its status badge shows (the status_badge macro
    takes a model or anything with these attributes)."""

    id: int
    status: str
    started_at: datetime | None
    finished_at: datetime | None
    trigger: str  # with available_at: how often its live badge polls (a Run now's faster)
    available_at: datetime


# What the list loads of a last run besides its id (LastRun's other fields, in order).
LAST_RUN_COLUMNS = (Run.status, Run.started_at, Run.finished_at, Run.trigger, Run.available_at)


class ListedSchedule(NamedTuple):
    """A schedule as its row in the list shows it (templates/schedules/_rows.html)."""

    id: int
    tenant_id: int
    key: str
    name: str
    job: str
    cron: str
    time_zone: str
    active: bool
    inactive_reason: str | None
    next_run_at: datetime | None
    overdue_since: datetime | None  # the watchdog's flag (an overdue run: the badge)


@dataclass(frozen=True)
class ListPage:
    schedules: list[ListedSchedule]  # by name, then id; at most the page's size
    last_runs: dict[int, LastRun]  # by schedule id, for those that ran
    more: bool  # a next page starts after the last schedule
    shared_names: set[str]  # names of the page that another of the tenant's schedules has too


# The tenant of the statements built once (the list's, the schedule page's).
TENANT_ID = bindparam("tenant_id", type_=Integer)


@functools.cache
def list_statement(search: bool, job: bool, active: bool | None, after: bool) -> Select[Any]:
    """The list's statement for one shape of its filters, built once (building it cost the page
    more than an eighth of its time: bench/README), every value a bound parameter: TENANT_ID,
    `:now`, `:size` and, as the shape says, `:search`, `:job`, `:after_name` and `:after_id`
    (`active` is part of the shape: three values). See list_page."""
    latest = (
        select(func.max(Run.id))
        .where(
            Run.schedule_id == Schedule.id,
            Run.tenant_id == Schedule.tenant_id,
            time_has_come(bindparam("now", type_=UTCDateTime)),
        )
        .scalar_subquery()
    )
    other = aliased(Schedule)
    shares_name = (
        select(other.id)
        .where(
            other.tenant_id == Schedule.tenant_id,
            other.name == Schedule.name,
            other.id != Schedule.id,
        )
        .exists()
    )
    query = scope.schedules(TENANT_ID)
    if search:
        query = query.where(contains_text(Schedule.name, "search"))
    if job:
        query = query.where(Schedule.job == bindparam("job", type_=String))
    if active is not None:
        query = query.where(Schedule.active == active)
    if after:
        name = bindparam("after_name", type_=String)
        schedule_id = bindparam("after_id", type_=Integer)
        query = query.where(
            or_(Schedule.name > name, and_(Schedule.name == name, Schedule.id > schedule_id))
        )
    page = (
        query.with_only_columns(*(getattr(Schedule, field) for field in ListedSchedule._fields))
        .add_columns(latest.label("last_run_id"), shares_name.label("shares_name"))
        .order_by(Schedule.name, Schedule.id)
        .limit(bindparam("size", type_=Integer))
        .subquery()
    )
    return (
        select(page, *LAST_RUN_COLUMNS)
        .outerjoin(Run, Run.id == page.c.last_run_id)
        .order_by(page.c.name, page.c.id)
    )


def list_page(
    session: Session,
    tenant_id: int,
    size: int,
    now: datetime,
    *,
    search: str = "",
    job: str = "",
    active: bool | None = None,
    after: tuple[str, int] | None = None,
) -> ListPage:
    """A page of the tenant's schedules by name and id (`search`: in the name, whatever the
    case; `after`: the previous page's last (name, id)), with the last run of each that has one
    (time_has_come at `now`) and whether another schedule has its name, in one statement: the
    last run's id and the other name are subqueries per listed schedule (index probes, after
    the LIMIT), the run joined. Columns, not models:
    loading each schedule whole (its arguments decoded from JSON, its notification settings)
    and its run as objects cost more than rendering the row."""
    values: dict[str, Any] = {"tenant_id": tenant_id, "now": now, "size": size + 1}
    if search:
        values["search"] = like_pattern(search)
    if job:
        values["job"] = job
    if after is not None:
        values["after_name"], values["after_id"] = after
    statement = list_statement(bool(search), bool(job), active, after is not None)
    rows = session.execute(statement, values).all()
    width = len(ListedSchedule._fields)
    return ListPage(
        schedules=[ListedSchedule._make(row[:width]) for row in rows[:size]],
        last_runs={
            row.id: LastRun(row.last_run_id, *row[width + 2 :])
            for row in rows[:size]
            if row.last_run_id is not None
        },
        more=len(rows) > size,
        shared_names={row.name for row in rows[:size] if row.shares_name},
    )


def shared_names(session: Session, tenant_id: int, names: set[str]) -> set[str]:
    """Which of `names` more than one of the tenant's schedules has: their rows show their keys,
    which tell them apart (one statement on the tenant's name index)."""
    if not names:
        return set()
    query = (
        scope.schedules(tenant_id)
        .with_only_columns(Schedule.name)
        .where(Schedule.name.in_(names))
        .group_by(Schedule.name)
        .having(func.count() > 1)
    )
    return set(session.scalars(query))


def has_schedules(session: Session, tenant_id: int) -> bool:
    """Whether the tenant has any schedule (an empty page of the list says which it means)."""
    query = scope.schedules(tenant_id).with_only_columns(Schedule.id).limit(1)
    return session.scalar(query) is not None


def last_runs(
    session: Session, tenant_id: int, schedule_ids: list[int], now: datetime
) -> dict[int, Run]:
    """The last run of each schedule (time_has_come at `now`), by schedule id (one index probe
    per schedule)."""
    if not schedule_ids:
        return {}
    latest = (
        select(func.max(Run.id))
        .where(Run.tenant_id == tenant_id, Run.schedule_id.in_(schedule_ids), time_has_come(now))
        .group_by(Run.schedule_id)
    )
    # The status badge's columns only (not the output, which may be large).
    badge = load_only(Run.id, Run.schedule_id, *LAST_RUN_COLUMNS)
    runs = session.scalars(scope.runs(tenant_id).where(Run.id.in_(latest)).options(badge))
    return {run.schedule_id: run for run in runs if run.schedule_id is not None}


@dataclass(frozen=True)
class SentNotification:
    """A row of a schedule's notifications (templates/schedules/_notifications.html)."""

    id: int
    run_id: int | None
    event: str
    channel: str
    target: str
    status: str
    sent_at: datetime | None
    error: str | None


# What the schedule's audit trail and notifications show (besides id and time).
AUDIT_COLUMNS = (
    "tenant_id",
    "actor_id",
    "actor_label",
    "action",
    "object_type",
    "object_id",
    "object_label",
    "before",
    "after",
)
NOTIFICATION_COLUMNS = ("run_id", "event", "channel", "target", "status", "error")


@dataclass(frozen=True)
class ScheduleTrail:
    schedule: Schedule
    events: list[AuditEvent]  # newest first; never added to the session: shown, not saved
    notifications: list[SentNotification]  # newest first


# The schedule page's statements are named and built once, at import, with the tenant and the
# schedule as bound parameters: building their unions cost the page more than running them
# (bench/README), and a statement holding no value cannot hold another tenant's.
SCHEDULE_ID = bindparam("schedule_id", type_=Integer)


def trail_statement() -> Select[Any]:
    """The schedule (TENANT_ID's, SCHEDULE_ID) with its last `:events` audit events and its
    latest notifications beside it (both lists one UNION ALL joined to the schedule; one row of
    NULLs beside the schedule when it has neither)."""
    audit = (
        scope.audit_events(TENANT_ID)
        .where(AuditEvent.object_type == "schedule", AuditEvent.object_id == SCHEDULE_ID)
        .order_by(AuditEvent.id.desc())
        .limit(bindparam("events", type_=Integer))
        .subquery()
    )
    sent = recent_notifications(TENANT_ID, SCHEDULE_ID).subquery()
    # The audit events first: their columns' types read both parts (a NULL has none); the
    # notifications' own columns come after, NULL in the events' rows.
    trail = union_all(
        select(
            literal("audit").label("kind"),
            audit.c.id,
            audit.c.created_at.label("at"),
            *(audit.c[name] for name in AUDIT_COLUMNS),
            *(null().label(name) for name in NOTIFICATION_COLUMNS),
        ),
        select(
            literal("notification"),
            sent.c.id,
            sent.c.sent_at,
            *(null() for _ in AUDIT_COLUMNS),
            *(sent.c[name] for name in NOTIFICATION_COLUMNS),
        ),
    ).subquery("trail")
    return (
        scope.schedules(TENANT_ID)
        .where(Schedule.id == SCHEDULE_ID)
        .add_columns(*trail.c)
        .outerjoin(trail, true())
    )


TRAIL = trail_statement()


def schedule_with_trail(
    session: Session, tenant_id: int, schedule_id: int, events: int
) -> ScheduleTrail | None:
    """One of the tenant's schedules with its last `events` audit events and its latest
    notifications, in one statement (TRAIL), or None when it is not the tenant's."""
    values = {"tenant_id": tenant_id, "schedule_id": schedule_id, "events": events}
    rows = session.execute(TRAIL, values).all()
    if not rows:
        return None
    found = ScheduleTrail(rows[0][0], [], [])
    for row in rows:
        if row.kind == "audit":
            columns = {name: getattr(row, name) for name in AUDIT_COLUMNS}
            found.events.append(AuditEvent(id=row.id, created_at=row.at, **columns))
        elif row.kind == "notification":
            columns = {name: getattr(row, name) for name in NOTIFICATION_COLUMNS}
            found.notifications.append(SentNotification(id=row.id, sent_at=row.at, **columns))
    found.events.sort(key=lambda event: event.id, reverse=True)
    found.notifications.sort(key=lambda item: item.id, reverse=True)
    return found


def runs_statement() -> CompoundSelect[Any]:
    """The schedule's (TENANT_ID's, SCHEDULE_ID) latest `:latest` runs whose time has come at
    `:now` (time_has_come), newest first, and its queued one-off runs for later (at most
    `:waiting`) by start time, in one UNION ALL; each part in its own subquery: SQLite allows
    no LIMIT on a member of a UNION."""
    runs = scope.runs(TENANT_ID).where(Run.schedule_id == SCHEDULE_ID)
    has_come = time_has_come(bindparam("now", type_=UTCDateTime))
    latest = (
        history_query(runs.where(has_come))
        .order_by(Run.id.desc())
        .limit(bindparam("latest", type_=Integer))
        .subquery()
    )
    waiting = (
        history_query(runs.where(*ONE_OFF, ~has_come))
        .order_by(Run.available_at, Run.id)
        .limit(bindparam("waiting", type_=Integer))
        .subquery()
    )
    return union_all(
        select(literal(True).label("latest"), *latest.c), select(literal(False), *waiting.c)
    )


RUNS = runs_statement()


def schedule_runs(
    session: Session, tenant_id: int, schedule_id: int, size: int, now: datetime
) -> tuple[list[HistoryRow], list[HistoryRow]]:
    """The schedule's latest `size` + 1 runs whose time has come at `now` (the last tells that
    there are more), newest first, and its queued one-off runs for later (at most `size`) by
    start time, in one statement (RUNS). A Run now is never a one-off: its time is its click."""
    values = {
        "tenant_id": tenant_id,
        "schedule_id": schedule_id,
        "now": now,
        "latest": size + 1,
        "waiting": size,
    }
    rows = session.execute(RUNS, values).all()
    newest = sorted((history_row(row[1:]) for row in rows if row.latest), key=lambda r: -r.id)
    one_offs = sorted(
        (history_row(row[1:]) for row in rows if not row.latest),
        key=lambda run: (run.available_at, run.id),
    )
    return newest, one_offs
