"""The operator area's charts: fires per minute over the next 24 hours, across all tenants."""

from __future__ import annotations

from flask import Blueprint, render_template
from flask_login import login_required

from webapp.database import utcnow
from webapp.services.forecast import MINUTES, Forecast, fires_per_minute
from webapp.web import tenancy
from webapp.web.charts import BarChart, bar_chart, plural
from webapp.web.operator import fleet_alarms

bp = Blueprint("operator_charts", __name__, url_prefix="/operator")
bp.before_request(login_required(lambda: None))
bp.context_processor(fleet_alarms)

TOP_MINUTES = 10
LABELLED_PEAKS = 3
TICK_HOURS = 3  # hours between the time axis's labels


@bp.get("/fires")
def fires() -> str:
    """Fires per minute over the next 24 hours, all tenants' active schedules, in UTC."""
    tenancy.require_operator()
    forecast = fires_per_minute(utcnow())
    return render_template(
        "operator/fires.html",
        forecast=forecast,
        chart=fires_chart(forecast),
        top=forecast.top(TOP_MINUTES),
    )


def fires_chart(forecast: Forecast) -> BarChart:
    """One bar per minute; the busiest few minutes whose labels do not overlap are labelled."""
    # Ticks on whole hours that are multiples of three (00:00, 03:00, ...), wherever `start` is.
    ticks = [
        (i, f"{forecast.minute(i):%H:%M}")
        for i in range(MINUTES)
        if forecast.minute(i).minute == 0 and forecast.minute(i).hour % TICK_HOURS == 0
    ]
    # The busiest minutes first: bar_chart labels the first few whose labels have room.
    peaks = [
        (
            int((at - forecast.start).total_seconds()) // 60,
            f"{at:%H:%M} UTC: {plural(fires, 'fire')}",
        )
        for at, fires in forecast.top(MINUTES)
    ]
    return bar_chart(forecast.fires, ticks, peaks, most_peaks=LABELLED_PEAKS)
