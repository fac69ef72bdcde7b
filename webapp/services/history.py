"""The run history: its filters (one rule for the panel's history page and the API's run list)
and the panel's reads of it (a page of runs with the schedule filter's options, a run's page)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    and_,
    bindparam,
    case,
    func,
    literal,
    null,
    select,
    union_all,
)
from sqlalchemy.orm import Session, defer, joinedload

from webapp.database import UTCDateTime, contains_text, like_pattern
from webapp.models import AuditEvent, Run, Schedule, User, Worker, run_status_is, run_trigger_is
from webapp.run_rules import meant_to_start
from webapp.services import scope


def local_midnight(day: date, time_zone: str) -> datetime:
    return datetime.combine(day, time.min, tzinfo=ZoneInfo(time_zone))


# Each filter's condition on a parameter of its name (filter_values), but for the status and
# the trigger, written into the statement's text (a partial index serves the rare ones, on any
# plan: models.run_status_is): a few statements more, each planned for its value.
CONDITIONS: dict[str, Callable[[Any], ColumnElement[bool]]] = {
    "schedule_id": lambda value: Run.schedule_id == bindparam("schedule_id", value, Integer),
    "status": run_status_is,
    "trigger": run_trigger_is,
    "since": lambda value: Run.scheduled_for >= bindparam("since", value, UTCDateTime),
    "until": lambda value: Run.scheduled_for < bindparam("until", value, UTCDateTime),
    "due_by": lambda value: Run.scheduled_for <= bindparam("due_by", value, UTCDateTime),
    "before": lambda value: Run.id < bindparam("before", value, Integer),
}


def filter_values(
    time_zone: str,
    *,
    schedule_id: int | None = None,
    status: str | None = None,
    trigger: str | None = None,
    since: date | None = None,
    until: date | None = None,
    before: int | None = None,
    due_by: datetime | None = None,
) -> dict[str, Any]:
    """The parameters of the filters given: one schedule, a status, a trigger, fire times from
    the local day `since` through the local day `until` (in `time_zone`), and ids below
    `before` (the next page, newest first), and only runs whose time has come by `due_by` (a
    one-off planned for later is not history yet: Next runs lists it)."""
    values: dict[str, Any] = {
        "schedule_id": schedule_id,
        "status": status or None,
        "trigger": trigger or None,
        "since": local_midnight(since, time_zone) if since else None,
        "until": local_midnight(until + timedelta(days=1), time_zone) if until else None,
        "before": before,
        "due_by": due_by,
    }
    return {name: value for name, value in values.items() if value is not None}


def run_conditions(values: Mapping[str, Any]) -> list[ColumnElement[bool]]:
    """The conditions of the filters named in `values` (see filter_values), bound to them."""
    return [CONDITIONS[name](value) for name, value in values.items()]


def filter_runs(query: Select[Run], values: Mapping[str, Any]) -> Select[Run]:
    """`query` narrowed by the filters of `values` (filter_values)."""
    return query.where(*run_conditions(values))


# What a history row shows (templates/runs/_rows.html), loaded as a HistoryRow: 50 ORM objects
# with their schedules cost more to load than the whole page to render.
HISTORY_COLUMNS = (
    Run.id,
    Run.schedule_id,
    Run.job,
    Run.trigger,
    Run.scheduled_for,
    Run.status,
    Run.attempt,
    Run.fires_covered,
    Run.started_at,
    Run.finished_at,
    Run.available_at,  # a queued run waiting longer than the overdue grace says so
    Schedule.name.label("schedule_name"),
    meant_to_start().label("meant_at"),  # its lag is measured from it
    # Why a skipped run was skipped (a business calendar's day, an overlap); not a failure's
    # error, which may be large.
    case((Run.status == "skipped", Run.error), else_=None).label("skip_reason"),
)


class HistoryRow(NamedTuple):
    """A run as the history shows it (HISTORY_COLUMNS). A plain tuple: a template reads each
    row's attributes a dozen times, and a SQLAlchemy Row's attribute costs several times more."""

    id: int
    schedule_id: int | None
    job: str
    trigger: str
    scheduled_for: datetime
    status: str
    attempt: int
    fires_covered: int
    started_at: datetime | None
    finished_at: datetime | None
    available_at: datetime
    schedule_name: str | None  # None once the schedule is gone
    meant_at: datetime  # when it was meant to start (models.meant_to_start)
    skip_reason: str | None  # why a skipped run was skipped


def history_query(query: Select[Run]) -> Select[*tuple[Any, ...]]:
    """`query` (a scope.runs() query) selecting HISTORY_COLUMNS: only the columns a row shows
    (not the output, error or arguments, which may be large) and its schedule's name, joined
    in the same statement while the schedule is still the tenant's."""
    same_schedule = and_(Schedule.id == Run.schedule_id, Schedule.tenant_id == Run.tenant_id)
    return query.with_only_columns(*HISTORY_COLUMNS).outerjoin_from(Run, Schedule, same_schedule)


def history_row(row: Any) -> HistoryRow:
    """A HistoryRow of the first len(HISTORY_COLUMNS) columns of `row`."""
    return HistoryRow._make(row[: len(HISTORY_COLUMNS)])


def history_run(session: Session, tenant_id: int, run_id: int) -> HistoryRow | None:
    """One of the tenant's runs as its history row shows it (a live row polls itself)."""
    row = session.execute(history_query(scope.runs(tenant_id).where(Run.id == run_id))).first()
    return None if row is None else history_row(row)


