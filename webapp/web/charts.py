"""The geometry of the panel's small charts: scales, ticks, polylines, bars and outcome strips.

Pure arithmetic, no SQL and no Flask: the services hand over numbers, the functions here turn
them into coordinates in an SVG viewBox, and the templates in templates/charts/ draw them. The
SVGs scale to their container's width, so coordinates are in viewBox units, not pixels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Protocol


@dataclass(frozen=True)
class Scale:
    """Maps values in [low, high] onto [start, end] linearly (end < start for a y axis, whose
    origin is at the top)."""

    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        if self.high == self.low:  # one value, or all equal: the start of the range
            return self.start
        share = (value - self.low) / (self.high - self.low)
        return round(self.start + share * (self.end - self.start), 2)


def nice_step(rough: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten that is at least `rough` (> 0)."""
    power = 10 ** math.floor(math.log10(rough))
    for multiple in (1, 2, 5, 10):
        if multiple * power >= rough:
            return multiple * power
    return 10 * power  # unreachable: 10 * power >= rough by the choice of power


def nice_ticks(maximum: float, count: int = 4, whole: bool = False) -> list[float]:
    """Round tick values from 0 up to at least `maximum`, about `count` steps: an axis of
    0, 5, 10, 15 reads better than 0, 3.7, 7.4. All zero (or nothing) gives 0 and 1. With
    `whole`, steps are whole numbers (counts: no half a fire)."""
    if maximum <= 0:
        return [0.0, 1.0]
    step = nice_step(maximum / count)
    if whole:
        step = max(step, 1)
    steps = math.ceil(round(maximum / step, 9))
    return [round(step * i, 9) for i in range(steps + 1)]


def number(value: float) -> str:
    """A tick label or figure: 1,234 or 2.5 or 0.25 (no trailing zeros)."""
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Box:
    """The chart's viewBox and, inside it, the plot area (room for axis labels around it)."""

    width: int
    height: int
    left: int
    top: int
    right: int
    bottom: int

    @property
    def plot_right(self) -> int:
        return self.width - self.right

    @property
    def plot_bottom(self) -> int:
        return self.height - self.bottom


@dataclass(frozen=True)
class Tick:
    at: float  # the coordinate along its axis
    label: str


@dataclass(frozen=True)
class Marker:
    x: float
    y: float
    label: str  # what a screen reader and a hover tooltip say: "3 Mar: 4.2 s"


@dataclass(frozen=True)
class Line:
    name: str
    style: str  # "solid" or "dashed": a dash pattern, so two lines differ without colour
    marker: str  # "circle" or "square"
    segments: list[str]  # polyline `points`, split where a day has no value
    markers: list[Marker]


@dataclass(frozen=True)
class LineChart:
    box: Box
    lines: list[Line]
    y_ticks: list[Tick]
    x_ticks: list[Tick]


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]  # None: no value that day (a gap in the line)
    style: str = "solid"
    marker: str = "circle"


LINE_BOX = Box(width=640, height=220, left=56, top=12, right=16, bottom=40)


def line_chart(
    x_labels: Sequence[str],
    series: Sequence[Series],
    value_label: str = "{}",
    box: Box = LINE_BOX,
    x_tick_every: int = 7,
) -> LineChart:
    """Lines over the same x positions (one per label), on one y axis from 0 to a nice
    maximum. `value_label` formats a value for the markers' labels ("{} s")."""
    count = len(x_labels)
    x = Scale(0, max(count - 1, 0), box.left, box.plot_right)
    values = [v for s in series for v in s.values if v is not None]
    ticks = nice_ticks(max(values, default=0))
    y = Scale(0, ticks[-1], box.plot_bottom, box.top)
    lines = []
    for one in series:
        segments: list[str] = []
        current: list[str] = []
        markers = []
        for i, value in enumerate(one.values):
            if value is None:
                if current:
                    segments.append(" ".join(current))
                current = []
                continue
            current.append(f"{x(i)},{y(value)}")
            label = f"{x_labels[i]}: {value_label.format(number(round(value, 2)))}"
            markers.append(Marker(x(i), y(value), label))
        if current:
            segments.append(" ".join(current))
        lines.append(Line(one.name, one.style, one.marker, segments, markers))
    return LineChart(
        box=box,
        lines=lines,
        y_ticks=[Tick(y(t), number(t)) for t in ticks],
        x_ticks=[Tick(x(i), x_labels[i]) for i in range(0, count, x_tick_every)],
    )


