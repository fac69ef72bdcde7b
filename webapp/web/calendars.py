"""The Calendars page: a tenant's business calendars (admins change them, viewers read them),
a calendar's page with its closed days, ranges and windows, an .ics import and a year view."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, make_response, render_template, request, url_for
from flask_login import login_required
from pydantic import ValidationError
from werkzeug.wrappers import Response

from webapp.calendar_models import Calendar
from webapp.cron import FIRST_YEAR, LAST_YEAR
from webapp.cron.business_days import WEEKDAY_NAMES, WEEKDAYS, supported_regions
from webapp.database import utcnow
from webapp.services import calendar_files
from webapp.services import calendars as service
from webapp.services.calendar_schema import (
    CalendarProblems,
    DayOffIn,
    WindowIn,
    calendar_document,
)
from webapp.services.schema import field_errors
from webapp.web import tenancy
from webapp.web.common import actor, done, htmx_redirect, page_or_partial
from webapp.web.formatting import is_htmx

bp = Blueprint("calendars", __name__)
bp.before_request(login_required(lambda: None))

SETTINGS = ("key", "name", "country", "subdivision")
# An upload's body may be twice the largest .ics, so that a file past the limit gets the
# field's message rather than the panel's "too large" page.
UPLOAD_BYTES = 2 * calendar_files.MAX_ICS_BYTES


@bp.url_value_preprocessor
def allow_uploads(endpoint: str | None, _values: dict[str, Any] | None) -> None:
    # Before the app's request guard reads the form (and Flask's body limit refuses it).
    if endpoint == "calendars.import_ics":
        request.max_content_length = UPLOAD_BYTES


def settings_form() -> dict[str, Any]:
    form: dict[str, Any] = {key: request.form.get(key, "").strip() for key in SETTINGS}
    form["closed_weekdays"] = [day for day in WEEKDAYS if request.form.get(f"closed_{day}")]
    return form


def common(**context: Any) -> dict[str, Any]:
    return {
        "tenant": tenancy.current_tenant(),
        "weekdays": list(zip(WEEKDAYS, WEEKDAY_NAMES, strict=True)),
        "countries": supported_regions(),
        "change_applies": service.CHANGE_APPLIES,
        **{"errors": {}, "form": {}, **context},
    }


def index_page(status: int = 200, **context: Any) -> Response:
    tenant = tenancy.current_tenant()
    return page_or_partial(
        "calendars/index.html",
        "calendars/_list.html",
        status,
        calendars=service.tenant_calendars(tenant.id),
        **common(**context),
    )


@bp.get("/calendars")
def index() -> Response:
    """The tenant's calendars; the form for a new one (admins)."""
    return index_page(form={"closed_weekdays": ["sat", "sun"]})


@bp.post("/calendars")
def create() -> Response:
    """A new calendar, then its page."""
    tenant = tenancy.require_admin()
    form = settings_form()
    try:
        calendar = service.create_calendar(tenant, form, actor(), utcnow())
    except CalendarProblems as error:
        return index_page(422, errors=error.errors, form=form)
    target = url_for("calendars.show", calendar_id=calendar.id)
    return htmx_redirect(f"Calendar {calendar.key} created.", target)


def calendar_page(
    calendar: Calendar, status: int = 200, year_only: bool = False, **context: Any
) -> Response:
    tenant = tenancy.current_tenant()
    year = request.args.get("year", "")
    shown = int(year) if year.isdigit() and FIRST_YEAR <= int(year) <= LAST_YEAR else None
    view = service.year_view(calendar, shown or service.this_year(tenant.time_zone, utcnow()))
    defaults = {
        **calendar_document(calendar),
        "closed_weekdays": calendar.closed_weekdays.split(","),
    }
    # The year alone for the year links' htmx requests; the whole page for a form's answer.
    template = "calendars/_year.html" if year_only else "calendars/detail.html"
    response = make_response(
        render_template(
            template,
            calendar=calendar,
            view=view,
            entry_text=service.entry_text,
            settings_fields=(*SETTINGS, "closed_weekdays"),
            **common(**{"form": defaults, **context}),
        ),
        status,
    )
    response.headers.add("Vary", "HX-Request")
    return response


@bp.get("/calendars/<id:calendar_id>")
def show(calendar_id: int) -> Response:
    """A calendar: its settings, entries and a year's closed days (htmx: the year alone)."""
    return calendar_page(tenancy.get_calendar_or_404(calendar_id), year_only=is_htmx())


def back_to(calendar: Calendar) -> str:
    return url_for("calendars.show", calendar_id=calendar.id)


