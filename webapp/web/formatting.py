"""Template helpers: DOM ids, times in a zone, relative times, durations, cron descriptions."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from flask import Flask, g, request, session, url_for
from markupsafe import Markup, escape

from webapp import cron
from webapp.database import utcnow
from webapp.models import MAX_SCHEDULE_NAME
from webapp.web import tenancy


def dom_id(obj: Any, suffix: str | None = None) -> str:
    """The DOM id of a model row, e.g. `schedule-42` or `schedule-42-last-run`.

    hx-target attributes and the browser tests use these ids, so they come from one place.
    """
    base = f"{type(obj).__name__.lower()}-{obj.id}"
    return f"{base}-{suffix}" if suffix else base


_ID_PLACEHOLDER = 2_147_483_647  # the largest id (params.MAX_ID): never part of a route's text


def id_url(endpoint: str, **values: int) -> str:
    """`url_for(endpoint, name=id)` for a route whose one argument is an id, e.g.
    `id_url("runs.detail", run_id=7)`. url_for walks the URL map (tens of microseconds); a list
    page builds several URLs per row, so each endpoint's URL is built once per request around a
    placeholder id and then filled in."""
    ((name, value),) = values.items()
    templates: dict[tuple[str, str], tuple[str, str]] = g.setdefault("id_url_templates", {})
    parts = templates.get((endpoint, name))
    if parts is None:
        placeholder: dict[str, Any] = {name: _ID_PLACEHOLDER}
        before, _, after = url_for(endpoint, **placeholder).rpartition(str(_ID_PLACEHOLDER))
        parts = templates[(endpoint, name)] = (before, after)
    return f"{parts[0]}{int(value)}{parts[1]}"


def zone(name: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ValueError, KeyError):
        return ZoneInfo("UTC")


def local_time(moment: datetime | None, time_zone: str | None) -> str:
    """`2026-03-08 03:00 CET` in the given zone."""
    if moment is None:
        return "-"
    local = moment.astimezone(zone(time_zone))
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}"


def utc_time(moment: datetime | None) -> str:
    if moment is None:
        return ""
    return moment.astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%d %H:%M:%S UTC")


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
    other = local_time(value, time_zone) if times_in_utc() else utc_time(value)
    shown = local_time(value, shown_zone(time_zone))
    # An f-string of escaped parts: Markup.format costs more than the rest of a history row.
    return Markup(
        f'<time datetime="{escape(value.isoformat())}" title="{escape(other)}">'
        f"{escape(shown if with_date else shown[11:])} "
        f'<span class="muted">{escape(relative_time(value))}</span></time>'
    )


def describe_cron(expression: str, time_zone: str = "UTC") -> str:
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
    app.add_template_global(id_url)
    app.add_template_global(tenancy.can_write)
    app.add_template_global(is_htmx)
    app.add_template_global(times_in_utc)
    app.add_template_global(shown_zone)
    app.jinja_env.globals["MAX_SCHEDULE_NAME"] = MAX_SCHEDULE_NAME
    app.add_template_filter(local_time, "local_time")
    app.add_template_filter(utc_time, "utc_time")
    app.add_template_filter(relative_time, "relative_time")
    app.add_template_filter(duration, "duration")
    app.add_template_filter(moment, "moment")
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