class DayOutcome(Protocol):
    """One day of a schedule's runs, as the charts need it (services.schedule_stats.DayStats)."""

    @property
    def day(self) -> date: ...
    @property
    def runs(self) -> int: ...
    @property
    def succeeded(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def duration_p50_seconds(self) -> float | None: ...
    @property
    def lag_mean_seconds(self) -> float | None: ...


# What a day looks like in the strip: the shape and the symbol carry the meaning, not the colour.
OUTCOME_KINDS = {
    "failed": ("✗", "failures"),
    "ok": ("✓", "no failures"),
    "none": ("\u2013", "no runs"),  # an en dash
}


@dataclass(frozen=True)
class StripCell:
    x: float
    width: float
    kind: str  # a key of OUTCOME_KINDS
    symbol: str
    label: str  # "3 Mar: 4 runs, 3 succeeded, 1 failed"


def outcome_kind(day: DayOutcome) -> str:
    if day.failed:
        return "failed"
    return "ok" if day.runs else "none"


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def day_label(day: date) -> str:
    return f"{day.day} {day:%b}"


def outcome_strip(days: Sequence[DayOutcome], width: int = 640, gap: float = 2) -> list[StripCell]:
    """One cell per day, left to right, sharing `width` evenly."""
    if not days:
        return []
    cell = width / len(days)
    cells = []
    for i, day in enumerate(days):
        kind = outcome_kind(day)
        if day.runs:
            parts = [plural(day.runs, "run"), f"{day.succeeded} succeeded"]
            parts += [f"{day.failed} failed"] if day.failed else []
            parts += [f"{day.skipped} skipped"] if day.skipped else []
            rest = day.runs - day.succeeded - day.failed - day.skipped
            parts += [f"{rest} cancelled or not finished"] if rest > 0 else []
            text = ", ".join(parts)
        else:
            text = "no runs"
        cells.append(
            StripCell(
                x=round(i * cell + gap / 2, 2),
                width=round(cell - gap, 2),
                kind=kind,
                symbol=OUTCOME_KINDS[kind][0],
                label=f"{day_label(day.day)}: {text}",
            )
        )
    return cells


@dataclass(frozen=True)
class PeakLabel:
    """A bar's figure written above it: anchored at its middle, or at its start or end near
    an edge so that it stays inside the picture."""

    x: float
    y: float
    label: str
    anchor: str  # SVG text-anchor: "start", "middle" or "end"
    left: float  # the text's extent along x, as wide as PEAK_CHAR_WIDTH says
    right: float


@dataclass(frozen=True)
class BarChart:
    box: Box
    path: str  # every non-empty bar in one path: 1,440 <rect>s would weigh ten times more
    bar_width: float
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    peaks: list[PeakLabel]  # the tallest bars, labelled on the chart, no two labels overlapping


BAR_BOX = Box(width=1440 + 70, height=280, left=60, top=28, right=10, bottom=60)
# A peak label's character at .chart-bars' font size (18 viewBox units, semibold, in app.css):
# generous, so that two labels estimated apart are apart whatever the font.
PEAK_CHAR_WIDTH = 11.5
PEAK_GAP = 16  # viewBox units at least between two peak labels


def peak_label(x: float, y: float, label: str, box: Box) -> PeakLabel:
    width = len(label) * PEAK_CHAR_WIDTH
    if x - width / 2 < box.left:
        return PeakLabel(x, y, label, "start", x, x + width)
    if x + width / 2 > box.plot_right:
        return PeakLabel(x, y, label, "end", x - width, x)
    return PeakLabel(x, y, label, "middle", x - width / 2, x + width / 2)


def bar_chart(
    values: Sequence[int],
    x_ticks: Sequence[tuple[int, str]],
    peaks: Sequence[tuple[int, str]] = (),
    box: Box = BAR_BOX,
    most_peaks: int = 3,
) -> BarChart:
    """Bars of `values` side by side, from 0 up; `x_ticks` are (index, label), `peaks` the
    candidate bars to label, (index, label) best first: the first `most_peaks` whose labels
    overlap none of those taken before."""
    count = max(len(values), 1)
    bar = (box.plot_right - box.left) / count
    ticks = nice_ticks(max(values, default=0), whole=True)
    y = Scale(0, ticks[-1], box.plot_bottom, box.top)
    # Each bar: move to its bottom left, up, across, down, close. Zero bars are left out.
    path = " ".join(
        f"M{round(box.left + i * bar, 2)},{box.plot_bottom}"
        f"V{y(value)}h{round(bar, 2)}V{box.plot_bottom}Z"
        for i, value in enumerate(values)
        if value > 0
    )
    labelled: list[PeakLabel] = []
    for i, label in peaks:
        if len(labelled) == most_peaks:
            break
        if not 0 <= i < len(values):
            continue
        peak = peak_label(round(box.left + (i + 0.5) * bar, 2), y(values[i]), label, box)
        if all(
            peak.right + PEAK_GAP <= other.left or other.right + PEAK_GAP <= peak.left
            for other in labelled
        ):
            labelled.append(peak)
    return BarChart(
        box=box,
        path=path,
        bar_width=round(bar, 2),
        y_ticks=[Tick(y(t), number(t)) for t in ticks],
        x_ticks=[Tick(round(box.left + i * bar, 2), label) for i, label in x_ticks],
        peaks=labelled,
    )


@dataclass(frozen=True)
class DaysFigures:
    """A schedule's last days, drawn: duration and lag per day, and the outcome strip."""

    days: Sequence[DayOutcome]
    lines: LineChart
    strip: list[StripCell]
    runs: int
    failed_days: int

    @property
    def empty(self) -> bool:
        return self.runs == 0

    @property
    def outcome_kinds(self) -> dict[str, tuple[str, str]]:
        return OUTCOME_KINDS

    @property
    def period(self) -> str:
        return f"{self.days[0].day} to {self.days[-1].day} (UTC)" if self.days else ""

    def strip_summary(self) -> str:
        """The strip in words: the runs, and each day with failures, by date."""
        failed = [cell.label for cell in self.strip if cell.kind == "failed"]
        idle = sum(1 for cell in self.strip if cell.kind == "none")
        text = f"{plural(self.runs, 'run')} in {plural(len(self.strip), 'day')}; "
        text += f"{plural(len(failed), 'day')} with failures"
        text += f": {'; '.join(failed)}" if failed else ""
        return text + f"; {plural(idle, 'day')} without runs."

    def lines_summary(self) -> str:
        """The lines in words: every day's value of each (days without one are left out)."""
        parts = []
        for line in self.lines.lines:
            if not line.markers:
                parts.append(f"{line.name}: no values")
                continue
            values = [marker.label for marker in line.markers]
            parts.append(f"{line.name}: {', '.join(values)}")
        return ". ".join(parts) + "."


def days_figures(days: Sequence[DayOutcome]) -> DaysFigures:
    """The charts of the schedule page's "Last 30 days"."""
    labels = [day_label(day.day) for day in days]
    lines = line_chart(
        labels,
        [
            Series("Duration (median)", [d.duration_p50_seconds for d in days], "solid", "circle"),
            Series("Lag (mean)", [d.lag_mean_seconds for d in days], "dashed", "square"),
        ],
        value_label="{} s",
    )
    return DaysFigures(
        days=days,
        lines=lines,
        strip=outcome_strip(days),
        runs=sum(day.runs for day in days),
        failed_days=sum(1 for day in days if day.failed),
    )
