"""The REST API's endpoints under /api/v1: short views over the service layer.

Each view loads through `auth` (the token's tenant only), parses its query string or body into
the models of `schemas`, calls the same service function as the panel (same validation, quotas
and audit rows, with the token as the actor) and answers JSON; every error is a problem
details document (`problems`)."""

from __future__ import annotations

from typing import Any, TypeVar

from flask import Blueprint, Response, json, request, url_for
from pydantic import BaseModel, ValidationError
from sqlalchemy import Select, func
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException, default_exceptions

from webapp import cron
from webapp.api import auth, openapi
from webapp.api.preconditions import etag, idempotent, if_match, not_modified
from webapp.api.problems import Problem, from_http_exception
from webapp.api.schemas import (
    MAX_ID,
    BackfillIn,
    BackfillOut,
    CancelOut,
    CatalogOut,
    FiresOut,
    FiresQuery,
    JobOut,
    ParseOut,
    ParseQuery,
    PreviewQuery,
    ResumeIn,
    RunDetail,
    RunNowIn,
    RunOut,
    RunPage,
    RunQuery,
    ScheduleOut,
    SchedulePage,
    ScheduleQuery,
)
from webapp.catalog.current import current_catalog
from webapp.database import RETRY_AFTER, bad_text, load_user_json, utcnow
from webapp.extensions import db
from webapp.models import Run, Schedule
from webapp.services import backfill as backfills
from webapp.services import cancellation
from webapp.services import schedules as service
from webapp.services.audit import AUDITED_FIELDS
from webapp.services.calendar_marks import calendar_rules
from webapp.services.history import filter_runs, filter_values
from webapp.services.schema import ScheduleError, field_errors

bp = Blueprint("api", __name__, url_prefix="/api")
ModelT = TypeVar("ModelT", bound=BaseModel)
JSON_TYPES = ("application/json",)
PUBLIC_ENDPOINTS = {"api.openapi_document", "api.docs"}  # the API's description needs no token


@bp.before_request
def require_token() -> None:
    if request.endpoint not in PUBLIC_ENDPOINTS:
        auth.authenticate()


@bp.errorhandler(Problem)
def problem(error: Problem) -> Response:
    return error.response()


@bp.errorhandler(OperationalError)
def database_unavailable(_error: OperationalError) -> Response:
    detail = "the database is not answering; nothing was changed: try again"
    return Problem(503, None, detail, headers={"Retry-After": str(RETRY_AFTER)}).response()


@bp.errorhandler(ScheduleError)
def invalid_schedule(error: ScheduleError) -> Response:
    """The service layer's refusals: the same messages as the panel's, by field."""
    return Problem.invalid(error.errors).response()


def http_error(error: HTTPException) -> Response:
    return from_http_exception(error).response()


# By status, not only by class: the panel's handlers of 400 and 413 (raised by the request
# guard and the body size limit) would otherwise come first.
for _status in default_exceptions:
    bp.register_error_handler(_status, http_error)


# --- Parsing --------------------------------------------------------------------------------


def query(model: type[ModelT]) -> ModelT:
    """The query string as `model`, or 400 naming each bad parameter."""
    values = request.args.to_dict(flat=True)
    try:
        return model.model_validate(values)
    except ValidationError as error:
        raise Problem.invalid(field_errors(error, model), status=400) from None


