"""Schedules: the list, the generated form with its live cron preview, detail and actions."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from flask import Blueprint, abort, current_app, request, url_for
from flask_login import login_required
from sqlalchemy import (
    BindParameter,
    Boolean,
    ColumnElement,
    CompoundSelect,
    Integer,
    Row,
    Select,
    String,
    and_,
    bindparam,
    func,
    literal,
    null,
    or_,
    select,
    tuple_,
    union_all,
)
from sqlalchemy.orm import load_only
from werkzeug.exceptions import BadRequest
from werkzeug.wrappers import Response

from webapp.catalog.current import current_catalog
from webapp.database import UTCDateTime, contains_text, like_pattern, utcnow
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule
from webapp.services.backfill import (
    MAX_BACKFILL_RUNS,
    PAUSED_LABEL,
    BackfillPlan,
    plan_backfill,
)
from webapp.services.backfill import (
    backfill as queue_backfill,
)
from webapp.services.notifications import recent_notifications
from webapp.services.schedule_stats import last_days
from webapp.services.schedules import (
    ScheduleError,
    create_schedule,
    delete_schedule,
    local_label,
    pause_schedule,
    preview_cron,
    resume_schedule,
    run_now,
    update_schedule,
    wall_time_to_utc,
)
from webapp.services.upcoming import Cursor, Fire, by_day, upcoming_fires
from webapp.web import tenancy
from webapp.web.auth import is_own_path
from webapp.web.charts import days_figures
from webapp.web.common import actor, done, htmx_redirect, page_or_partial
from webapp.web.formatting import (
    id_url,
    is_htmx,
    shown_zone,
)
from webapp.web.forms import (
    FIELD_LABELS,
    MISFIRE_CHOICES,
    OVERLAP_CHOICES,
    ScheduleForm,
    default_args,
    job_spec,
    optional_number,
)
from webapp.web.params import bad_request, choice_arg, date_arg, id_arg, shown
from webapp.web.runs import history_query, waiting
from webapp.web.time_zones import time_zone_names

bp = Blueprint("schedules", __name__)
bp.before_request(login_required(lambda: None))


@bp.app_context_processor
def form_labels() -> dict[str, Any]:
    """The schedule form's labels, for the form and for the audit trail's field names."""
    return {"field_labels": FIELD_LABELS}


LIST_LIMIT = 50
DETAIL_RUNS = 20
DETAIL_AUDIT = 20
STATUS_FILTERS = ("active", "paused")
UPCOMING_HOURS = 24
UPCOMING_PAGE = 100  # fire times per page of Next runs
# The columns of a schedule that its row in the list shows or needs (schedules/_rows.html).
LIST_COLUMNS = (
    "id",
    "tenant_id",
    "name",
    "job",
    "cron",
    "time_zone",
    "active",
    "inactive_reason",
    "next_run_at",
)


def last_runs(schedule_ids: list[int]) -> dict[int, Run]:
    """The latest run of each schedule (one index probe per schedule)."""
    if not schedule_ids:
        return {}
    latest = (
        select(func.max(Run.id))
        .where(Run.tenant_id == tenancy.current_tenant().id, Run.schedule_id.in_(schedule_ids))
        .group_by(Run.schedule_id)
    )
    # The status badge's columns only (not the output, which may be large).
    badge = load_only(Run.id, Run.schedule_id, Run.status, Run.started_at, Run.finished_at)
    runs = db.session.scalars(tenancy.runs().where(Run.id.in_(latest)).options(badge))
    return {run.schedule_id: run for run in runs if run.schedule_id is not None}


@dataclass(frozen=True)
class LastRun:
    """The latest run of a listed schedule: what its status badge shows (the status_badge macro
    takes a model or anything with these attributes)."""

    id: int
    status: str
    started_at: datetime | None
    finished_at: datetime | None


# The list's filters, each a condition on parameters of its name (values: list_context).
LIST_FILTERS: dict[str, Callable[[], ColumnElement[bool]]] = {
    "search": lambda: contains_text(Schedule.name, "search"),
    "job": lambda: Schedule.job == bindparam("job", type_=String),
    "active": lambda: Schedule.active == bindparam("active", type_=Boolean),
    # After the previous page's last row (after_name, after): by name, then id.
    "after": lambda: or_(
        Schedule.name > bindparam("after_name", type_=String),
        and_(
            Schedule.name == bindparam("after_name", type_=String),
            Schedule.id > bindparam("after", type_=Integer),
        ),
    ),
}


@functools.cache
def list_statement(filters: frozenset[str]) -> Select[Any]:
    """A page of the list with the LIST_FILTERS named in `filters`: the first `limit` schedules
    by name and id, as rows of LIST_COLUMNS, and the latest run of each that ran, in
    one statement: the latest run's id is a subquery per listed schedule (one index probe
    each, after the LIMIT), joined to its run. Rows, not models: loading each schedule whole
    (its arguments decoded from JSON, its notification settings) and its run as objects cost
    more than rendering the row. Built once per set of filters, its values bound at execution
    (see tenancy.TENANT_ID): building it costs more than running it."""
    latest = (
        select(func.max(Run.id))
        .where(Run.schedule_id == Schedule.id, Run.tenant_id == Schedule.tenant_id)
        .scalar_subquery()
    )
    conditions = (LIST_FILTERS[name]() for name in sorted(filters))
    page = (
        tenancy.schedules(tenancy.TENANT_ID)
        .where(*conditions)
        .with_only_columns(*(getattr(Schedule, column) for column in LIST_COLUMNS))
        .add_columns(latest.label("last_run_id"))
        .order_by(Schedule.name, Schedule.id)
        .limit(bindparam("limit", type_=Integer))
        .subquery()
    )
    return (
        select(page, Run.status, Run.started_at, Run.finished_at)
        .outerjoin(Run, Run.id == page.c.last_run_id)
        .order_by(page.c.name, page.c.id)
    )


@dataclass(frozen=True, slots=True)
class ScheduleUrls:
    """The URLs of a schedule's links and forms, by action: a list page has six per row, so
    they come from id_url, not url_for."""

    detail: str
    edit: str
    run: str
    pause: str
    resume: str
    delete: str


@bp.app_template_global()
def schedule_urls(schedule_id: int) -> ScheduleUrls:
    """The URLs of one schedule's links and forms (templates/schedules/_rows.html, _detail.html)."""
    return ScheduleUrls(
        *(
            id_url(f"schedules.{action}", schedule_id=schedule_id)
            for action in ScheduleUrls.__slots__
        )
    )


