"""The Helm chart's Grafana dashboard drawn as a PNG, from what a real Prometheus returns.

Grafana cannot run here, so the documentation's picture of the dashboard comes from this
module, and it keeps to the dashboard JSON: every panel sits where its ``gridPos`` puts it
(24 columns across the image; ``h`` in Grafana's grid rows of 30 px plus an 8 px gap) and shows
what its own queries return (:func:`scripts.dashboard_data.fetch`).

* :func:`render` draws a row as a full-width heading, a time series as lines (filled by
  ``fillOpacity``, broken where samples are missing) with a legend below and the y axis in the
  panel's unit (:func:`format_value`), a stat as each series' last value in the unit, coloured
  by the thresholds, and a table as text rows with the columns of its ``organize``
  transformation. A panel whose queries returned nothing says "No data", as Grafana does.

Panels inside collapsed rows are not drawn (Grafana hides them too). Times are in UTC.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import is_color_like
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator

from scripts.dashboard_data import (
    PanelData,
    Series,
    format_value,
    last_value,
    panel_message,
    scale,
    series_of,
)

GRID_COLUMNS = 24
#: A grid row of Grafana: 30 px high plus the 8 px gap between panels.
ROW_PX = 38
GAP_PX = 8
#: The band above the grid with the dashboard's title and time range.
HEADER_PX = 48
DPI = 100
BACKGROUND, PANEL, BORDER, TEXT, MUTED = "#111217", "#181b1f", "#2c3037", "#ccccdc", "#8e8ea0"
#: Grafana's ``palette-classic``, and its named threshold colours.
PALETTE = ("#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9")
NAMED = {"green": "#73bf69", "orange": "#ff9830", "red": "#f2495c", "yellow": "#fade2a"}
#: Steps of the time axis' ticks, in seconds.
TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


Box = tuple[float, float, float, float]


def _placed(
    dashboard: Mapping[str, Any], only_rows: Collection[str] | None
) -> tuple[list[tuple[dict[str, Any], int]], int]:
    """The panels to draw, each with its grid row (closing up over the rows left out), and
    the grid's height in rows."""
    sections: list[list[dict[str, Any]]] = [[]]
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            sections.append([])
        sections[-1].append(panel)
    placed, cursor = [], 0
    for members in sections:
        title = members[0]["title"] if members and members[0]["type"] == "row" else None
        if not members or (only_rows is not None and title not in only_rows):
            continue
        top = min(p["gridPos"]["y"] for p in members)
        placed += [(p, p["gridPos"]["y"] - top + cursor) for p in members]
        cursor += max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in members) - top
    return placed, cursor


def canvas_size(
    dashboard: Mapping[str, Any], width_px: int = 1800, only_rows: Collection[str] | None = None
) -> tuple[int, int]:
    """The PNG's ``(width, height)`` in pixels: the height is the header plus the grid rows."""
    return width_px, HEADER_PX + _placed(dashboard, only_rows)[1] * ROW_PX + GAP_PX


def _fit(text: str, width_px: float, font_px: float) -> str:
    room = max(1, int(width_px / (0.6 * font_px) + 1e-6))
    return text if len(text) <= room else text[: room - 1] + "…"


@dataclass
class _Page:
    """The figure, and an axes over all of it in pixels (y down) for text, lines and boxes."""

    fig: Figure
    canvas: Axes
    size: tuple[int, int]
    #: The time axes' range (unix seconds), or ``None`` for each panel's own.
    span: tuple[float, float] | None

    def text(
        self, x: float, y: float, text: str, px: float, color: str = TEXT, **style: Any
    ) -> None:
        style.setdefault("va", "center")
        self.canvas.text(x, y, text, color=color, fontsize=px * 72 / DPI, **style)

    def rect(self, box: Box) -> Box:
        """``box`` in fractions of the figure, from its bottom left (matplotlib's axes rect)."""
        (width, height), (x, y, w, h) = self.size, box
        return x / width, 1 - (y + h) / height, w / width, h / height


def _defaults(panel: Mapping[str, Any]) -> dict[str, Any]:
    defaults: dict[str, Any] = panel.get("fieldConfig", {}).get("defaults", {})
    return defaults


