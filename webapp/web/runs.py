"""Run history: tenant-wide and per schedule, keyset-paginated; run detail and live status."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from flask import Blueprint, abort, current_app, request, url_for
from flask_login import login_required
from sqlalchemy import Row, Select, and_, func
from sqlalchemy.orm import defer, joinedload
from werkzeug.wrappers import Response

from webapp.config import overdue_grace
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import RUN_STATUSES, TRIGGERS, Run, Schedule, User, Worker
from webapp.services.cancellation import CancelRefused, cancel_run
from webapp.services.history import filter_runs
from webapp.services.overdue import Waiting, waiting_runs
from webapp.web import tenancy
from webapp.web.auth import is_own_path
from webapp.web.common import actor, done, page_or_partial
from webapp.web.formatting import is_htmx, moment_settings
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


@dataclass
class RunFilters:
    status: str = ""
    trigger: str = ""
    schedule: Schedule | None = None
    since: date | None = None
    until: date | None = None
    before: int | None = None  # keyset: only runs with a smaller id
    schedule_query: str = ""  # "Find a schedule": narrows the schedule filter's options

    @classmethod
    def from_args(cls) -> RunFilters:
        """The filters in the query string; an invalid value answers 400 with a message."""
        filters = cls(
            status=choice_arg("status", RUN_STATUSES),
            trigger=choice_arg("trigger", TRIGGERS),
            since=date_arg("from"),
            until=date_arg("to"),
            before=id_arg("before"),
            schedule_query=schedule_query_arg(),
        )
        schedule_id = id_arg("schedule")
        if schedule_id is not None:
            filters.schedule = tenancy.get_schedule_or_404(schedule_id)
        return filters

    def apply(self, query: Select[Run], time_zone: str) -> Select[Run]:
        return filter_runs(
            query,
            time_zone,
            schedule_id=self.schedule.id if self.schedule is not None else None,
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
            "schedule": self.schedule.id if self.schedule else "",
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


def schedule_options(filters: RunFilters) -> tuple[list[tuple[int, str]], bool]:
    """(id, name) of the schedules the filter offers, by name, and whether more match.

    Only two columns of at most SCHEDULE_OPTIONS + 1 rows: a tenant with 10,000 schedules
    gets the first ones by name and "Find a schedule" narrows the list, rather than a page of
    10,000 options. The chosen schedule is always an option (the template adds it)."""
    query = tenancy.schedules().with_only_columns(Schedule.id, Schedule.name)
    if filters.schedule_query:
        query = query.where(
            func.lower(Schedule.name).contains(filters.schedule_query.lower(), autoescape=True)
        )
    rows = db.session.execute(
        query.order_by(Schedule.name, Schedule.id).limit(SCHEDULE_OPTIONS + 1)
    ).all()
    options = [(row.id, row.name) for row in rows[:SCHEDULE_OPTIONS]]
    return options, len(rows) > SCHEDULE_OPTIONS


def history_rows(query: Select[Run], limit: int) -> list[Row[Any]]:
    """At most `limit` runs of `query` (a tenancy.runs() query), newest first, as tuples of
    HISTORY_COLUMNS: only the columns a row shows (not the output, error or arguments, which
    may be large) and its schedule's name, joined in the same statement while the schedule is
    still the tenant's."""
    return list(db.session.execute(history_query(query).order_by(Run.id.desc()).limit(limit)))


def history_query(query: Select[Run]) -> Select[*tuple[Any, ...]]:
    """`query` (a tenancy.runs() query) selecting HISTORY_COLUMNS (see history_rows)."""
    same_schedule = and_(Schedule.id == Run.schedule_id, Schedule.tenant_id == Run.tenant_id)
    return query.with_only_columns(*HISTORY_COLUMNS).outerjoin_from(Run, Schedule, same_schedule)


def waiting(runs: list[Any]) -> dict[int, Waiting]:
    """The page's overdue queued runs, by id, with why they wait (one statement, and only
    when the page shows one)."""
    config = current_app.config
    lock_ttl = timedelta(seconds=float(config["SCHEDULER_LOCK_TTL"]))
    now = moment_settings()[1]  # the page's now, as its relative times
    return waiting_runs(db.session(), runs, now, overdue_grace(config), lock_ttl)


def history_page(filters: RunFilters) -> tuple[list[Row[Any]], int | None]:
    """One page, newest first, walking ix_runs_tenant_history or ix_runs_schedule_history
    backwards from `before`: no OFFSET, no COUNT, the same cost on page 1 and page 10,000."""
    tenant = tenancy.current_tenant()
    rows = history_rows(filters.apply(tenancy.runs(), tenant.time_zone), PAGE_SIZE + 1)
    next_before = rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None
    return rows[:PAGE_SIZE], next_before


@bp.get("/runs")
def index() -> Response:
    """The tenant's run history with filters; htmx loads older pages into the same table."""
    filters = RunFilters.from_args()
    runs, next_before = history_page(filters)
    partial = "runs/_rows.html" if filters.before is not None else "runs/_history.html"
    options, more_options = schedule_options(filters) if not is_htmx() else ([], False)
    return page_or_partial(
        "runs/index.html",
        partial,
        runs=runs,
        waiting=waiting(runs),
        next_before=next_before,
        filters=filters,
        # The page's table and the "Load older runs" rows (a fragment of _rows.html alone)
        # must have the same columns: the setting comes from here for both.
        show_schedule=True,
        schedule_options=options,
        more_schedule_options=more_options,
        statuses=RUN_STATUSES,
        triggers=TRIGGERS,
        tenant=tenancy.current_tenant(),
    )


@bp.get("/runs/schedule-options")
def schedule_filter() -> Response:
    """The schedule filter's <select>, narrowed by "Find a schedule" as the user types."""
    filters = RunFilters.from_args()
    options, more_options = schedule_options(filters)
    return page_or_partial(
        "runs/schedule_filter.html",
        "runs/_schedule_filter.html",
        filters=filters,
        schedule_options=options,
        more_schedule_options=more_options,
    )


@bp.get("/runs/<id:run_id>")
def detail(run_id: int) -> Response:
    """One run: timing, who asked for it, where it ran, arguments, output and error (escaped)."""
    return page_or_partial("runs/detail.html", "runs/_detail.html", **detail_context(run_id))


def detail_context(run_id: int) -> dict[str, Any]:
    """What the run's page shows; Cancel and Stop render it again after the change."""
    # One statement for the run, its schedule's name, its worker, who pressed Run now and who
    # cancelled it. Never runs.error_detail: the full traceback is for operators, not tenants.
    run = tenancy.get_run_or_404(
        run_id,
        defer(Run.error_detail),
        joinedload(Run.schedule).load_only(Schedule.id, Schedule.tenant_id, Schedule.name),
        joinedload(Run.worker).load_only(Worker.hostname, Worker.pid),
        joinedload(Run.requester).load_only(User.email),
        joinedload(Run.canceller).load_only(User.email),
    )
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
