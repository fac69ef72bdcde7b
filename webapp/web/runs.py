"""Run history: tenant-wide and per schedule, keyset-paginated; run detail and live status."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from flask import Blueprint, abort, current_app, request, url_for
from flask_login import login_required
from sqlalchemy import (
    Executable,
    Integer,
    Row,
    Select,
    Subquery,
    and_,
    bindparam,
    func,
    literal,
    null,
    select,
    union_all,
)
from sqlalchemy.orm import defer, joinedload
from werkzeug.wrappers import Response

from webapp.database import contains_text, like_pattern, utcnow
from webapp.extensions import db
from webapp.models import RUN_STATUSES, TRIGGERS, Run, Schedule, User, Worker
from webapp.services.cancellation import CancelRefused, cancel_run
from webapp.services.history import CONDITIONS, filter_values, run_conditions
from webapp.services.overdue import Waiting, waiting_runs
from webapp.web import tenancy
from webapp.web.auth import is_own_path
from webapp.web.common import actor, done, page_or_partial
from webapp.web.formatting import is_htmx, page_clock
from webapp.web.params import bad_request, choice_arg, date_arg, id_arg

bp = Blueprint("runs", __name__)
bp.before_request(login_required(lambda: None))

PAGE_SIZE = 50
# The schedule filter lists this many schedules (by name, those matching "Find a schedule" if
# typed) and the chosen one: a fixed cost whatever the number of schedules of the tenant.
SCHEDULE_OPTIONS = 50
MAX_SCHEDULE_QUERY = 200  # characters of "Find a schedule" (a name has at most 200)
# What a history row shows (templates/runs/_rows.html and _status.html), loaded as row tuples:
# 50 ORM objects with their schedules cost more to load than the whole page to render.
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
)
# Where else a status badge may stand (its DOM id says where): a schedule's page shows its last
# run twice, as the last run (`run-N-status`) and in its history (`run-N-history-status`).
STATUS_PLACES = ("history",)


@dataclass(frozen=True)
class ChosenSchedule:
    """The schedule that the history is filtered to: its heading and the filter's option."""

    id: int
    name: str


@dataclass
class RunFilters:
    status: str = ""
    trigger: str = ""
    schedule_id: int | None = None  # only this schedule's runs (404 unless it is the tenant's)
    schedule: ChosenSchedule | None = None  # read with the page (read_history)
    since: date | None = None
    until: date | None = None
    before: int | None = None  # keyset: only runs with a smaller id
    schedule_query: str = ""  # "Find a schedule": narrows the schedule filter's options

    @classmethod
    def from_args(cls) -> RunFilters:
        """The filters in the query string; an invalid value answers 400 with a message."""
        return cls(
            status=choice_arg("status", RUN_STATUSES),
            trigger=choice_arg("trigger", TRIGGERS),
            schedule_id=id_arg("schedule"),
            since=date_arg("from"),
            until=date_arg("to"),
            before=id_arg("before"),
            schedule_query=schedule_query_arg(),
        )

    def values(self, time_zone: str) -> dict[str, Any]:
        """The run filters' parameters (services.history.filter_values)."""
        return filter_values(
            time_zone,
            schedule_id=self.schedule_id,
            status=self.status,
            trigger=self.trigger,
            since=self.since,
            until=self.until,
            before=self.before,
        )

    def args(self, **changes: Any) -> dict[str, Any]:
        """The query string of these filters, for links (the next page, the filter form)."""
        values: dict[str, Any] = {
            "status": self.status,
            "trigger": self.trigger,
            "schedule": self.schedule_id if self.schedule_id is not None else "",
            "from": self.since.isoformat() if self.since else "",
            "to": self.until.isoformat() if self.until else "",
        }
        values.update(changes)
        return {key: value for key, value in values.items() if value not in ("", None)}


def schedule_query_arg() -> str:
    text = request.args.get("schedule_q", "").strip()
    if len(text) > MAX_SCHEDULE_QUERY or "\x00" in text:
        bad_request(f"“Find a schedule” takes at most {MAX_SCHEDULE_QUERY} characters.")
    return text


def schedule_options(find: bool) -> Select[int, str]:
    """(id, name) of the schedules the filter offers, by name: at most the parameter `options`
    (SCHEDULE_OPTIONS + 1: the last only tells that more match). A tenant with 10,000
    schedules gets the first ones by name and "Find a schedule" (`find`: the parameter
    schedule_query, like_pattern) narrows the list, rather than a page of 10,000 options. The
    chosen schedule is always an option (the template adds it)."""
    query = tenancy.schedules(tenancy.TENANT_ID).with_only_columns(Schedule.id, Schedule.name)
    if find:
        query = query.where(contains_text(Schedule.name, "schedule_query"))
    return query.order_by(Schedule.name, Schedule.id).limit(bindparam("options", type_=Integer))


