"""Next runs: the tenant's fire times across its active schedules, and its queued one-off runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from flask import Blueprint, abort, request
from flask_login import login_required
from werkzeug.wrappers import Response

from webapp.database import utcnow
from webapp.extensions import db
from webapp.services.upcoming import (
    Cursor,
    by_day,
    chosen_schedule,
    folded,
    schedule_choices,
    upcoming_page,
)
from webapp.web import tenancy
from webapp.web.common import page_or_partial
from webapp.web.formatting import is_htmx, shown_zone
from webapp.web.params import bad_request, id_arg, shown
from webapp.web.schedules import job_titles

bp = Blueprint("upcoming", __name__)
bp.before_request(login_required(lambda: None))

UPCOMING_HOURS = 24
UPCOMING_PAGE = 50  # fire times per page of Next runs, as the history shows 50 runs
# The schedule filter offers this many active schedules, by name, and the chosen one; a folded
# row ("every 7 min, 14 more") links to its schedule's own list whatever its place by name.
SCHEDULE_OPTIONS = 100


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


@bp.get("/upcoming")
def index() -> Response:
    """The tenant's fire times across all active schedules (or the one chosen) in the next 24
    hours, by day, UPCOMING_PAGE at a time ("Later fire times" continues after the last one
    shown). Across schedules, a schedule's fires in a row are folded under the first."""
    now = utcnow()
    cursor = upcoming_cursor()
    tenant = tenancy.current_tenant()
    session = db.session()
    schedule_id = id_arg("schedule")
    chosen = None
    if schedule_id is not None:
        chosen = chosen_schedule(session, tenant.id, schedule_id)
        if chosen is None:
            abort(404)
    end = now + timedelta(hours=UPCOMING_HOURS)
    fires, more = upcoming_page(session, tenant.id, now, end, cursor, UPCOMING_PAGE, schedule_id)
    zone = shown_zone(tenant.time_zone)
    today = now.astimezone(ZoneInfo(zone)).date()
    later: dict[str, str] | None = None
    if more:
        last = fires[-1]
        later = {"after": last.at.isoformat(), "after_id": str(last.schedule.id)}
        if last.run_id:
            later["after_run"] = str(last.run_id)
        if schedule_id is not None:
            later["schedule"] = str(schedule_id)
    days = [
        (day, [(fire, None) for fire in group] if chosen else folded(group))
        for day, group in by_day(fires, zone)
    ]
    # A later page appends to the list; its first day may continue the last one shown.
    later_page = "after" in request.args
    return page_or_partial(
        "schedules/upcoming.html",
        "schedules/_upcoming_days.html" if later_page else "schedules/_upcoming.html",
        days=days,
        today=today,
        tomorrow=today + timedelta(days=1),
        continued=cursor[0].astimezone(ZoneInfo(zone)).date() if cursor else None,
        later=later,
        tenant=tenant,
        titles=job_titles(),
        chosen=chosen,
        schedule_options=[]
        if is_htmx()
        else session.execute(schedule_choices(tenant.id, SCHEDULE_OPTIONS)).all(),
    )