def job_titles() -> dict[str, str]:
    return {spec.name: spec.title for spec in current_catalog().jobs()}


def list_context() -> dict[str, Any]:
    """One page of the list, by name then id; the next page starts after the last row's
    (name, id), as the run history's pages start before an id: no OFFSET, no COUNT."""
    q = request.args.get("q", "").strip()
    job = request.args.get("job", "")
    status = choice_arg("status", STATUS_FILTERS)
    after = id_arg("after")
    after_name = request.args.get("after_name")
    if (after is None) != (after_name is None):
        bad_request("“after” and “after_name” go together: the last schedule of a page.")
    values: dict[str, Any] = {}
    if q:
        values["search"] = like_pattern(q)
    if job:
        values["job"] = job
    if status:
        values["active"] = status == "active"
    if after is not None:
        values.update(after=after, after_name=after_name)
    statement = list_statement(frozenset(values.keys() & LIST_FILTERS.keys()))
    rows = db.session.execute(statement, tenancy.bound(limit=LIST_LIMIT + 1, **values)).all()
    last_runs = {
        row.id: LastRun(row.last_run_id, row.status, row.started_at, row.finished_at)
        for row in rows
        if row.last_run_id is not None
    }
    schedules = rows[:LIST_LIMIT]
    filters = {"q": q, "job": job, "status": status}
    first_page = {key: value for key, value in filters.items() if value}
    next_page = None
    if len(rows) > LIST_LIMIT:
        last = schedules[-1]
        next_page = {**first_page, "after": str(last.id), "after_name": last.name}
    filtered = bool(q or job or status)
    any_schedules = bool(schedules) or bool(
        (filtered or after is not None)
        and db.session.scalar(tenancy.schedules().with_only_columns(Schedule.id).limit(1))
    )
    return {
        "schedules": schedules,
        "first_page": first_page,
        "next_page": next_page,
        "later_page": after is not None,
        "last_runs": last_runs,
        "titles": job_titles(),
        "jobs": current_catalog().jobs(scope="tenant"),
        "filters": filters,
        "filtered": filtered,
        "any_schedules": any_schedules,
        "tenant": tenancy.current_tenant(),
    }


