"""Template helpers: DOM ids, times in a zone, relative times, durations, cron descriptions."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from flask import Flask, g, request, session, url_for

from webapp import cron
from webapp.config import settings
from webapp.database import utcnow
from webapp.models import MAX_SCHEDULE_NAME, TRIGGERS, UNFINISHED_STATUSES
from webapp.services.overdue import schedule_late_by
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


@dataclass(frozen=True, slots=True)
class PageClock:
    """What a page shows its times against, read once per request."""

    in_utc: bool  # the user chose to see every time in UTC (the header toggle)
    now: datetime  # the relative times of one page are relative to the same moment
    overdue_grace: timedelta  # SCHEDULER_OVERDUE_GRACE


def page_clock() -> PageClock:
    """This request's PageClock."""
    clock: PageClock | None = g.get("page_clock")
    if clock is None:
        grace = settings().overdue_grace
        clock = g.page_clock = PageClock(times_in_utc(), utcnow(), grace)
    return clock


def moment_of(value: datetime, time_zone: str | None) -> tuple[str, str, str, str]:
    """A time as the `moment` macro (templates/_macros.html) shows it: its ISO 8601 text, the
    other zone's time for its title (UTC, or the local zone if the user chose UTC), its time in
    the zone the user chose (`2026-03-08 03:00 CET`) and the relative time (`in 5 min`)."""
    clock = page_clock()
    return (
        value.isoformat(),
        local_time(value, time_zone) if clock.in_utc else utc_time(value),
        local_time(value, "UTC" if clock.in_utc else time_zone or "UTC"),
        relative_time(value, clock.now),
    )


# A live badge or history row polls its run each second; a Run now's, for its first seconds,
# four times a second: most end within them, and the result shows within a second
# (docs/reference/panel.md).
POLL_EVERY = "1s"
FIRST_SECONDS_POLL_EVERY = "250ms"
FIRST_SECONDS = timedelta(seconds=5)


def poll_every(run: Any) -> str:
    """How often a live badge or history row of `run` (a model, a history row, a listed last
    run) asks for its status: faster for a manual run due less than FIRST_SECONDS ago."""
    fresh = page_clock().now - run.available_at < FIRST_SECONDS
    return FIRST_SECONDS_POLL_EVERY if run.trigger == "manual" and fresh else POLL_EVERY


def overdue_since(schedule: Any) -> str | None:
    """How long ago a schedule that no tick has dispatched within the grace fell due (`1 h
    ago`), or None when it is not overdue: computed now from the schedule, since the badge must
    show when no worker is alive."""
    clock = page_clock()
    if schedule_late_by(schedule, clock.now, clock.overdue_grace) is None:
        return None
    return relative_time(schedule.next_run_at, clock.now)


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
    app.add_template_global(moment_of)
    app.add_template_global(overdue_since)
    app.add_template_global(poll_every)
    app.add_template_global(id_url)
    app.add_template_global(tenancy.can_write)
    app.add_template_global(tenancy.is_operator)
    app.add_template_global(tenancy.is_operator_view)
    app.add_template_global(is_htmx)
    app.add_template_global(times_in_utc)
    app.add_template_global(shown_zone)
    app.jinja_env.globals["MAX_SCHEDULE_NAME"] = MAX_SCHEDULE_NAME
    app.jinja_env.globals["MAX_PHRASE_LENGTH"] = cron.MAX_PHRASE_LENGTH
    app.jinja_env.globals["trigger_labels"] = TRIGGER_LABELS
    app.jinja_env.globals["unfinished_statuses"] = UNFINISHED_STATUSES
    app.add_template_filter(local_time, "local_time")
    app.add_template_filter(utc_time, "utc_time")
    app.add_template_filter(relative_time, "relative_time")
    app.add_template_filter(duration, "duration")
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