def body(optional: bool = False) -> dict[str, Any]:
    """The request's JSON object: 415 for another content type, 400 for malformed JSON, 422
    for anything but an object or for text the database cannot store (naming the field). An
    action whose body is optional takes an empty body as {}."""
    raw = request.get_data(cache=True)  # 413 past SCHEDULER_MAX_REQUEST_BYTES, before reading
    if optional and not raw.strip():
        return {}
    if request.mimetype not in JSON_TYPES:
        raise Problem(415, None, "send the body as JSON, with Content-Type: application/json")
    try:
        document = load_user_json(raw)
    except ValueError as error:
        raise Problem(400, "malformed", f"the body is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise Problem.invalid({"body": "must be a JSON object"})
    unstorable = bad_text(document)  # the one text rule, before any model reads the body
    if unstorable:
        raise Problem.invalid(unstorable)
    return document


def action_body(model: type[ModelT]) -> ModelT:
    try:
        return model.model_validate(body(optional=True))
    except ValidationError as error:
        raise Problem.invalid(field_errors(error, model)) from None


def cursor_id(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    if not (cursor.isascii() and cursor.isdigit() and 1 <= int(cursor) <= MAX_ID):
        raise Problem.invalid({"cursor": "not a cursor of this list"}, status=400)
    return int(cursor)


def answer(document: BaseModel, status: int = 200, location: str | None = None) -> Response:
    # By alias: a field named as in Python may be `from` in JSON.
    response = Response(
        document.model_dump_json(by_alias=True), status, mimetype="application/json"
    )
    if location:
        response.headers["Location"] = location
    return response


def tenant_zone() -> str:
    return auth.current_tenant().time_zone


def run_zones(runs: list[Run]) -> dict[int | None, str]:
    """Each run's zone by its schedule id: its schedule's, the tenant's once it is deleted."""
    ids = {run.schedule_id for run in runs if run.schedule_id is not None}
    zones: dict[int | None, str] = dict.fromkeys([None, *ids], tenant_zone())
    if ids:
        rows = auth.schedules().with_only_columns(Schedule.id, Schedule.time_zone)
        for schedule_id, zone in db.session.execute(rows.where(Schedule.id.in_(ids))):
            zones[schedule_id] = zone
    return zones


def run_detail(run: Run) -> RunDetail:
    return RunDetail.of(run, run_zones([run])[run.schedule_id])


# --- Schedules ------------------------------------------------------------------------------


@bp.get("/v1/schedules")
def list_schedules() -> Response:
    """The tenant's schedules by id, a page at a time, filtered by status, job and name."""
    asked = query(ScheduleQuery)
    after = cursor_id(asked.cursor)
    rows: Select[Schedule] = auth.schedules()
    if asked.status:
        rows = rows.where(Schedule.active.is_(asked.status == "active"))
    if asked.job:
        rows = rows.where(Schedule.job == asked.job)
    if asked.q:
        rows = rows.where(func.lower(Schedule.name).contains(asked.q.lower(), autoescape=True))
    if after is not None:
        rows = rows.where(Schedule.id > after)
    found = list(db.session.scalars(rows.order_by(Schedule.id).limit(asked.limit + 1)))
    page = found[: asked.limit]
    more = len(found) > asked.limit
    return answer(
        SchedulePage(
            items=[ScheduleOut.of(s) for s in page],
            next_cursor=str(page[-1].id) if more else None,
        )
    )


def schedule_answer(schedule: Schedule, status: int = 200, saved: bool = False) -> Response:
    """A schedule, with its ETag (for If-Match) and, when new, its Location; `saved` (a create
    or an edit): with what its author may not have meant."""
    location = url_for("api.get_schedule", schedule_id=schedule.id) if status == 201 else None
    warnings = None
    if saved:
        tenant = auth.current_tenant()
        warnings = service.schedule_warnings(
            tenant, schedule.name, schedule.time_zone, schedule.key
        )
    response = answer(ScheduleOut.of(schedule, warnings), status, location)
    response.headers["ETag"] = etag(schedule)
    return response


@bp.post("/v1/schedules")
@idempotent
def create_schedule() -> Response:
    """A new schedule, checked by ScheduleIn as the panel's form is; 201 with its Location."""
    auth.require_write()
    data = body()
    schedule = service.create_schedule(auth.current_tenant(), data, auth.actor(), utcnow())
    return schedule_answer(schedule, 201, saved=True)


@bp.get("/v1/schedules/<id:schedule_id>")
def get_schedule(schedule_id: int) -> Response:
    """One schedule; 304 without a body when If-None-Match names its current ETag."""
    schedule = auth.schedule_or_404(schedule_id)
    tag = etag(schedule)
    if not_modified(tag):
        return Response(status=304, headers={"ETag": tag})
    return schedule_answer(schedule)


@bp.patch("/v1/schedules/<id:schedule_id>")
def update_schedule(schedule_id: int) -> Response:
    """Changes the given fields; the result is checked whole, as an edit in the panel is."""
    schedule = auth.writable_schedule_or_404(schedule_id)
    changes = body()
    current = {name: getattr(schedule, name) for name in AUDITED_FIELDS}
    if "job" in changes and changes["job"] != schedule.job and "args" not in changes:
        current["args"] = {}  # another job's arguments: the new job's defaults instead
    service.update_schedule(
        schedule, {**current, **changes}, auth.actor(), utcnow(), precondition=if_match()
    )
    return schedule_answer(schedule, saved=True)


@bp.delete("/v1/schedules/<id:schedule_id>")
def delete_schedule(schedule_id: int) -> Response:
    """Deletes the schedule; its runs stay in the history."""
    schedule = auth.writable_schedule_or_404(schedule_id)
    service.delete_schedule(schedule, auth.actor(), precondition=if_match())
    return Response(status=204)


@bp.post("/v1/schedules/<id:schedule_id>/pause")
@idempotent
def pause_schedule(schedule_id: int) -> Response:
    """Pauses the schedule (no change if it is paused)."""
    schedule = auth.writable_schedule_or_404(schedule_id)
    service.pause_schedule(schedule, auth.actor())
    return schedule_answer(schedule)


@bp.post("/v1/schedules/<id:schedule_id>/resume")
@idempotent
def resume_schedule(schedule_id: int) -> Response:
    """Resumes the schedule, skipping or catching up on the fire times missed meanwhile."""
    schedule = auth.writable_schedule_or_404(schedule_id)
    asked = action_body(ResumeIn)
    service.resume_schedule(schedule, auth.actor(), utcnow(), catch_up=asked.missed == "catch_up")
    return schedule_answer(schedule)


@bp.post("/v1/schedules/<id:schedule_id>/runs")
@idempotent
def run_now(schedule_id: int) -> Response:
    """Run now, or at `at`: queues a manual run; 201 with the run's Location."""
    schedule = auth.writable_schedule_or_404(schedule_id)
    asked = action_body(RunNowIn)
    try:
        at = cron.local_time_to_utc(asked.at, schedule.time_zone) if asked.at else None
    except cron.CronError as error:
        raise ScheduleError({"at": str(error)}) from None
    run = service.run_now(schedule, auth.actor(), utcnow(), at)
    location = url_for("api.get_run", run_id=run.id)
    return answer(RunDetail.of(run, schedule.time_zone), 201, location)


@bp.post("/v1/schedules/<id:schedule_id>/backfill")
@idempotent
def backfill(schedule_id: int) -> Response:
    """Backfill: one run per fire time of a past window (`dry_run`: the preview only)."""
    schedule = auth.writable_schedule_or_404(schedule_id)
    asked = action_body(BackfillIn)
    now = utcnow()
    limit = backfills.MAX_BACKFILL_RUNS
    if asked.dry_run:
        plan = backfills.plan_backfill(schedule, asked.window_from, asked.window_to, now)
        return answer(BackfillOut.of(plan, limit))
    result = backfills.backfill(schedule, asked.window_from, asked.window_to, auth.actor(), now)
    return answer(BackfillOut.of(result.plan, limit, result.queued, result.skipped))


@bp.get("/v1/schedules/<id:schedule_id>/fires")
def schedule_fires(schedule_id: int) -> Response:
    """The schedule's next `count` fire times, in UTC and in its zone; those its business
    calendar skips or moves say so, with the reason."""
    schedule = auth.schedule_or_404(schedule_id)
    asked = query(FiresQuery)
    preview = service.preview_cron(
        schedule.cron,
        schedule.time_zone,
        utcnow(),
        asked.count,
        calendar=calendar_rules(auth.tenant_id(), calendar_id=schedule.calendar_id),
        policy=schedule.calendar_policy,
    )
    return answer(FiresOut.of(preview.description, preview.fires, schedule.time_zone))


# --- Runs -----------------------------------------------------------------------------------


@bp.get("/v1/runs")
def list_runs() -> Response:
    """The tenant's runs, newest first, filtered as the history page filters them."""
    asked = query(RunQuery)
    before = cursor_id(asked.cursor)
    zone = tenant_zone()
    schedule_id = None
    if asked.schedule_id is not None:
        schedule_id = auth.schedule_or_404(asked.schedule_id).id
    rows = filter_runs(
        auth.runs(),
        filter_values(
            zone,
            schedule_id=schedule_id,
            status=asked.status,
            trigger=asked.trigger,
            since=asked.since,
            until=asked.until,
            before=before,
        ),
    )
    found = list(db.session.scalars(rows.order_by(Run.id.desc()).limit(asked.limit + 1)))
    page = found[: asked.limit]
    more = len(found) > asked.limit
    zones = run_zones(page)
    return answer(
        RunPage(
            items=[RunOut.of(run, zones[run.schedule_id]) for run in page],
            next_cursor=str(page[-1].id) if more else None,
        )
    )


@bp.get("/v1/runs/<id:run_id>")
def get_run(run_id: int) -> Response:
    """One run, with its output."""
    return answer(run_detail(auth.run_or_404(run_id)))


@bp.post("/v1/runs/<id:run_id>/cancel")
@idempotent
def cancel_run(run_id: int) -> Response:
    """Cancels a queued run, or asks a running one to stop; 409 once it has finished."""
    run = auth.writable_run_or_404(run_id)
    try:
        cancelled = cancellation.cancel_run(run, auth.actor(), utcnow())
    except cancellation.CancelRefused as refused:
        raise Problem(409, "not-cancellable", str(refused)) from None
    run = auth.run_or_404(run_id)
    return answer(CancelOut(outcome=cancelled.outcome, run=run_detail(run)))


# --- Catalog and cron -----------------------------------------------------------------------


@bp.get("/v1/catalog")
def catalog() -> Response:
    """The jobs a schedule may use, each with the JSON Schema of its parameters."""
    jobs = current_catalog().jobs(scope="tenant")
    return answer(CatalogOut(jobs=[JobOut.of(spec) for spec in jobs]))


@bp.get("/v1/cron/preview")
def cron_preview() -> Response:
    """A cron expression in words and its next fire times in a zone, or what is wrong."""
    asked = query(PreviewQuery)
    rules = calendar_rules(auth.tenant_id(), key=asked.calendar or None)
    if asked.calendar and rules is None:
        message = f"this tenant has no calendar {asked.calendar!r}"
        raise Problem.invalid({"calendar": message}, status=400)
    try:
        preview = service.preview_cron(
            asked.expression,
            asked.time_zone,
            utcnow(),
            asked.count,
            calendar=rules,
            policy=asked.calendar_policy,
        )
    except ScheduleError as error:
        renamed = {"cron": "expression"}
        errors = {renamed.get(field, field): message for field, message in error.errors.items()}
        raise Problem.invalid(errors, status=400) from None
    return answer(FiresOut.of(preview.description, preview.fires, preview.time_zone))


@bp.get("/v1/cron/parse")
def cron_parse() -> Response:
    """A schedule in plain English as a cron expression and its description, or what part of
    it was not understood (with three phrases that are)."""
    asked = query(ParseQuery)
    try:
        expression = cron.cron_from_input(asked.text)
        description = cron.describe(cron.validate(expression, "UTC"))
    except cron.PhraseError as error:
        raise Problem(
            400,
            "phrase-not-understood",
            str(error),
            {"text": error.problem},
            examples=list(error.examples),
        ) from None
    except cron.CronError as error:
        raise Problem.invalid({"text": str(error)}, status=400) from None
    return answer(ParseOut(text=asked.text, cron=expression, description=description))


# --- The description ------------------------------------------------------------------------


@bp.get("/v1/openapi.json")
def openapi_document() -> Response:
    """The OpenAPI 3.1 document (no token needed)."""
    return Response(json.dumps(openapi.document()), mimetype="application/json")


@bp.get("/docs")
def docs() -> str:
    """The API's reference page, rendered from the OpenAPI document (no token needed)."""
    return openapi.reference_page()
