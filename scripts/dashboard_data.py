"""What the Helm chart's Grafana dashboard shows, as data: each panel's queries run on a real
Prometheus (:func:`fetch`), series named as Grafana names them (:func:`legend`) and values
written in the panel's unit as Grafana writes them (:func:`format_value`). The drawing is
:mod:`scripts.dashboard_render`'s.

* :func:`fetch` fills the Grafana variables of each target (through ``substitute``, e.g.
  ``tests.prometheus_server.substitute_grafana``), runs a range query for a time-series target
  and an instant query (at ``end``) for a stat or table target through Prometheus' HTTP API,
  and names each series by the target's ``legendFormat``. A query Prometheus refuses raises
  ``RuntimeError``.
* :func:`panel_message` says "No data" for a panel whose queries returned nothing, as Grafana
  does.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

NO_DATA = "No data"


@dataclass(frozen=True)
class Series:
    """One series of a panel: its legend text and samples (unix seconds, values)."""

    label: str
    times: list[float]
    values: list[float]


#: Per panel: its series (time-series and stat panels) or its rows (table panels).
PanelEntry = Sequence[Series] | Sequence[Mapping[str, str]]
#: Panel id -> what its queries returned.
PanelData = Mapping[int, PanelEntry]


#: Units scaled by a base: (base, suffix per power), as Grafana's value formats.
_SCALED: dict[str, tuple[int, tuple[str, ...]]] = {
    "short": (1000, ("", " K", " Mil", " Bil", " Tri")),
    "ops": (1000, (" ops/s", " K ops/s", " Mil ops/s", " Bil ops/s", " Tri ops/s")),
    "bytes": (1024, (" B", " KiB", " MiB", " GiB", " TiB", " PiB")),
    "Bps": (1000, (" B/s", " kB/s", " MB/s", " GB/s", " TB/s", " PB/s")),
}
_SECONDS: tuple[tuple[float, str], ...] = (
    (31_536_000, " year"), (604_800, " week"), (86_400, " day"), (3600, " hour"), (60, " min"),
    (1, " s"), (1e-3, " ms"), (1e-6, " µs"), (1e-9, " ns"),
)  # fmt: skip


def _number(value: float, decimals: int | None) -> str:
    """Three significant digits without trailing zeros, or ``decimals`` fixed ones."""
    if decimals is not None:
        return f"{value:.{decimals}f}"
    digits = min(12, max(0, 2 - math.floor(math.log10(abs(value))))) if value else 0
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def scale(value: float, unit: str) -> tuple[float, str]:
    """The divisor and suffix of ``value`` in ``unit`` (``s``, ``short`` and the like)."""
    if unit == "s" and value:
        return next((s for s in _SECONDS if abs(value) >= s[0]), _SECONDS[-1])
    if unit not in _SCALED:
        return 1, "" if unit in ("", "none") else f" {unit}"
    base, suffixes = _SCALED[unit]
    power = 0
    while power + 1 < len(suffixes) and abs(value) >= base ** (power + 1):
        power += 1
    return base**power, suffixes[power]


def format_value(value: float, unit: str, decimals: int | None = None) -> str:
    """``value`` as Grafana shows it in ``unit``: 1536 bytes is "1.5 KiB", 0.25 percentunit
    "25%", 0.0012 s "1.2 ms", 90 s "1.5 min", 1500 ops "1.5 K ops/s"; a dateTimeAsIso value
    (ms since the epoch) is a UTC time; an unknown unit is appended, as Grafana does."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if unit == "percentunit":
        return f"{_number(value * 100, decimals)}%"
    if unit == "dateTimeAsIso":
        return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    factor, suffix = scale(value, unit)
    return _number(value / factor, decimals) + suffix