@bp.get("/")
def index() -> Response:
    """The tenant's schedules, searchable; htmx gets only the list when filters change."""
    context = list_context()
    # htmx: the whole list when the filters change; more rows for "Load more schedules".
    partial = "schedules/_rows.html" if context["later_page"] else "schedules/_list.html"
    return page_or_partial("schedules/index.html", partial, **context)


def row_context(schedule: Schedule) -> dict[str, Any]:
    """The list's rows (templates/schedules/_rows.html) with one schedule's row alone."""
    return {
        "schedules": [schedule],
        "last_runs": last_runs([schedule.id]),
        "titles": job_titles(),
        "tenant": tenancy.current_tenant(),
    }


def form_context(form: ScheduleForm, schedule: Schedule | None) -> dict[str, Any]:
    catalog = current_catalog()
    spec = job_spec(catalog, form.job)
    return {
        "form": form,
        "schedule": schedule,
        "jobs": catalog.jobs(scope="tenant"),
        "params": spec.form_fields(current_app.config) if spec else [],
        "misfire_choices": MISFIRE_CHOICES,
        "overlap_choices": OVERLAP_CHOICES,
        "time_zones": time_zone_names(),
        "tenant_jitter": tenancy.current_tenant().jitter_seconds,
        "preview": cron_preview(form.cron, form.time_zone, jitter=form.jitter_seconds),
    }


def cron_preview(
    expression: str,
    time_zone: str,
    count: int = 5,
    start: date | None = None,
    jitter: str | int | None = None,
) -> dict[str, Any]:
    """The preview's context; `jitter` as typed in the form (blank: the tenant's default)."""
    if not expression.strip():
        return {"empty": True}
    asked = optional_number(jitter) if isinstance(jitter, str) else jitter
    if isinstance(asked, str):
        return {
            "errors": {
                "jitter_seconds": f"{FIELD_LABELS['jitter_seconds']}: must be a whole number"
            }
        }
    try:
        result = preview_cron(
            expression,
            time_zone,
            utcnow(),
            count,
            start,
            jitter=asked,
            tenant_jitter=tenancy.current_tenant().jitter_seconds,
        )
    except ScheduleError as error:
        return {"errors": error.errors}
    return {"result": result}


def save_failed(form: ScheduleForm, schedule: Schedule | None, error: ScheduleError) -> Response:
    form.errors = error.errors
    return page_or_partial(
        "schedules/form.html", "schedules/_form.html", 422, **form_context(form, schedule)
    )


@bp.route("/schedules/new", methods=["GET", "POST"])
def new() -> Response:
    """The form for a new schedule; saving goes through the service layer."""
    tenant = tenancy.require_admin()
    if request.method == "GET":
        form = ScheduleForm.blank(tenant, current_catalog())
        return page_or_partial(
            "schedules/form.html", "schedules/_form.html", **form_context(form, None)
        )
    form = ScheduleForm.from_post(request.form)
    try:
        schedule = create_schedule(tenant, form.to_data(current_catalog()), actor(), utcnow())
    except ScheduleError as error:
        return save_failed(form, None, error)
    return htmx_redirect(
        f"Schedule “{schedule.name}” created.", url_for("schedules.detail", schedule_id=schedule.id)
    )


