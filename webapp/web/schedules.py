"""Schedules: the list, the generated form with its live cron preview, detail and actions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from flask import Blueprint, abort, request, url_for
from flask_login import login_required
from werkzeug.exceptions import BadRequest
from werkzeug.wrappers import Response

from webapp import cron
from webapp.catalog.current import current_catalog
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Schedule
from webapp.services.backfill import (
    MAX_BACKFILL_RUNS,
    PAUSED_LABEL,
    BackfillPlan,
    plan_backfill,
)
from webapp.services.backfill import (
    backfill as queue_backfill,
)
from webapp.services.schedule_pages import (
    has_schedules,
    last_runs,
    list_page,
    schedule_runs,
    schedule_with_trail,
    shared_names,
)
from webapp.services.schedule_stats import last_days
from webapp.services.schedules import (
    ScheduleError,
    create_schedule,
    delete_schedule,
    local_label,
    name_warning,
    pause_schedule,
    resume_schedule,
    run_now,
    update_schedule,
)
from webapp.services.upcoming import upcoming_fires
from webapp.web import tenancy
from webapp.web.auth import is_own_path
from webapp.web.charts import days_figures
from webapp.web.common import actor, done, htmx_redirect, page_or_partial
from webapp.web.formatting import id_url, is_htmx
from webapp.web.forms import FIELD_LABELS, ScheduleForm, builder_fields, default_args
from webapp.web.params import bad_request, choice_arg, date_arg, id_arg
from webapp.web.runs import waiting
from webapp.web.schedule_form import (
    builder_choices,
    builder_preview,
    cron_preview,
    form_context,
    form_ready,
    save_failed,
    saved,
)

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
    tenant = tenancy.current_tenant()
    page = list_page(
        db.session(),
        tenant.id,
        LIST_LIMIT,
        utcnow(),
        search=q,
        job=job,
        active=status == "active" if status else None,
        after=(after_name, after) if after_name is not None and after is not None else None,
    )
    filters = {"q": q, "job": job, "status": status}
    first_page = {key: value for key, value in filters.items() if value}
    next_page = None
    if page.more:
        last = page.schedules[-1]
        next_page = {**first_page, "after": str(last.id), "after_name": last.name}
    filtered = bool(q or job or status)
    any_schedules = bool(page.schedules) or (
        (filtered or after is not None) and has_schedules(db.session(), tenant.id)
    )
    return {
        "schedules": page.schedules,
        "shared_names": page.shared_names,
        "first_page": first_page,
        "next_page": next_page,
        "later_page": after is not None,
        "last_runs": page.last_runs,
        "titles": job_titles(),
        "jobs": current_catalog().jobs(scope="tenant"),
        "filters": filters,
        "filtered": filtered,
        "any_schedules": any_schedules,
        "tenant": tenant,
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
    tenant = tenancy.current_tenant()
    return {
        "schedules": [schedule],
        "shared_names": shared_names(db.session(), tenant.id, {schedule.name}),
        "last_runs": last_runs(db.session(), tenant.id, [schedule.id], utcnow()),
        "titles": job_titles(),
        "tenant": tenant,
    }


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
        ready = form_ready(form, None)
        if ready is not None:
            return ready
        schedule = create_schedule(tenant, form.to_data(current_catalog()), actor(), utcnow())
    except ScheduleError as error:
        return save_failed(form, None, error)
    return saved(schedule, "created")


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
        ready = form_ready(form, schedule)
        if ready is not None:
            return ready
        update_schedule(schedule, form.to_data(current_catalog()), actor(), utcnow())
    except ScheduleError as error:
        db.session.rollback()
        return save_failed(form, schedule, error)
    return saved(schedule, "saved")


@bp.get("/schedules/form/params")
def params() -> Response:
    """The parameter fields of the chosen job, swapped in when the job select changes."""
    job = request.args.get("job", "")
    catalog = current_catalog()
    form = ScheduleForm(job=job, args=default_args(catalog, job))
    return page_or_partial(
        "schedules/params.html", "schedules/_params.html", **form_context(form, None)
    )


@bp.get("/schedules/form/name")
def name_check() -> Response:
    """Beside the name being typed: another schedule of the tenant has it, and the keys."""
    schedule_id = id_arg("schedule")
    schedule = tenancy.get_schedule_or_404(schedule_id) if schedule_id is not None else None
    name = request.args.get("name", "")
    key = schedule.key if schedule else None
    return page_or_partial(
        "schedules/name_warning.html",
        "schedules/_name_warning.html",
        name=name,
        warnings={"name": name_warning(tenancy.current_tenant(), name, key)},
    )


@bp.get("/schedules/form/preview")
def preview() -> Response:
    """The description and next fire times of the cron expression (or phrase) being typed, or
    of the builder's fields (when they are sent: Repeat and the others)."""
    form = ScheduleForm(
        cron=request.args.get("cron", ""),
        time_zone=request.args.get("time_zone", "").strip(),
        phrase=request.args.get("phrase", ""),
        builder=builder_fields(request.args),
        repeat_shown=request.args.get("repeat_shown", ""),
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
    jitter = request.args.get("jitter_seconds", "")
    # The business calendar chosen and its policy: the fires it skips or moves are marked.
    calendar = request.args.get("calendar", "")
    policy = request.args.get("calendar_policy", "skip")
    if form.builder:
        preview = builder_preview(form, start, jitter, calendar, policy)
        built = is_htmx() and bool(preview.get("cron"))
        # The builder fills the cron field and empties "Describe it" (out of band), and shows
        # the fields of a Repeat just chosen.
        oob = {"fill_cron": built, "clear_phrase": built, **builder_choices()}
        oob["show_builder"] = is_htmx() and form.new_shape()
    else:
        preview = cron_preview(
            form.cron,
            form.time_zone,
            start=start,
            jitter=jitter,
            in_form=True,
            phrase=form.phrase,
            calendar=calendar,
            policy=policy,
        )
        if preview.get("cron"):
            form.cron = preview["cron"]
        # The phrase being typed fills the cron field, and the builder (asked by the cron
        # field and "Describe it") opens the cron's shape, out of band.
        oob = {"fill_cron": is_htmx() and bool(form.phrase.strip() and preview.get("cron"))}
        if is_htmx() and request.args.get("builder") == "sync":
            form.sync_builder()
            oob |= {"sync_builder": True, **builder_choices()}
    return page_or_partial(
        "schedules/preview.html",
        "schedules/_preview.html",
        preview=preview,
        form=form,
        start=start,
        **oob,
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
    tenant = tenancy.current_tenant()
    trail = schedule_with_trail(db.session(), tenant.id, schedule_id, DETAIL_AUDIT)
    if trail is None:
        abort(404)
    schedule = trail.schedule
    runs, one_offs = schedule_runs(db.session(), tenant.id, schedule_id, DETAIL_RUNS, utcnow())
    spec = current_catalog().get(schedule.job) if schedule.job in current_catalog() else None
    return {
        "schedule": schedule,
        "spec": spec,
        "preview": cron_preview(
            schedule.cron,
            schedule.time_zone,
            count=10,
            jitter=schedule.jitter_seconds,
            policy=schedule.calendar_policy,
            calendar_id=schedule.calendar_id,
        ),
        "runs": runs[:DETAIL_RUNS],
        "waiting": waiting(runs[:DETAIL_RUNS]),
        "more_runs": len(runs) > DETAIL_RUNS,
        "events": trail.events,
        "notifications": trail.notifications,
        "audit_jobs": {schedule.id: schedule.job},
        "last_run": runs[0] if runs else None,
        "tenant": tenant,
        "titles": job_titles(),
        "history": days_figures(last_days(schedule.id, schedule.tenant_id, utcnow())),
        "one_offs": one_offs,
    }


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
        at = cron.parse_local_time(text, time_zone)
    except cron.CronError as error:
        bad_request(f"Not queued: {error}: pick a date and time in {time_zone}.")
    try:
        queued = run_now(schedule, actor(), utcnow(), at)
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