def legend(legend_format: str, labels: Mapping[str, str]) -> str:
    """A series' name as Grafana makes it: each ``{{label}}`` of the target's ``legendFormat``
    replaced by the label's value (by the label's name when the series lacks it, as Grafana
    does); without a legendFormat, the metric name and labels: ``up{pod="a"}``."""
    if legend_format and legend_format != "__auto":
        pattern = r"\{\{\s*(.+?)\s*\}\}"
        return re.sub(pattern, lambda m: labels.get(m.group(1)) or m.group(1), legend_format)
    rest = ", ".join(f'{k}="{v}"' for k, v in labels.items() if k != "__name__")
    return f"{labels.get('__name__', '')}{{{rest}}}"


def series_of(entry: PanelEntry | None) -> list[Series]:
    return [s for s in entry or () if isinstance(s, Series)]


def last_value(values: Sequence[float]) -> float | None:
    """Grafana's ``lastNotNull`` reduction (NaN counts as null)."""
    return next((v for v in reversed(values) if not math.isnan(v)), None)


def panel_message(panel: Mapping[str, Any], entry: PanelEntry | None) -> str | None:
    """The text a panel shows instead of data: "No data" when its queries returned no series
    with a value (no rows, for a table); ``None`` when there is something to draw."""
    if panel["type"] not in ("timeseries", "stat", "table"):
        return f"({panel['type']} panels are not drawn here)"
    if panel["type"] == "table":
        found = any(not isinstance(row, Series) for row in entry or ())
    else:
        found = any(last_value(s.values) is not None for s in series_of(entry))
    return None if found else NO_DATA


def _query(prometheus_url: str, path: str, **params: str) -> dict[str, Any]:
    """The ``data`` of Prometheus' answer to ``/api/v1/<path>``; refused: ``RuntimeError``."""
    url = f"{prometheus_url.rstrip('/')}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:  # 400 and 422 carry Prometheus' error as JSON
        body = exc.read()
    answer = json.loads(body)
    if answer.get("status") != "success":
        error = f"{answer.get('errorType')}: {answer.get('error')}"
        raise RuntimeError(f"Prometheus refused {params.get('query')!r}: {error}")
    data: dict[str, Any] = answer["data"]
    return data


def fetch(
    dashboard: Mapping[str, Any],
    prometheus_url: str,
    variables: Mapping[str, str],
    start: float,
    end: float,
    step: float = 1.0,
    *,
    substitute: Callable[[str, dict[str, str]], str],
) -> PanelData:
    """Run the queries of the dashboard's panels (not those in collapsed rows) on Prometheus
    over ``[start, end]`` (unix seconds), with ``variables`` put in by ``substitute``;
    ``__interval``, ``__range``, ``__range_s`` and ``__range_ms`` follow from the range unless
    given. The step grows past 10,000 points a series, as Grafana's would (Prometheus refuses
    more than 11,000). A table's rows are its series' labels and ``Value``."""
    step = max(step, (end - start) / 10_000)
    filled = {
        "__interval": f"{step:g}s",
        "__range": f"{round(end - start)}s",
        "__range_s": str(round(end - start)),
        "__range_ms": str(round((end - start) * 1000)),
        **variables,
    }
    out: dict[int, PanelEntry] = {}
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        series: list[Series] = []
        rows: list[dict[str, str]] = []
        for target in panel.get("targets", []):
            if target.get("hide"):
                continue
            expr = substitute(target["expr"], filled)
            if panel["type"] != "table" and target.get("range", panel["type"] == "timeseries"):
                window = {"start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
                data = _query(prometheus_url, "query_range", query=expr, **window)
            else:
                data = _query(prometheus_url, "query", query=expr, time=f"{end:.3f}")
            result = data["result"]
            if data["resultType"] in ("scalar", "string"):
                result = [{"metric": {}, "value": result}]
            for item in result:
                labels, points = item["metric"], item.get("values") or [item["value"]]
                times, values = [float(t) for t, _ in points], [float(v) for _, v in points]
                rows.append({**labels, "Value": str(values[-1])})
                series.append(Series(legend(target.get("legendFormat", ""), labels), times, values))
        out[panel["id"]] = rows if panel["type"] == "table" else series
    return out