@bp.route("/schedules/<id:schedule_id>/edit", methods=["GET", "POST"])
def edit(schedule_id: int) -> Response:
    """Edit a schedule; the same form, validation and audit as creating one."""
    schedule = tenancy.get_rw_schedule_or_404(schedule_id)
    if request.method == "GET":
        form = ScheduleForm.for_schedule(schedule)
        return page_or_partial(
            "schedules/form.html", "schedules/_form.html", **form_context(form, schedule)
        )
    form = ScheduleForm.from_post(request.form)
    try:
        update_schedule(schedule, form.to_data(current_catalog()), actor(), utcnow())
    except ScheduleError as error:
        db.session.rollback()
        return save_failed(form, schedule, error)
    return htmx_redirect(
        f"Schedule “{schedule.name}” saved.", url_for("schedules.detail", schedule_id=schedule.id)
    )


@bp.get("/schedules/form/params")
def params() -> Response:
    """The parameter fields of the chosen job, swapped in when the job select changes."""
    job = request.args.get("job", "")
    catalog = current_catalog()
    form = ScheduleForm(job=job, args=default_args(catalog, job))
    return page_or_partial(
        "schedules/params.html", "schedules/_params.html", **form_context(form, None)
    )


@bp.get("/schedules/form/preview")
def preview() -> Response:
    """The description and next fire times of the cron expression being typed."""
    form = ScheduleForm(
        cron=request.args.get("cron", ""), time_zone=request.args.get("time_zone", "").strip()
    )
    try:
        start = date_arg("preview_from")  # "Preview from": the start of that local day
    except BadRequest as error:
        # Shown in place of the preview, where the admin is looking.
        return page_or_partial(
            "schedules/preview.html",
            "schedules/_preview.html",
            400,
            preview={"errors": {"preview_from": error.description}},
            form=form,
        )
    return page_or_partial(
        "schedules/preview.html",
        "schedules/_preview.html",
        preview=cron_preview(
            form.cron, form.time_zone, start=start, jitter=request.args.get("jitter_seconds", "")
        ),
        form=form,
        start=start,
    )


@bp.get("/schedules/<id:schedule_id>")
def detail(schedule_id: int) -> Response:
    """A schedule's settings, next fire times, run history and audit trail."""
    return page_or_partial(
        "schedules/detail.html", "schedules/_detail.html", **detail_context(schedule_id)
    )


def detail_context(schedule_id: int) -> dict[str, Any]:
    """What the schedule's page shows; its actions render it again after a change. Three
    statements: the schedule with its audit trail and notifications, its runs (the latest and
    the queued one-offs), and its last 30 days."""
    schedule, events, notifications = schedule_with_trail(schedule_id)
    runs, one_offs = schedule_runs(schedule_id)
    spec = current_catalog().get(schedule.job) if schedule.job in current_catalog() else None
    return {
        "schedule": schedule,
        "spec": spec,
        "preview": cron_preview(
            schedule.cron, schedule.time_zone, count=10, jitter=schedule.jitter_seconds
        ),
        "runs": runs[:DETAIL_RUNS],
        "waiting": waiting(runs[:DETAIL_RUNS]),
        "more_runs": len(runs) > DETAIL_RUNS,
        "events": events,
        "notifications": notifications,
        "audit_jobs": {schedule.id: schedule.job},
        "last_run": runs[0] if runs else None,
        "tenant": tenancy.current_tenant(),
        "titles": job_titles(),
        "history": days_figures(last_days(schedule.id, schedule.tenant_id, utcnow())),
        "one_offs": one_offs,
    }


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


@functools.cache
def trail_statement() -> Select[Any]:
    """The schedule, its last DETAIL_AUDIT audit events and its latest notifications, in one
    statement: both lists are one UNION ALL joined beside the schedule. Built once (see
    tenancy.TENANT_ID): its subqueries' columns cost more to build than the statement to run."""
    schedule_id: BindParameter[int] = bindparam("schedule_id")
    audit = (
        tenancy.audit_events(tenancy.TENANT_ID)
        .where(AuditEvent.object_type == "schedule", AuditEvent.object_id == schedule_id)
        .order_by(AuditEvent.id.desc())
        .limit(DETAIL_AUDIT)
        .subquery()
    )
    sent = recent_notifications(tenancy.TENANT_ID, schedule_id).subquery()
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
    return tenancy.schedule_with(trail)