def history_query(query: Select[Run]) -> Select[*tuple[Any, ...]]:
    """`query` (a tenancy.runs() query) selecting HISTORY_COLUMNS: only the columns a row shows
    (not the output, error or arguments, which may be large) and its schedule's name, joined
    in the same statement while the schedule is still the tenant's."""
    same_schedule = and_(Schedule.id == Run.schedule_id, Schedule.tenant_id == Run.tenant_id)
    return query.with_only_columns(*HISTORY_COLUMNS).outerjoin_from(Run, Schedule, same_schedule)


def waiting(runs: list[Any]) -> dict[int, Waiting]:
    """The page's overdue queued runs, by id, with why they wait (one statement, and only
    when the page shows one)."""
    lock_ttl = timedelta(seconds=float(current_app.config["SCHEDULER_LOCK_TTL"]))
    clock = page_clock()  # the page's now, as its relative times
    return waiting_runs(db.session(), runs, clock.now, clock.overdue_grace, lock_ttl)


@dataclass(frozen=True)
class History:
    runs: list[Row[Any]]  # newest first, at most PAGE_SIZE
    next_before: int | None  # where "Load older runs" starts, if there are older ones
    options: list[tuple[int, str]]  # the schedule filter's (schedule_options)
    more_options: bool  # more schedules match than the filter offers


# Which part of read_history's statement a row is of.
PART_RUN, PART_OPTION, PART_CHOSEN = "run", "option", "chosen"


@functools.cache
def history_statement(
    filtered: frozenset[str] | None, options: bool, find: bool, chosen: bool
) -> Executable:
    """read_history's statement: the page of runs with the run filters named in `filtered`
    (None: no runs), the schedule filter's options (`find`: narrowed by "Find a schedule"),
    the chosen schedule. One UNION ALL, each part in a subquery of its own (SQLite allows no
    LIMIT on a member of a UNION); schedules fill the runs' id and schedule_name columns, and
    `place` is an option's place by name. Built once per shape, its values bound at execution
    (see tenancy.TENANT_ID): building it costs more than running it."""
    names = [column.key for column in HISTORY_COLUMNS]
    parts: list[Select[Any]] = []
    if filtered is not None:
        runs = tenancy.runs(tenancy.TENANT_ID).where(
            *run_conditions(dict.fromkeys(sorted(filtered)))
        )
        size = bindparam("page_size", type_=Integer)
        page = history_query(runs).order_by(Run.id.desc()).limit(size).subquery("page")
        parts.append(select(literal(PART_RUN).label("part"), *page.c, null().label("place")))

    def schedules_part(part: str, schedules: Subquery, place: Any) -> Select[Any]:
        columns: list[Any] = [null().label(name) for name in names]
        columns[names.index("id")] = schedules.c.id
        columns[names.index("schedule_name")] = schedules.c.name.label("schedule_name")
        return select(literal(part).label("part"), *columns, place.label("place"))

    if options:
        offered = schedule_options(find).subquery("offered")
        place = func.row_number().over(order_by=(offered.c.name, offered.c.id))
        parts.append(schedules_part(PART_OPTION, offered, place))
    if chosen:
        the_schedule = (
            tenancy.schedules(tenancy.TENANT_ID)
            .with_only_columns(Schedule.id, Schedule.name)
            .where(Schedule.id == bindparam("schedule_id", type_=Integer))
            .subquery("chosen")
        )
        parts.append(schedules_part(PART_CHOSEN, the_schedule, null()))
    return union_all(*parts) if len(parts) > 1 else parts[0]


def read_history(filters: RunFilters, runs: bool, options: bool) -> History:
    """A page of the history (if `runs`), the schedule filter's options (if `options`) and the
    chosen schedule, in one statement (history_statement); 404 when the chosen schedule is not
    the tenant's.

    A page walks ix_runs_tenant_history or ix_runs_schedule_history backwards from `before`:
    no OFFSET, no COUNT, the same cost on page 1 and page 10,000."""
    values = filters.values(tenancy.current_tenant().time_zone) if runs else {}
    find = options and bool(filters.schedule_query)
    if find:
        values["schedule_query"] = like_pattern(filters.schedule_query)
    chosen = filters.schedule_id is not None
    if chosen:
        values["schedule_id"] = filters.schedule_id
    statement = history_statement(
        frozenset(values.keys() & CONDITIONS.keys()) if runs else None, options, find, chosen
    )
    limits = {"page_size": PAGE_SIZE + 1, "options": SCHEDULE_OPTIONS + 1}
    rows = db.session.execute(statement, tenancy.bound(**limits, **values)).all()
    if chosen:
        found = [row for row in rows if row.part == PART_CHOSEN]
        if not found:
            abort(404)
        filters.schedule = ChosenSchedule(found[0].id, found[0].schedule_name)
    newest = sorted((row for row in rows if row.part == PART_RUN), key=lambda row: -row.id)
    offered = sorted((row for row in rows if row.part == PART_OPTION), key=lambda row: row.place)
    return History(
        runs=newest[:PAGE_SIZE],
        next_before=newest[PAGE_SIZE - 1].id if len(newest) > PAGE_SIZE else None,
        options=[(row.id, row.schedule_name) for row in offered[:SCHEDULE_OPTIONS]],
        more_options=len(offered) > SCHEDULE_OPTIONS,
    )