def _timeseries(page: _Page, panel: dict[str, Any], series: list[Series], box: Box) -> None:
    """Lines with a legend below; the y axis in the panel's unit, from its min and max."""
    (x, y, w, h), defaults, font = box, _defaults(panel), 11
    unit, decimals = defaults.get("unit", "short"), defaults.get("decimals")
    column = max(len(s.label) for s in series) * 0.6 * font + 26
    ncol = max(1, int(w // column))
    lines = min(math.ceil(len(series) / ncol), max(1, int(h * 0.35 // 16)))
    plot_h = h - lines * 16 - 22
    finite = [v for s in series for v in s.values if math.isfinite(v)]
    lo = defaults.get("min", min(finite, default=0.0))
    hi = defaults.get("max", max(finite, default=0.0))
    hi = hi if hi > lo else lo + (abs(lo) or 1)
    pad = (hi - lo) * 0.05
    ax = page.fig.add_axes(page.rect((x, y, w, plot_h)), facecolor="none")
    ax.set_ylim(lo - pad * ("min" not in defaults), hi + pad * ("max" not in defaults))
    factor = scale(max(abs(lo), abs(hi)), unit)[0]  # ticks at round KiB, ms, min, ...
    ticks = MaxNLocator(nbins=max(2, int(plot_h // 45))).tick_values(lo / factor, hi / factor)
    ax.set_yticks([t * factor for t in ticks if lo <= t * factor <= hi + pad])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_value(v, unit, decimals)))
    chars = max((len(format_value(t, unit, decimals)) for t in ax.get_yticks()), default=1)
    left = chars * 0.6 * font + 8
    ax.set_position(page.rect((x + left, y, w - left, plot_h)))
    opacity = defaults.get("custom", {}).get("fillOpacity", 0) / 100
    for i, s in enumerate(series):
        color, times, values = PALETTE[i % len(PALETTE)], np.array(s.times), np.array(s.values)
        if len(times) > 2:  # spanNulls off: a missing sample breaks the line
            gaps = np.flatnonzero(np.diff(times) > 2 * np.median(np.diff(times))) + 1
            times, values = np.insert(times, gaps, times[gaps]), np.insert(values, gaps, np.nan)
        ax.plot(times, values, color=color, lw=1.2, marker="o" if len(times) == 1 else "", ms=3)
        if opacity:
            ax.fill_between(times, values, max(lo, 0), color=color, alpha=opacity, lw=0)
        if i < ncol * lines:
            lx, ly = x + (i % ncol) * column, y + plot_h + 28 + (i // ncol) * 16
            page.canvas.plot([lx, lx + 14], [ly, ly], color=color, lw=3)
            page.text(lx + 20, ly, _fit(s.label, column - 26, font), font)
    if len(series) > ncol * lines:
        page.text(x + w, y + h, f"+{len(series) - ncol * lines} more", font, MUTED, ha="right")
    if page.span is not None:
        ax.set_xlim(*page.span)
    start, end = ax.get_xlim()
    step = next((s for s in TICK_STEPS if (end - start) / s <= max(2, w // 90)), TICK_STEPS[-1])
    ax.set_xticks(np.arange(math.ceil(start / step) * step, end + 1e-6, step))
    pattern = "%H:%M:%S" if step < 60 else "%H:%M" if step < 86_400 else "%m-%d"
    ax.xaxis.set_major_formatter(
        FuncFormatter(lambda t, _: datetime.fromtimestamp(t, UTC).strftime(pattern))
    )
    ax.tick_params(colors=MUTED, labelsize=font * 72 / DPI, length=0, pad=3)
    ax.grid(True, color=BORDER, lw=0.6)
    for spine in ax.spines.values():
        spine.set_visible(False)


def _stat(page: _Page, panel: dict[str, Any], series: list[Series], box: Box) -> None:
    """Each series' last value in the unit, coloured by the thresholds; with its name when
    there are several (``textMode`` auto), side by side in a wide panel (``orientation``)."""
    (x, y, w, h), defaults = box, _defaults(panel)
    colored = panel.get("options", {}).get("colorMode", "value") != "none"
    shown = [(s.label, v) for s in series if (v := last_value(s.values)) is not None]
    across, n = w >= h, len(shown)
    cell_w, cell_h = (w / n, h) if across else (w, h / n)
    for i, (label, value) in enumerate(shown):
        cx = x + cell_w * (i + 0.5) if across else x + w / 2
        cy = y + h / 2 if across else y + cell_h * (i + 0.5)
        color = "green"
        for step in defaults.get("thresholds", {}).get("steps", []):
            if step.get("value") is None or value >= step["value"]:
                color = step["color"]
        color = NAMED.get(color, color if is_color_like(color) else TEXT) if colored else TEXT
        text = format_value(value, defaults.get("unit", "short"), defaults.get("decimals"))
        if n > 1:
            name_px = min(14, cell_h * 0.2)
            page.text(
                cx, cy - cell_h * 0.28, _fit(label, cell_w - 8, name_px), name_px, ha="center"
            )
            cy += cell_h * 0.1
        font = min(cell_h * (0.45 if n > 1 else 0.6), (cell_w - 8) / (0.72 * len(text)))
        page.text(cx, cy, text, font, color, ha="center", weight="bold")


def _table(page: _Page, panel: dict[str, Any], rows: list[Mapping[str, str]], box: Box) -> None:
    """Text rows, with the columns (order, names, hidden ones) of the panel's ``organize``
    transformation; the Value column in the panel's unit."""
    (x, y, w, h), unit = box, _defaults(panel).get("unit", "short")
    organize: dict[str, Any] = {}
    for transformation in panel.get("transformations", []):
        if transformation["id"] == "organize":
            organize = transformation.get("options", {})
    hidden = {k for k, v in organize.get("excludeByName", {}).items() if v}
    order, rename = organize.get("indexByName", {}), organize.get("renameByName", {})
    names = {k for r in rows for k in r} - hidden
    columns = sorted(names, key=lambda c: (order.get(c, len(order)), c == "Value", c))
    room = max(2, int(h // 22)) - 1
    cells = [[rename.get(c, c) for c in columns]]
    for row in rows[: room if len(rows) <= room else room - 1]:
        value = format_value(float(row["Value"]), unit) if row.get("Value") else ""
        cells.append([value if c == "Value" else row.get(c, "") for c in columns])
    if len(rows) > room:
        cells.append([f"… {len(rows) - room + 1} more rows"])
    cell_w = w / max(1, len(columns))
    for r, line in enumerate(cells):
        if r:
            page.canvas.plot([x, x + w], [y + r * 22, y + r * 22], color=BORDER, lw=0.6)
        for c, text in enumerate(line):
            style = {"color": MUTED, "weight": "bold"} if r == 0 else {}
            page.text(x + c * cell_w, y + 11 + r * 22, _fit(text, cell_w, 12), 12, **style)


def render(
    dashboard: Mapping[str, Any],
    data: PanelData,
    out: Path,
    *,
    title: str | None = None,
    width_px: int = 1800,
    only_rows: Collection[str] | None = None,
    time_range: tuple[float, float] | None = None,
) -> None:
    """Draw ``dashboard`` with ``data`` into the PNG ``out`` (``width_px`` wide, as high as the
    grid): every panel, or those of the rows titled ``only_rows``. The time axes span
    ``time_range`` (unix seconds), by default that of all the series in ``data``."""
    width, height = canvas_size(dashboard, width_px, only_rows)
    fig = Figure(figsize=((width + 0.01) / DPI, (height + 0.01) / DPI), dpi=DPI)
    times = [t for entry in data.values() for s in series_of(entry) for t in s.times]
    span = time_range or ((min(times), max(times)) if times else None)
    page = _Page(fig, fig.add_axes((0, 0, 1, 1)), (width, height), span)
    page.canvas.set_xlim(0, width)
    page.canvas.set_ylim(height, 0)
    page.canvas.set_axis_off()
    page.text(GAP_PX, HEADER_PX / 2, title or dashboard.get("title", ""), 20, weight="bold")
    if span is not None:
        period = " to ".join(format_value(t * 1000, "dateTimeAsIso") for t in span)
        page.text(width - GAP_PX, HEADER_PX / 2, f"{period} UTC", 13, MUTED, ha="right")
    column = (width - GAP_PX) / GRID_COLUMNS
    for panel, row in _placed(dashboard, only_rows)[0]:
        grid = panel["gridPos"]
        x, y = GAP_PX + grid["x"] * column, HEADER_PX + row * ROW_PX
        w, h = grid["w"] * column - GAP_PX, grid["h"] * ROW_PX - GAP_PX
        if panel["type"] == "row":
            hidden = len(panel.get("panels", [])) if panel.get("collapsed") else 0
            note = f"  ({hidden} panels, collapsed)" if hidden else ""
            page.text(x, y + h / 2, panel.get("title", "") + note, 16, weight="bold")
            continue
        page.canvas.add_patch(Rectangle((x, y), w, h, facecolor=PANEL, edgecolor=BORDER))
        page.text(x + 8, y + 15, _fit(panel.get("title", ""), w - 16, 13), 13, weight="bold")
        entry, body = data.get(panel["id"]), (x + 8, y + 30, w - 16, h - 38)
        message = panel_message(panel, entry)
        if message is not None:
            page.text(x + w / 2, y + h / 2 + 8, message, 15, MUTED, ha="center")
        elif panel["type"] == "timeseries":
            shown = [s for s in series_of(entry) if last_value(s.values) is not None]
            _timeseries(page, panel, shown, body)
        elif panel["type"] == "stat":
            _stat(page, panel, series_of(entry), body)
        else:
            _table(page, panel, [r for r in entry or () if not isinstance(r, Series)], body)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", facecolor=BACKGROUND)