def schedule_with_trail(
    schedule_id: int,
) -> tuple[Schedule, list[AuditEvent], list[SentNotification]]:
    """The schedule, its last DETAIL_AUDIT audit events and its latest notifications, newest
    first (trail_statement), or 404."""
    rows = tenancy.get_schedule_with_or_404(schedule_id, trail_statement())
    schedule = rows[0][0]
    events, notifications = [], []
    for row in rows:
        if row.kind == "audit":
            columns = {name: getattr(row, name) for name in AUDIT_COLUMNS}
            # Never added to the database session: shown, not saved.
            events.append(AuditEvent(id=row.id, created_at=row.at, **columns))
        elif row.kind == "notification":
            columns = {name: getattr(row, name) for name in NOTIFICATION_COLUMNS}
            notifications.append(SentNotification(id=row.id, sent_at=row.at, **columns))
    events.sort(key=lambda event: event.id, reverse=True)
    notifications.sort(key=lambda item: item.id, reverse=True)
    return schedule, events, notifications


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


@functools.cache
def runs_statement() -> CompoundSelect[Any]:
    """The schedule's latest DETAIL_RUNS + 1 runs and its queued one-off runs (at most
    DETAIL_RUNS), as history rows, in one statement (UNION ALL); built once, as
    trail_statement."""
    runs = tenancy.runs(tenancy.TENANT_ID).where(Run.schedule_id == bindparam("schedule_id"))
    latest = history_query(runs).order_by(Run.id.desc()).limit(DETAIL_RUNS + 1).subquery()
    waiting_ones = (
        history_query(runs.where(*ONE_OFF))
        .order_by(Run.available_at, Run.id)
        .limit(DETAIL_RUNS)
        .subquery()
    )
    # Each part in its own subquery: SQLite allows no LIMIT on a member of a UNION.
    return union_all(
        select(literal(True).label("latest"), *latest.c),
        select(literal(False), *waiting_ones.c),
    )


def schedule_runs(schedule_id: int) -> tuple[list[Row[Any]], list[Row[Any]]]:
    """The schedule's latest DETAIL_RUNS + 1 runs, newest first, and its queued one-off runs
    by start time (runs_statement)."""
    rows = db.session.execute(runs_statement(), tenancy.bound(schedule_id=schedule_id)).all()
    newest = sorted((row for row in rows if row.latest), key=lambda row: row.id, reverse=True)
    one_offs = sorted(
        (row for row in rows if not row.latest), key=lambda row: (row.available_at, row.id)
    )
    return newest, one_offs


def back_to(schedule: Schedule | None = None) -> str:
    """Where a plain (non-htmx) form post returns: the page it came from, if it is ours."""
    target = request.form.get("next")
    if target and is_own_path(target):
        return target
    if schedule is not None:
        return url_for("schedules.detail", schedule_id=schedule.id)
    return url_for("schedules.index")


def from_detail() -> bool:
    """Whether the form is on the schedule's own page (its forms send place=detail), rather than
    in a row of the list: htmx then swaps the whole page's content, not a row."""
    return request.form.get("place") == "detail"


def action_done(message: str, schedule: Schedule) -> Response:
    """After an action: htmx gets the part of the page the form is on, updated (the schedule's
    page, or its row of the list); a plain post returns where it came from."""
    if from_detail():
        return done(
            message, back_to(schedule), "schedules/_detail.html", **detail_context(schedule.id)
        )
    return done(message, back_to(schedule), "schedules/_rows.html", **row_context(schedule))


@bp.post("/schedules/<id:schedule_id>/run")
def run(schedule_id: int) -> Response:
    """Run now: queue a manual run and show its status in place; a worker executes it."""
    schedule = tenancy.get_rw_schedule_or_404(schedule_id)
    # Read now: the commit expires the schedule, and reading it again is a statement.
    name, target = schedule.name, back_to(schedule)
    try:
        queued = run_now(schedule, actor(), utcnow())
    except ScheduleError as error:
        abort(409, "; ".join(error.errors.values()))
    message = f"Run #{queued.id} of “{name}” queued."
    if from_detail():  # the new run heads the page's history, its badges polling
        return action_done(message, schedule)
    return done(message, target, "runs/_status.html", run=queued)


