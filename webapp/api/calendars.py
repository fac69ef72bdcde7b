"""The API's business calendars under /api/v1/calendars: CRUD, a year's closed days and an
.ics import, on the API's blueprint, with its conventions (the token's tenant only, problem
details, ETag and If-Match, Idempotency-Key on POSTs)."""

from __future__ import annotations

from flask import Response, request, url_for

from webapp.api import auth
from webapp.api.calendar_schemas import (
    CalendarOut,
    CalendarPage,
    CalendarPatch,
    CalendarQuery,
    ClosedDaysOut,
    IcsImportOut,
    YearQuery,
)
from webapp.api.preconditions import idempotent, if_match, not_modified, quoted
from webapp.api.problems import Problem
from webapp.api.views import answer, body, bp, cursor_id, query, tenant_zone
from webapp.calendar_models import Calendar
from webapp.database import utcnow
from webapp.extensions import db
from webapp.services import calendar_files
from webapp.services import calendars as service
from webapp.services.calendar_schema import CalendarProblems, calendar_document, calendar_version

ICS_TYPES = ("text/calendar", "application/octet-stream")


@bp.errorhandler(CalendarProblems)
def invalid_calendar(error: CalendarProblems) -> Response:
    """The calendar service's refusals: the same messages as the panel's, by field."""
    if isinstance(error, service.CalendarInUse):
        return Problem(409, "calendar-in-use", str(error), error.errors).response()
    return Problem.invalid(error.errors).response()


def calendar_etag(calendar: Calendar) -> str:
    return quoted(calendar_version(calendar))


def calendar_or_404(calendar_id: int) -> Calendar:
    calendar = db.session.scalar(auth.calendars().where(Calendar.id == calendar_id))
    if calendar is None:
        raise Problem(404, "not-found", f"this tenant has no calendar {calendar_id}")
    return calendar


def writable_calendar_or_404(calendar_id: int) -> Calendar:
    """A calendar the token may change: 404 for another tenant's id, then 403 for `read`."""
    calendar = calendar_or_404(calendar_id)
    auth.require_write()
    return calendar


def calendar_answer(calendar: Calendar, status: int = 200) -> Response:
    location = url_for("api.get_calendar", calendar_id=calendar.id) if status == 201 else None
    response = answer(CalendarOut.of(calendar, tenant_zone()), status, location)
    response.headers["ETag"] = calendar_etag(calendar)
    return response


@bp.get("/v1/calendars")
def list_calendars() -> Response:
    """The tenant's calendars by id, a page at a time."""
    asked = query(CalendarQuery)
    after = cursor_id(asked.cursor)
    rows = auth.calendars()
    if after is not None:
        rows = rows.where(Calendar.id > after)
    found = list(db.session.scalars(rows.order_by(Calendar.id).limit(asked.limit + 1)))
    page = found[: asked.limit]
    zone = tenant_zone()
    return answer(
        CalendarPage(
            items=[CalendarOut.of(c, zone) for c in page],
            next_cursor=str(page[-1].id) if len(found) > asked.limit else None,
        )
    )


@bp.post("/v1/calendars")
@idempotent
def create_calendar() -> Response:
    """A new calendar, checked by CalendarIn as the panel's form is; 201 with its Location."""
    auth.require_write()
    calendar = service.create_calendar(auth.current_tenant(), body(), auth.actor(), utcnow())
    return calendar_answer(calendar, 201)


@bp.get("/v1/calendars/<id:calendar_id>")
def get_calendar(calendar_id: int) -> Response:
    """One calendar; 304 without a body when If-None-Match names its current ETag."""
    calendar = calendar_or_404(calendar_id)
    tag = calendar_etag(calendar)
    if not_modified(tag):
        return Response(status=304, headers={"ETag": tag})
    return calendar_answer(calendar)


@bp.patch("/v1/calendars/<id:calendar_id>")
def update_calendar(calendar_id: int) -> Response:
    """Changes the given fields; `days_off` and `windows`, when given, replace the calendar's."""
    calendar = writable_calendar_or_404(calendar_id)
    changes = body()
    unknown = sorted(set(changes) - set(CalendarPatch.model_fields))
    if unknown:
        raise Problem.invalid(dict.fromkeys(unknown, "unknown field"))
    data = {**calendar_document(calendar), **changes}
    service.update_calendar(
        calendar, data, auth.actor(), utcnow(), precondition=if_match(calendar_etag, "calendar")
    )
    return calendar_answer(calendar)


@bp.delete("/v1/calendars/<id:calendar_id>")
def delete_calendar(calendar_id: int) -> Response:
    """Deletes the calendar; 409 while schedules use it (naming them)."""
    calendar = writable_calendar_or_404(calendar_id)
    service.delete_calendar(
        calendar, auth.actor(), precondition=if_match(calendar_etag, "calendar")
    )
    return Response(status=204)


@bp.get("/v1/calendars/<id:calendar_id>/closed-days")
def closed_days(calendar_id: int) -> Response:
    """A year's closed days with their reasons, and its maintenance windows."""
    calendar = calendar_or_404(calendar_id)
    year = query(YearQuery).year or service.this_year(tenant_zone(), utcnow())
    return answer(ClosedDaysOut.of(service.year_view(calendar, year)))


@bp.post("/v1/calendars/<id:calendar_id>/ics")
@idempotent
def import_ics(calendar_id: int) -> Response:
    """Adds an .ics file's events (the body, text/calendar): all-day ones as closed days, timed
    ones as maintenance windows; a recurring event is refused."""
    calendar = writable_calendar_or_404(calendar_id)
    if request.mimetype not in ICS_TYPES:
        raise Problem(415, None, "send the .ics file as the body, with Content-Type: text/calendar")
    data = request.get_data(cache=True)
    added = calendar_files.import_ics(calendar, data, auth.actor(), utcnow())
    return answer(IcsImportOut(added=added, calendar=CalendarOut.of(calendar, tenant_zone())))