@bp.post("/calendars/<id:calendar_id>")
def update(calendar_id: int) -> Response:
    """Changes a calendar's key, name, holidays and closed weekdays (its entries stay)."""
    calendar = tenancy.get_rw_calendar_or_404(calendar_id)
    form = settings_form()
    document = calendar_document(calendar)
    try:
        changed = service.update_calendar(calendar, {**document, **form}, actor(), utcnow())
    except CalendarProblems as error:
        return calendar_page(calendar, 422, errors=error.errors, form=form)
    message = (
        f"Calendar {calendar.key} saved. {service.CHANGE_APPLIES}"
        if changed
        else "Nothing changed."
    )
    return done(message, back_to(calendar))


@bp.post("/calendars/<id:calendar_id>/delete")
def delete(calendar_id: int) -> Response:
    """Deletes a calendar (refused while schedules use it)."""
    calendar = tenancy.get_rw_calendar_or_404(calendar_id)
    try:
        service.delete_calendar(calendar, actor())
    except CalendarProblems as error:
        return calendar_page(calendar, 409, errors=error.errors)
    return htmx_redirect(f"Calendar {calendar.key} deleted.", url_for("calendars.index"))


def entry_errors(error: ValidationError, model: type[DayOffIn | WindowIn]) -> dict[str, str]:
    """By the form's fields; a wrong order (the model's own check) is the end's."""
    found = field_errors(error, model)
    return {(name or "to"): message for name, message in found.items()}


def add_entry(
    calendar_id: int, model: type[DayOffIn | WindowIn], prefix: str, what: str
) -> Response:
    calendar = tenancy.get_rw_calendar_or_404(calendar_id)
    form = {field: request.form.get(f"{prefix}_{field}", "").strip() for field in ("from", "to")}
    form["label"] = request.form.get(f"{prefix}_label", "")
    data = {k: v for k, v in form.items() if v or k == "label"}
    try:
        entry = model.model_validate(data)
        added = service.add_entries(calendar, [entry], actor(), utcnow())
    except ValidationError as error:
        errors = {f"{prefix}_{k}": m for k, m in entry_errors(error, model).items()}
    except CalendarProblems as error:
        errors = {f"{prefix}_from": message for message in error.errors.values()}
    else:
        message = (
            f"{what} added. {service.CHANGE_APPLIES}"
            if added
            else f"The calendar has this {what.lower()} already."
        )
        return done(message, back_to(calendar))
    forms: dict[str, Any] = {f"{prefix}_form": form}
    return calendar_page(calendar, 422, errors=errors, **forms)


@bp.post("/calendars/<id:calendar_id>/days")
def add_days(calendar_id: int) -> Response:
    """Adds closed days: a date, or a range of dates."""
    return add_entry(calendar_id, DayOffIn, "day", "Closed days")


@bp.post("/calendars/<id:calendar_id>/windows")
def add_window(calendar_id: int) -> Response:
    """Adds a maintenance window (wall-clock times in the tenant's zone)."""
    return add_entry(calendar_id, WindowIn, "window", "Maintenance window")


@bp.post("/calendars/<id:calendar_id>/entries/<id:entry_id>/remove")
def remove_entry(calendar_id: int, entry_id: int) -> Response:
    """Removes one of the calendar's dates, ranges or windows."""
    calendar = tenancy.get_rw_calendar_or_404(calendar_id)
    removed = service.remove_entry(calendar, entry_id, actor(), utcnow())
    message = f"Removed. {service.CHANGE_APPLIES}" if removed else "It was removed already."
    return done(message, back_to(calendar))


@bp.post("/calendars/<id:calendar_id>/ics")
def import_ics(calendar_id: int) -> Response:
    """Adds an .ics file's events: all-day ones as closed days, timed ones as windows."""
    calendar = tenancy.get_rw_calendar_or_404(calendar_id)
    upload = request.files.get("file")
    if upload is None or not upload.filename:
        return calendar_page(calendar, 422, errors={"file": "choose an .ics file"})
    try:
        data = upload.stream.read(UPLOAD_BYTES + 1)
    finally:
        upload.close()  # a large upload is spooled to a temporary file
    try:
        added = calendar_files.import_ics(calendar, data, actor(), utcnow())
    except CalendarProblems as error:
        return calendar_page(calendar, 422, errors={"file": "; ".join(error.errors.values())})
    applies = f" {service.CHANGE_APPLIES}" if added else ""
    return done(f"{added} added from {upload.filename}.{applies}", back_to(calendar))