@bp.post("/schedules/<id:schedule_id>/run-later")
def run_later(schedule_id: int) -> Response:
    """Run once later: queue a manual run for a wall-clock time in the schedule's zone."""
    schedule = tenancy.get_rw_schedule_or_404(schedule_id)
    name, time_zone = schedule.name, schedule.time_zone
    text = request.form.get("at", "").strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        bad_request(f"“{shown(text)}” is not a date and time: pick one in {time_zone}.")
    if not 1970 <= moment.year <= 2999:  # beyond, the zone's conversion may overflow
        bad_request(f"Not queued: {shown(text)} is not within a year from now.")
    try:
        queued = run_now(schedule, actor(), utcnow(), wall_time_to_utc(moment, time_zone))
    except ScheduleError as error:
        if "at" in error.errors:
            bad_request(f"Not queued: {error.errors['at']}.")
        abort(409, "; ".join(error.errors.values()))
    when = local_label(queued.available_at, time_zone)
    return action_done(f"Run #{queued.id} of “{name}” queued for {when}.", schedule)


@bp.post("/schedules/<id:schedule_id>/pause")
def pause(schedule_id: int) -> Response:
    """Pause a schedule: it stops firing until resumed."""
    schedule = tenancy.get_rw_schedule_or_404(schedule_id)
    pause_schedule(schedule, actor())
    return action_done(f"Schedule “{schedule.name}” paused.", schedule)


@bp.route("/schedules/<id:schedule_id>/resume", methods=["GET", "POST"])
def resume(schedule_id: int) -> Response:
    """Resume a schedule, after asking whether to skip or catch up missed fire times."""
    schedule = tenancy.get_rw_schedule_or_404(schedule_id)
    if request.method == "GET":
        missed: list[Any] = []
        now = utcnow()
        if schedule.next_run_at is not None and schedule.next_run_at <= now:
            fires, _ = upcoming_fires(
                [schedule], schedule.next_run_at - timedelta(seconds=1), now, limit=100
            )
            missed = fires
        # Where the page's form returns: the page that linked to it, else the schedule's page.
        target = request.args.get("next")
        if not is_own_path(target):
            target = url_for("schedules.detail", schedule_id=schedule.id)
        return page_or_partial(
            "schedules/resume.html",
            "schedules/_resume.html",
            schedule=schedule,
            missed=missed,
            in_row=is_htmx(),  # htmx asks from a row of the list, which the answer replaces
            next_url=target,
            tenant=tenancy.current_tenant(),
        )
    catch_up = request.form.get("missed") == "catch_up"
    try:
        resume_schedule(schedule, actor(), utcnow(), catch_up=catch_up)
    except ScheduleError as error:
        abort(409, "; ".join(error.errors.values()))
    how = "missed fire times will run" if catch_up else "missed fire times skipped"
    return action_done(f"Schedule “{schedule.name}” resumed ({how}).", schedule)


def backfill_page(
    schedule: Schedule,
    window: dict[str, str],
    plan: BackfillPlan | None = None,
    errors: dict[str, str] | None = None,
) -> Response:
    return page_or_partial(
        "schedules/backfill.html",
        "schedules/_backfill.html",
        422 if errors else 200,
        schedule=schedule,
        window=window,
        plan=plan,
        errors=errors or {},
        max_runs=MAX_BACKFILL_RUNS,
        paused_label=PAUSED_LABEL,
        local_label=local_label,
        tenant=tenancy.current_tenant(),
    )


