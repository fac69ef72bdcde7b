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
PEAK_SPACING = 90  # minutes between labelled peaks, so that their labels do not overlap
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
    """One bar per minute; the busiest few minutes far enough apart are labelled."""
    # Ticks on whole hours that are multiples of three (00:00, 03:00, ...), wherever `start` is.
    ticks = [
        (i, f"{forecast.minute(i):%H:%M}")
        for i in range(MINUTES)
        if forecast.minute(i).minute == 0 and forecast.minute(i).hour % TICK_HOURS == 0
    ]
    peaks: list[int] = []
    for at, _fires in forecast.top(MINUTES):
        index = int((at - forecast.start).total_seconds()) // 60
        if all(abs(index - other) >= PEAK_SPACING for other in peaks):
            peaks.append(index)
        if len(peaks) == LABELLED_PEAKS:
            break
    labels = [
        (i, f"{forecast.minute(i):%H:%M} UTC: {plural(forecast.fires[i], 'fire')}") for i in peaks
    ]
    return bar_chart(forecast.fires, ticks, labels)