@bp.get("/runs")
def index() -> Response:
    """The tenant's run history with filters; htmx loads older pages into the same table."""
    filters = RunFilters.from_args()
    history = read_history(filters, runs=True, options=not is_htmx())
    partial = "runs/_rows.html" if filters.before is not None else "runs/_history.html"
    return page_or_partial(
        "runs/index.html",
        partial,
        runs=history.runs,
        waiting=waiting(history.runs),
        next_before=history.next_before,
        filters=filters,
        # The page's table and the "Load older runs" rows (a fragment of _rows.html alone)
        # must have the same columns: the setting comes from here for both.
        show_schedule=True,
        schedule_options=history.options,
        more_schedule_options=history.more_options,
        statuses=RUN_STATUSES,
        triggers=TRIGGERS,
        tenant=tenancy.current_tenant(),
    )


@bp.get("/runs/schedule-options")
def schedule_filter() -> Response:
    """The schedule filter's <select>, narrowed by "Find a schedule" as the user types."""
    filters = RunFilters.from_args()
    history = read_history(filters, runs=False, options=True)
    return page_or_partial(
        "runs/schedule_filter.html",
        "runs/_schedule_filter.html",
        filters=filters,
        schedule_options=history.options,
        more_schedule_options=history.more_options,
    )


@bp.get("/runs/<id:run_id>")
def detail(run_id: int) -> Response:
    """One run: timing, who asked for it, where it ran, arguments, output and error (escaped)."""
    return page_or_partial("runs/detail.html", "runs/_detail.html", **detail_context(run_id))


@functools.cache
def run_page_statement() -> Select[Run]:
    """The run's page: one statement for the run, its schedule's name, its worker, who pressed
    Run now and who cancelled it; built once (tenancy.run_by_id). Never runs.error_detail: the
    full traceback is for operators, not tenants."""
    return tenancy.run_by_id().options(
        defer(Run.error_detail),
        joinedload(Run.schedule).load_only(Schedule.id, Schedule.tenant_id, Schedule.name),
        joinedload(Run.worker).load_only(Worker.hostname, Worker.pid),
        joinedload(Run.requester).load_only(User.email),
        joinedload(Run.canceller).load_only(User.email),
    )


def detail_context(run_id: int) -> dict[str, Any]:
    """What the run's page shows; Cancel and Stop render it again after the change."""
    run = tenancy.get_run_or_404(run_id, run_page_statement())
    schedule = run.schedule if run.schedule and run.schedule.tenant_id == run.tenant_id else None
    retry_due = run.status == "queued" and run.attempt > 0 and run.available_at > utcnow()
    return {
        "run": run,
        "schedule": schedule,
        "next_attempt_at": run.available_at if retry_due else None,
        "jitter_delay": jitter_delay(run),
        "waiting": waiting([run]).get(run.id),
        "tenant": tenancy.current_tenant(),
    }


@bp.post("/runs/<id:run_id>/cancel")
def cancel(run_id: int) -> Response:
    """Cancel a queued run, or ask a running one to stop (its job sees it at its next check)."""
    run = tenancy.get_rw_run_or_404(run_id)
    try:
        cancelled = cancel_run(run, actor(), utcnow())
    except CancelRefused as refused:
        abort(409, str(refused))
    if cancelled.outcome == "cancelled":
        message = f"Run #{run_id} cancelled: it will not start."
    else:
        message = f"Run #{run_id} asked to stop: its job stops when it next checks."
    target = request.form.get("next")
    back = target if target and is_own_path(target) else url_for("runs.detail", run_id=run_id)
    if request.form.get("place") == "upcoming":  # the row leaves Next runs
        return done(message, back)
    return done(message, back, "runs/_detail.html", **detail_context(run_id))


def jitter_delay(run: Run) -> int | None:
    """The seconds its schedule's jitter held a scheduled run back after its fire time, if it
    did: the tick set its available_at after the moment it was queued (without jitter both are
    the tick's now), and no retry or lost lease has moved it since (the first attempt)."""
    first_attempt = run.attempt == 0 or (run.attempt == 1 and run.status != "queued")
    if run.trigger == "manual" or not first_attempt or run.available_at <= run.queued_at:
        return None
    return int((run.available_at - run.scheduled_for).total_seconds())


@bp.get("/runs/<id:run_id>/status")
def status(run_id: int) -> Response:
    """The status badge of a run; it polls itself only while the run is queued or running."""
    run = tenancy.get_run_or_404(run_id)
    place = choice_arg("place", STATUS_PLACES)
    return page_or_partial("runs/status.html", "runs/_status.html", run=run, status_place=place)