@bp.route("/schedules/<id:schedule_id>/backfill", methods=["GET", "POST"])
def backfill(schedule_id: int) -> Response:
    """Backfill (admins): From and To in the schedule's zone, Preview (GET, changes nothing),
    then "Queue N runs" (POST): one run per fire time of the window without a run yet."""
    schedule = tenancy.get_rw_schedule_or_404(schedule_id)
    fields = request.form if request.method == "POST" else request.args
    window = {name: fields.get(name, "") for name in ("from", "to")}
    if request.method == "GET":
        if "from" not in request.args and "to" not in request.args:
            return backfill_page(schedule, window)
        try:
            plan = plan_backfill(schedule, window["from"], window["to"], utcnow())
        except ScheduleError as error:
            return backfill_page(schedule, window, errors=error.errors)
        return backfill_page(schedule, window, plan)
    name = schedule.name  # read now: the commit expires it
    try:
        result = queue_backfill(schedule, window["from"], window["to"], actor(), utcnow())
    except ScheduleError as error:
        db.session.rollback()
        return backfill_page(schedule, window, errors=error.errors)
    runs = "run" if result.queued == 1 else "runs"
    message = (
        f"Backfill of “{name}”: {result.queued} {runs} queued, {result.skipped} skipped "
        "(already had a run)."
    )
    history = url_for("runs.index", schedule=schedule.id, trigger="backfill")
    return htmx_redirect(message, history)


@bp.post("/schedules/<id:schedule_id>/delete")
def delete(schedule_id: int) -> Response:
    """Delete a schedule; its run history stays."""
    schedule = tenancy.get_rw_schedule_or_404(schedule_id)
    name = schedule.name
    delete_schedule(schedule, actor())
    message = f"Schedule “{name}” deleted."
    if request.form.get("leave"):  # from the schedule's own page, which is gone now
        return htmx_redirect(message, url_for("schedules.index"))
    return done(message, url_for("schedules.index"))


def upcoming_cursor() -> Cursor | None:
    """The `after` (an ISO 8601 time with its offset), `after_id` (a schedule id) and, when the
    last fire was a one-off, `after_run` (its run id) of a later page of Next runs: the last
    fire of the page before; or 400."""
    text = request.args.get("after", "")
    schedule_id = id_arg("after_id")
    run_id = id_arg("after_run")
    if not text and schedule_id is None and run_id is None:
        return None
    if not text or schedule_id is None:
        bad_request(
            "“after” and “after_id” go together (and “after_run” needs both): "
            "the last fire time of a page."
        )
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        at = None
    if at is None or at.utcoffset() is None:
        bad_request(f"“after={shown(text)}” is not a time with its UTC offset (ISO 8601).")
    return at.astimezone(UTC), schedule_id, run_id or 0


# What Next runs needs of a schedule to compute and show its fire times.
UPCOMING_COLUMNS = (
    Schedule.id,
    Schedule.tenant_id,
    Schedule.name,
    Schedule.job,
    Schedule.cron,
    Schedule.time_zone,
    Schedule.next_run_at,
)


@functools.cache
def active_schedules() -> Select[*tuple[Any, ...]]:
    """The tenant's first `size` active schedules by (next_run_at, id), as rows of
    UPCOMING_COLUMNS (no schedule loaded as a model); built once (see tenancy.TENANT_ID). A
    schedule without next_run_at never falls due: the scheduler will not fire it."""
    return (
        tenancy.schedules(tenancy.TENANT_ID)
        .with_only_columns(*UPCOMING_COLUMNS)
        .where(Schedule.active, Schedule.next_run_at.is_not(None))
        .order_by(Schedule.next_run_at, Schedule.id)
        .limit(bindparam("size", type_=Integer))
    )


def upcoming_page(start: datetime, end: datetime, cursor: Cursor | None) -> tuple[list[Any], bool]:
    """UPCOMING_PAGE fires of the tenant's active schedules (and whether more exist), loading
    schedules by next_run_at rather than all of them: a schedule fires nothing before its
    next_run_at, so once the page's fires (and the one after) all come before the last loaded
    schedule's (next_run_at, id), no schedule not loaded can take a place on the page. The
    first UPCOMING_PAGE + 1 schedules usually suffice; else four times as many, and so on."""
    size = UPCOMING_PAGE + 1
    queued = one_off_fires(start, end, cursor, UPCOMING_PAGE + 1)
    while True:
        schedules = db.session.execute(active_schedules(), tenancy.bound(size=size)).all()
        fires, _ = upcoming_fires(schedules, start, end, UPCOMING_PAGE + 1, cursor, queued)
        if len(schedules) < size:
            break  # every active schedule is loaded
        last = schedules[-1]
        assert last.next_run_at is not None  # the query's condition
        if last.next_run_at > end or (
            len(fires) > UPCOMING_PAGE
            and (fires[-1].at, fires[-1].schedule.id) <= (last.next_run_at, last.id)
        ):
            break
        size *= 4
    return fires[:UPCOMING_PAGE], len(fires) > UPCOMING_PAGE


