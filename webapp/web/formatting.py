"""Template helpers: DOM ids, times in a zone, relative times, durations, cron descriptions."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from flask import Flask, g, request, session, url_for
from markupsafe import Markup, escape

from webapp import cron
from webapp.database import utcnow
from webapp.models import MAX_SCHEDULE_NAME, TRIGGERS
from webapp.web import tenancy


def dom_id(obj: Any, suffix: str | None = None) -> str:
    """The DOM id of a model row, e.g. `schedule-42` or `schedule-42-last-run`.

    hx-target attributes and the browser tests use these ids, so they come from one place.
    """
    return dom_id_of(type(obj).__name__.lower(), obj.id, suffix)


def dom_id_of(kind: str, row_id: int, suffix: str | None = None) -> str:
    """`dom_id` of a row that a list loaded as a tuple, not a model: `dom_id_of("run", 42)`."""
    return f"{kind}-{row_id}-{suffix}" if suffix else f"{kind}-{row_id}"


_ID_PLACEHOLDER = 2_147_483_647  # the largest id (params.MAX_ID): never part of a route's text


def id_url(endpoint: str, **values: int) -> str:
    """`url_for(endpoint, name=id)` for a route whose one argument is an id, e.g.
    `id_url("runs.detail", run_id=7)`. url_for walks the URL map (tens of microseconds); a list
    page builds several URLs per row, so each endpoint's URL is built once per request around a
    placeholder id and then filled in."""
    ((name, value),) = values.items()
    before, after = id_url_parts(endpoint, name)
    return f"{before}{int(value)}{after}"


def id_url_parts(endpoint: str, name: str) -> tuple[str, str]:
    """The text before and after the id in the URL of `endpoint` (see id_url), once a request."""
    templates: dict[tuple[str, str], tuple[str, str]] = g.setdefault("id_url_templates", {})
    parts = templates.get((endpoint, name))
    if parts is None:
        placeholder: dict[str, Any] = {name: _ID_PLACEHOLDER}
        before, _, after = url_for(endpoint, **placeholder).rpartition(str(_ID_PLACEHOLDER))
        parts = templates[(endpoint, name)] = (before, after)
    return parts


# How a run's trigger reads on the panel (the history's rows and filter, a run's page).
TRIGGER_LABELS = {**{trigger: trigger for trigger in TRIGGERS}, "catchup": "catch-up"}


def zone(name: str | None) -> ZoneInfo:
    """A stored zone (checked by cron.check_time_zone when it was saved); no zone is UTC."""
    return cron.load_zone(name or "UTC")


def local_time(moment: datetime | None, time_zone: str | None) -> str:
    """`2026-03-08 03:00 CET` in the given zone."""
    if moment is None:
        return "-"
    local = moment.astimezone(zone(time_zone))
    # isoformat is a C call; strftime costs several times more, and a page formats hundreds.
    return f"{local.isoformat(' ', 'minutes')[:16]} {local.tzname()}"


def utc_time(moment: datetime | None) -> str:
    if moment is None:
        return ""
    return f"{moment.astimezone(UTC).isoformat(' ', 'seconds')[:19]} UTC"


def relative_time(moment: datetime | None, now: datetime | None = None) -> str:
    """`in 5 min`, `3 h ago`, `just now`."""
    if moment is None:
        return ""
    delta = moment - (now or utcnow())
    seconds = abs(delta.total_seconds())
    if seconds < 45:
        return "just now" if delta.total_seconds() <= 0 else "in a few seconds"
    # From 45 s on, minutes (at least 1: 45-89 s is "1 min"), then hours, then days.
    if seconds >= 86400:
        amount = round(seconds / 86400)
        text = f"{amount} day{'s' if amount != 1 else ''}"
    elif seconds >= 3600:
        text = f"{round(seconds / 3600)} h"
    else:
        text = f"{max(1, round(seconds / 60))} min"
    return f"in {text}" if delta.total_seconds() > 0 else f"{text} ago"


def duration(value: timedelta | None) -> str:
    """`850 ms`, `4.2 s`, `3 min 4 s`, `1 h 2 min`."""
    if value is None:
        return "-"
    seconds = value.total_seconds()
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{sign}{seconds:.1f} s"
    if seconds < 3600:
        return f"{sign}{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{sign}{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


# The session key of the header's "Times: Local | UTC" toggle.
TIMES_KEY = "times"


def times_in_utc() -> bool:
    """Whether the user chose to see every time in UTC (the header toggle)."""
    return session.get(TIMES_KEY) == "utc"


def shown_zone(time_zone: str | None) -> str:
    """The zone that pages show times in: the given one, or UTC if the user chose UTC."""
    return "UTC" if times_in_utc() else time_zone or "UTC"


def moment(value: datetime | None, time_zone: str | None, with_date: bool = True) -> Markup:
    """A `<time>` in the zone the user chose (local or UTC), relative time beside it, and the
    other zone in its title. The header toggle makes UTC reachable without a mouse.
    `with_date=False` leaves out the date, under a heading that names the day."""
    if value is None:
        return Markup('<span class="muted">-</span>')
    in_utc, now = moment_settings()
    other = local_time(value, time_zone) if in_utc else utc_time(value)
    shown = local_time(value, "UTC" if in_utc else time_zone or "UTC")
    # An f-string, not Markup.format, and no escaping: every part is made by datetime from
    # digits, separators and a zone's abbreviation. A history page formats 100 of these.
    return Markup(
        f'<time datetime="{value.isoformat()}" title="{other}">'
        f"{shown if with_date else shown[11:]} "
        f'<span class="muted">{relative_time(value, now)}</span></time>'
    )


NOT_STARTED = Markup('<span class="muted not-started">leased, not started yet</span>')


def started_moment(run: Any, time_zone: str | None) -> Markup:
    """A run's start (a model or a row with status and started_at): a running run without one
    is leased by a worker whose slots have not started it yet."""
    if run.started_at is None and run.status == "running":
        return NOT_STARTED
    return moment(run.started_at, time_zone)


def moment_settings() -> tuple[bool, datetime]:
    """Whether this request shows times in UTC, and its `now`: read once per request (the
    relative times of one page are then relative to the same moment)."""
    settings: tuple[bool, datetime] | None = g.get("moment_settings")
    if settings is None:
        settings = g.moment_settings = (times_in_utc(), utcnow())
    return settings


def run_rows(
    runs: Iterable[Any],
    time_zone: str,
    place: str = "",
    show_schedule: bool = True,
    waiting: Mapping[int, Any] | None = None,
) -> Markup:
    """The rows of a run history page (templates/runs/_rows.html), as one piece of HTML.

    Built here rather than by the template: a page has 50 rows of nine cells, and each
    expression, filter and call in a template costs about as much as the value it formats.
    The URLs are built once per page around the id. Every value from the database is escaped;
    times, durations and badges are made by the functions above from numbers and names."""
    detail = id_url_parts("runs.detail", "run_id")
    schedule = id_url_parts("schedules.detail", "schedule_id")
    waiting = waiting or {}
    html = []
    for run in runs:
        row_id = dom_id_of("run", run.id)
        url = f"{detail[0]}{run.id}{detail[1]}"
        started, finished = run.started_at, run.finished_at
        cells = [f'<tr id="{row_id}">\n  <td><a href="{url}">#{run.id}</a></td>\n']
        if show_schedule:
            if run.schedule_name is not None:
                link = f"{schedule[0]}{run.schedule_id}{schedule[1]}"
                name = f'<a href="{link}">{escape(run.schedule_name)}</a>'
            else:
                name = (
                    '<span class="muted" title="The schedule was deleted">'
                    f"{escape(run.job)} (deleted)</span>"
                )
            cells.append(f"  <td>{name}</td>\n")
        trigger = escape(run.trigger)
        covered = (
            ' <span class="muted small" title="Missed fire times this run stands for">'
            f"\u00d7{int(run.fires_covered)}</span>"
            if run.fires_covered > 1
            else ""
        )
        wait = waiting.get(run.id)
        waits = (
            f'<div class="waiting small" id="{row_id}-waiting">Waiting: not started '
            f"{escape(wait.minutes)} min after it was due — {escape(wait.reason)}</div>"
            if wait is not None
            else ""
        )
        cells.append(
            f'  <td data-label="Trigger"><span class="trigger trigger-{trigger}">'
            f"{escape(TRIGGER_LABELS.get(run.trigger, run.trigger))}</span>{covered}</td>\n"
            f'  <td class="small" data-label="Scheduled for">'
            f"{moment(run.scheduled_for, time_zone)}</td>\n"
            f'  <td class="small" data-label="Started">{started_moment(run, time_zone)}</td>\n'
            f'  <td class="small num" data-label="Duration">'
            f"{duration(finished - started) if finished and started else '-'}</td>\n"
            f'  <td class="small num" data-label="Lag">'
            f"{duration(started - run.scheduled_for) if started else '-'}</td>\n"
            f'  <td class="small num" data-label="Attempt">{int(run.attempt)}</td>\n'
            f"  <td>{status_badge(run, place, url)}{waits}</td>\n</tr>\n"
        )
        html.append("".join(cells))
    return Markup("".join(html))


LIVE_STATUSES = ("queued", "running")


def status_badge(run: Any, place: str = "", url: str | None = None) -> Markup:
    """A run's status badge (a model or a history row): templates/runs/_status.html renders it
    alone, lists once per row, so it is made here, not by a macro (a macro call with its
    expressions costs several times this). While the run is queued or running the badge polls
    itself; a finished badge has no trigger, so the polling stops. `place` ("history") keeps
    the id unique where a page shows the same run twice (a schedule's last run and its
    history); the polled badge keeps its place. `url`: the run's page, if the caller has it.
    A status is one of RUN_STATUSES and ids are numbers: nothing here needs escaping."""
    status = run.status
    badge_id = dom_id_of("run", run.id, f"{place}-status" if place else "status")
    poll = spinner = took = ""
    if status in LIVE_STATUSES:
        polled = url_for("runs.status", run_id=run.id, place=place or None)
        poll = f' hx-get="{polled}" hx-trigger="every 1s" hx-swap="outerHTML"'
        spinner = '<span class="spinner" aria-hidden="true"></span>'
    if run.finished_at and run.started_at:
        took = f' <span class="muted">{duration(run.finished_at - run.started_at)}</span>'
    url = url or id_url("runs.detail", run_id=run.id)
    return Markup(
        f'<span class="run-status" id="{badge_id}" data-status="{status}"{poll}>'
        f'<a class="badge badge-{status}" href="{url}">{status}{spinner}</a>{took}</span>'
    )


@functools.lru_cache(maxsize=4096)
def describe_cron(expression: str, time_zone: str = "UTC") -> str:
    """The expression in words (a pure function of its arguments: remembered, since the list
    describes 50 schedules, most of them with common expressions)."""
    try:
        return cron.describe(cron.validate(expression, time_zone))
    except (cron.CronError, ValueError):
        return "not a valid expression"


def is_htmx() -> bool:
    return request.headers.get("HX-Request") == "true"


def pretty_value(value: Any) -> str:
    """An audit value as a user reads it: text as is, the rest as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def install(app: Flask) -> None:
    app.add_template_global(dom_id)
    app.add_template_global(dom_id_of)
    app.add_template_global(run_rows)
    app.add_template_global(status_badge)
    app.add_template_global(id_url)
    app.add_template_global(tenancy.can_write)
    app.add_template_global(tenancy.is_operator)
    app.add_template_global(tenancy.is_operator_view)
    app.add_template_global(is_htmx)
    app.add_template_global(times_in_utc)
    app.add_template_global(shown_zone)
    app.jinja_env.globals["MAX_SCHEDULE_NAME"] = MAX_SCHEDULE_NAME
    app.jinja_env.globals["trigger_labels"] = TRIGGER_LABELS
    app.add_template_filter(local_time, "local_time")
    app.add_template_filter(utc_time, "utc_time")
    app.add_template_filter(relative_time, "relative_time")
    app.add_template_filter(duration, "duration")
    app.add_template_filter(moment, "moment")
    app.add_template_filter(started_moment, "started_moment")
    app.add_template_filter(describe_cron, "describe_cron")
    app.add_template_filter(pretty_value, "pretty_value")

    @app.context_processor
    def panel_context() -> dict[str, Any]:
        def tenant_or_none() -> Any:
            try:
                return tenancy.current_membership()
            except (tenancy.NoTenant, AttributeError):
                return None

        return {"current_membership": tenant_or_none, "my_memberships": tenancy.memberships}
