"""Run history: tenant-wide and per schedule, keyset-paginated; run detail and live status."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from flask import Blueprint, abort, request, url_for
from flask_login import login_required
from werkzeug.wrappers import Response

from webapp.config import settings
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import RUN_STATUSES, TRIGGERS, Run
from webapp.services.cancellation import CancelRefused, cancel_run
from webapp.services.history import (
    History,
    filter_values,
    history_run,
    read_history,
    run_for_page,
)
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
# Where else a status badge may stand (its DOM id says where): a schedule's page shows its last
# run twice, as the last run (`run-N-status`) and in its history (`run-N-history-status`).
STATUS_PLACES = ("history",)
# A live row of a run history polls itself whole (`row`): of the tenant's history (/runs, with
# the schedule column) or of a schedule's page (without it).
STATUS_ROWS = {"runs": True, "schedule": False}  # whether the row shows the schedule


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
    schedule: ChosenSchedule | None = None  # read with the page (history)
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
            due_by=page_clock().now,
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


def waiting(runs: list[Any]) -> dict[int, Waiting]:
    """The page's overdue runs, by id, with why they wait (a statement per kind of wait, and
    only when the page shows one)."""
    clock = page_clock()  # the page's now, as its relative times
    return waiting_runs(db.session(), runs, clock.now, clock.overdue_grace, settings().lock_ttl)


def read_page(filters: RunFilters, runs: bool, options: bool) -> History:
    """A page of the tenant's history (if `runs`) and the schedule filter's options (if
    `options`), in one statement (services.history.read_history); 404 when the chosen schedule
    is not the tenant's."""
    tenant = tenancy.current_tenant()
    read = read_history(
        db.session(),
        tenant.id,
        filters.values(tenant.time_zone) if runs else None,
        page_size=PAGE_SIZE,
        options=SCHEDULE_OPTIONS if options else 0,
        find=filters.schedule_query if options else "",
        chosen=filters.schedule_id,
    )
    if filters.schedule_id is not None:
        if read.chosen is None:
            abort(404)
        filters.schedule = ChosenSchedule(*read.chosen)
    return read


@bp.get("/runs")
def index() -> Response:
    """The tenant's run history with filters; htmx loads older pages into the same table."""
    filters = RunFilters.from_args()
    history = read_page(filters, runs=True, options=not is_htmx())
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
    history = read_page(filters, runs=False, options=True)
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


def detail_context(run_id: int) -> dict[str, Any]:
    """What the run's page shows; Cancel and Stop render it again after the change."""
    page = run_for_page(db.session(), tenancy.current_tenant().id, run_id)
    if page is None:
        abort(404)
    run = page.run
    schedule = run.schedule if run.schedule and run.schedule.tenant_id == run.tenant_id else None
    retry_due = run.status == "queued" and run.attempt > 0 and run.available_at > utcnow()
    return {
        "run": run,
        "meant_at": page.meant_at,
        "requested_by": page.requested_by,
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
    """The status badge of a run, or with `row` its history row; either polls itself only
    while the run is queued or running."""
    place = choice_arg("place", STATUS_PLACES)
    row = choice_arg("row", tuple(STATUS_ROWS))
    if not row:
        run = tenancy.get_run_or_404(run_id)
        return page_or_partial("runs/status.html", "runs/_status.html", run=run, status_place=place)
    tenant = tenancy.current_tenant()
    found = history_run(db.session(), tenant.id, run_id)
    if found is None:
        abort(404)
    return page_or_partial(
        "runs/status.html",
        "runs/_rows.html",
        run=found,
        runs=[found],
        waiting=waiting([found]),
        show_schedule=STATUS_ROWS[row],
        status_place=place,
        tenant=tenant,
    )