# A queued one-off run ("Run once later"): the first attempt of a manual run that waits for a
# later time (a retry's wait is not one).
ONE_OFF = (Run.status == "queued", Run.trigger == "manual", Run.attempt == 0)


@functools.cache
def one_offs_statement(after_cursor: bool) -> Select[*tuple[Any, ...]]:
    """The tenant's first `size` queued one-off runs (ONE_OFF) due in (start, end] (and, with
    `after_cursor`, after (after_at, after_schedule, after_run) in fire_order: a one-off's
    (time, schedule, run id)), each with its schedule (still the tenant's) as a row of
    UPCOMING_COLUMNS, by start time; built once (see tenancy.TENANT_ID)."""
    query = tenancy.runs(tenancy.TENANT_ID).where(
        Run.available_at > bindparam("start", type_=UTCDateTime),
        Run.available_at <= bindparam("end", type_=UTCDateTime),
        *ONE_OFF,
    )
    if after_cursor:
        after = (
            bindparam("after_at", type_=UTCDateTime),
            bindparam("after_schedule", type_=Integer),
            bindparam("after_run", type_=Integer),
        )
        query = query.where(tuple_(Run.available_at, Run.schedule_id, Run.id) > tuple_(*after))
    same_schedule = and_(Schedule.id == Run.schedule_id, Schedule.tenant_id == Run.tenant_id)
    return (
        query.with_only_columns(Run.id.label("run_id"), Run.available_at, *UPCOMING_COLUMNS)
        .join(Schedule, same_schedule)
        .order_by(Run.available_at, Run.schedule_id, Run.id)
        .limit(bindparam("size", type_=Integer))
    )


def one_off_fires(start: datetime, end: datetime, cursor: Cursor | None, limit: int) -> list[Fire]:
    """The tenant's queued one-off runs due in (start, end] (after `cursor`), as fires of Next
    runs (one_offs_statement)."""
    values: dict[str, Any] = {"start": start, "end": end, "size": limit}
    if cursor is not None:
        values.update(zip(("after_at", "after_schedule", "after_run"), cursor, strict=True))
    rows = db.session.execute(one_offs_statement(cursor is not None), tenancy.bound(**values))
    return [Fire(row.available_at, row, None, row.run_id) for row in rows]


@bp.get("/upcoming")
def upcoming() -> Response:
    """The tenant's fire times across all active schedules in the next 24 hours, by day,
    UPCOMING_PAGE at a time ("Later fire times" continues after the last one shown)."""
    now = utcnow()
    cursor = upcoming_cursor()
    fires, more = upcoming_page(now, now + timedelta(hours=UPCOMING_HOURS), cursor)
    tenant = tenancy.current_tenant()
    zone = shown_zone(tenant.time_zone)
    today = now.astimezone(ZoneInfo(zone)).date()
    later = None
    if more:
        last = fires[-1]
        later = {"after": last.at.isoformat(), "after_id": str(last.schedule.id)}
        if last.run_id:
            later["after_run"] = str(last.run_id)
    # A later page appends to the list; its first day may continue the last one shown.
    later_page = "after" in request.args
    return page_or_partial(
        "schedules/upcoming.html",
        "schedules/_upcoming_days.html" if later_page else "schedules/_upcoming.html",
        days=by_day(fires, zone),
        today=today,
        tomorrow=today + timedelta(days=1),
        continued=cursor[0].astimezone(ZoneInfo(zone)).date() if cursor else None,
        later=later,
        tenant=tenant,
        titles=job_titles(),
    )