@dataclass(frozen=True)
class History:
    runs: list[HistoryRow]  # newest first, at most page_size
    next_before: int | None  # where "Load older runs" starts, if there are older ones
    options: list[tuple[int, str]]  # the schedule filter's: (id, name) by name
    more_options: bool  # more schedules match than the filter offers
    chosen: tuple[int, str] | None  # the schedule the history is filtered to: (id, name)


# Which part of read_history's statement a row is of.
PART_RUN, PART_OPTION, PART_CHOSEN = "run", "option", "chosen"


def read_history(
    session: Session,
    tenant_id: int,
    filters: Mapping[str, Any] | None,
    *,
    page_size: int,
    options: int = 0,
    find: str = "",
    chosen: int | None = None,
) -> History:
    """A page of the tenant's runs (with the filters of `filters`, see filter_values; None: no
    runs), the first `options` schedules by name for the schedule filter (narrowed by `find`,
    "Find a schedule"), and the filter's chosen schedule (`chosen`, an id): one UNION
    ALL, each part in a subquery of its own (SQLite allows no LIMIT on a member of a UNION);
    schedules fill the runs' id and schedule_name columns, `place` an option's place by name.

    A page walks ix_runs_tenant_history or ix_runs_schedule_history backwards from `before`:
    no OFFSET, no COUNT, the same cost on page 1 and page 10,000."""
    names = [column.key for column in HISTORY_COLUMNS]
    parts: list[Select[Any]] = []
    if filters is not None:
        runs = scope.runs(tenant_id).where(*run_conditions(filters))
        page = history_query(runs).order_by(Run.id.desc()).limit(page_size + 1).subquery("page")
        parts.append(select(literal(PART_RUN).label("part"), *page.c, null().label("place")))

    def schedules_part(part: str, schedules: Any, place: Any) -> Select[Any]:
        columns: list[Any] = [null().label(name) for name in names]
        columns[names.index("id")] = schedules.c.id
        columns[names.index("schedule_name")] = schedules.c.name.label("schedule_name")
        return select(literal(part).label("part"), *columns, place.label("place"))

    if options:
        offered = scope.schedules(tenant_id).with_only_columns(Schedule.id, Schedule.name)
        if find:
            offered = offered.where(contains_text(Schedule.name, "find"))
        listed = offered.order_by(Schedule.name, Schedule.id).limit(options + 1).subquery("offered")
        place = func.row_number().over(order_by=(listed.c.name, listed.c.id))
        parts.append(schedules_part(PART_OPTION, listed, place))
    if chosen is not None:
        the_schedule = (
            scope.schedules(tenant_id)
            .with_only_columns(Schedule.id, Schedule.name)
            .where(Schedule.id == chosen)
            .subquery("chosen")
        )
        parts.append(schedules_part(PART_CHOSEN, the_schedule, null()))
    statement = union_all(*parts) if len(parts) > 1 else parts[0]
    values = {"find": like_pattern(find)} if options and find else {}
    rows = session.execute(statement, values).all()
    newest = sorted(
        (history_row(row[1:]) for row in rows if row.part == PART_RUN), key=lambda row: -row.id
    )
    offered_rows = sorted(
        (row for row in rows if row.part == PART_OPTION), key=lambda row: row.place
    )
    found = next(((row.id, row.schedule_name) for row in rows if row.part == PART_CHOSEN), None)
    return History(
        runs=newest[:page_size],
        next_before=newest[page_size - 1].id if len(newest) > page_size else None,
        options=[(row.id, row.schedule_name) for row in offered_rows[:options]],
        more_options=len(offered_rows) > options,
        chosen=found,
    )


@dataclass(frozen=True)
class RunPage:
    run: Run
    meant_at: datetime  # when it was meant to start (models.meant_to_start): its lag's origin
    # Who pressed Run now, as the audit log names them (else the user, once the event is gone).
    requested_by: str | None


def requester_label() -> ColumnElement[str | None]:
    """Who pressed Run now for the outer statement's run, as its `schedule.run_now` audit event
    names them (an email, "token aed7bb0d (ci)", "cli"); NULL for other runs, or once the
    schedule or the event is gone."""
    event = (
        select(AuditEvent.actor_label)
        .where(
            AuditEvent.tenant_id == Run.tenant_id,
            AuditEvent.object_type == "schedule",
            AuditEvent.object_id == Run.schedule_id,
            AuditEvent.action == "schedule.run_now",
            AuditEvent.after["run_id"].as_integer() == Run.id,
        )
        .limit(1)
        .scalar_subquery()
    )
    return case((Run.trigger == "manual", event), else_=null())


def run_for_page(session: Session, tenant_id: int, run_id: int) -> RunPage | None:
    """One of the tenant's runs for its page, in one statement with its schedule's name, its
    worker, when it was meant to start, who pressed Run now and who cancelled it. Never
    runs.error_detail: the full traceback is for operators, not tenants."""
    statement = (
        scope.runs(tenant_id)
        .add_columns(meant_to_start(), requester_label())
        .where(Run.id == run_id)
        .options(
            defer(Run.error_detail),
            joinedload(Run.schedule).load_only(Schedule.id, Schedule.tenant_id, Schedule.name),
            joinedload(Run.worker).load_only(Worker.hostname, Worker.pid),
            joinedload(Run.requester).load_only(User.email),
            joinedload(Run.canceller).load_only(User.email),
        )
    )
    row = session.execute(statement).first()
    if row is None:
        return None
    run, meant_at, label = row
    return RunPage(run, meant_at, label or (run.requester.email if run.requester else None))
