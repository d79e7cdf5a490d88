"""The dashboard drawn from synthetic data (scripts/dashboard_render.py); its value formats and
legends, the "No data" text, and :func:`fetch` against a stub of Prometheus' HTTP API
(scripts/dashboard_data.py). The drawing from a real Prometheus is in
tests/kafka/test_dashboard.py."""

from __future__ import annotations

import json
import math
import struct
import threading
import urllib.parse
from collections.abc import Collection, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from scripts.dashboard_data import (
    NO_DATA,
    PanelEntry,
    Series,
    fetch,
    format_value,
    legend,
    panel_message,
)
from scripts.dashboard_render import GAP_PX, HEADER_PX, ROW_PX, canvas_size, render
from tests.prometheus_server import substitute_grafana

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "helm" / "subgraph-monitor" / "dashboards" / "subgraph-monitor.json"
START = 1_700_000_000.0
#: Label values of the synthetic series: every label a legendFormat of the dashboard names.
LABELS = {
    "pod": "subgraph-monitor-0",
    "topic": "edges",
    "query": "triangle",
    "sign": "+",
    "reason": "decode",
    "partition": "edges:1",
    "relation": "transfer",
    "shard": "2",
}
#: The size of a typical value per unit, so that the axes show the unit's scaled forms.
SCALE = {"bytes": 3e6, "Bps": 2e4, "ops": 1500.0, "s": 0.02, "percentunit": 0.3, "short": 40.0}


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def synthetic(dashboard: dict[str, Any], skip: Collection[int] = ()) -> dict[int, PanelEntry]:
    """A sine per series (two pods per target) over 10 minutes for every time-series panel, a
    value per target for a stat, a row for the table; none for the panels in ``skip``."""
    data: dict[int, PanelEntry] = {}
    times = [START + 5 * k for k in range(121)]
    for panel in dashboard["panels"]:
        if panel["type"] == "row" or panel["id"] in skip:
            continue
        unit = panel["fieldConfig"]["defaults"]["unit"]
        scale = SCALE.get(unit, 1.0)
        series = []
        for i, target in enumerate(panel["targets"]):
            for pod in range(2 if panel["type"] == "timeseries" else 1):
                labels = {**LABELS, "pod": f"subgraph-monitor-{pod}"}
                name = legend(target["legendFormat"], labels)
                if panel["type"] == "stat":
                    value = (START + 600) * 1000 if unit == "dateTimeAsIso" else scale * (i + 1)
                    series.append(Series(name, [START + 600], [value]))
                    continue
                phase = i + pod / 2
                values = [scale * (1.1 + math.sin(t / 60 + phase)) for t in times]
                series.append(Series(name, times, values))
        if panel["type"] == "table":
            pods = [f"subgraph-monitor-{p}" for p in range(3)]
            rows = [{"namespace": "prod", "pod": pod, "version": "0.1.0"} for pod in pods]
            data[panel["id"]] = [{**row, "Value": "1"} for row in rows]
        else:
            data[panel["id"]] = series
    return data


def png_size(path: Path) -> tuple[int, int]:
    """The width and height in a PNG's header (after asserting its signature)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    assert head[12:16] == b"IHDR", head
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def grid_height(dashboard: dict[str, Any]) -> int:
    """The dashboard's height in grid rows, from its own gridPos."""
    return max(int(p["gridPos"]["y"] + p["gridPos"]["h"]) for p in dashboard["panels"])


#: The Shards row's panels: empty, as on the embedded engine.
SHARD_PANELS = {46, 47, 48, 49}


def test_the_whole_dashboard_is_drawn_at_its_grid_size(tmp_path: Path) -> None:
    dashboard = load_dashboard()
    out = tmp_path / "dashboard.png"
    render(dashboard, synthetic(dashboard, skip=SHARD_PANELS), out, width_px=1800)
    assert grid_height(dashboard) == 91
    expected = (1800, HEADER_PX + grid_height(dashboard) * ROW_PX + GAP_PX)
    assert png_size(out) == expected == canvas_size(dashboard, 1800)


def test_some_rows_close_up(tmp_path: Path) -> None:
    dashboard = load_dashboard()
    out = tmp_path / "rows.png"
    rows = ["Overview", "Latency"]
    render(dashboard, synthetic(dashboard), out, width_px=900, only_rows=rows, title="Latency")
    # Overview: grid rows 0-4; Latency: its heading (22) and its panels (23-30)
    assert png_size(out) == (900, HEADER_PX + (5 + 9) * ROW_PX + GAP_PX)
    assert png_size(out)[1] < canvas_size(dashboard, 900)[1]


@pytest.mark.parametrize(
    ("value", "unit", "decimals", "text"),
    [
        (1536, "bytes", None, "1.5 KiB"),
        (3 * 1024**3, "bytes", None, "3 GiB"),
        (512, "bytes", None, "512 B"),
        (0.25, "percentunit", None, "25%"),
        (0.0123, "percentunit", None, "1.23%"),
        (0.0012, "s", None, "1.2 ms"),
        (0.0000025, "s", None, "2.5 µs"),
        (42, "s", None, "42 s"),
        (90, "s", None, "1.5 min"),
        (7200, "s", None, "2 hour"),
        (0, "s", None, "0 s"),
        (1500, "ops", None, "1.5 K ops/s"),
        (12.5, "ops", None, "12.5 ops/s"),
        (1500, "Bps", None, "1.5 kB/s"),
        (2_000_000, "short", None, "2 Mil"),
        (0.000123, "short", None, "0.000123"),
        (-1500, "short", None, "-1.5 K"),
        (1, "short", 0, "1"),
        (2.345, "short", 1, "2.3"),
        (0, "dateTimeAsIso", None, "1970-01-01 00:00:00"),
        (1_700_000_000_000, "dateTimeAsIso", None, "2023-11-14 22:13:20"),
        (3.0, "widgets", None, "3 widgets"),
        (3.0, "none", None, "3"),
        (math.nan, "s", None, "NaN"),
        (math.inf, "bytes", None, "+Inf"),
    ],
)
def test_values_are_formatted_in_the_panel_unit(
    value: float, unit: str, decimals: int | None, text: str
) -> None:
    assert format_value(value, unit, decimals) == text


def test_legend_puts_in_the_label_values() -> None:
    labels = {"pod": "sgm-0", "topic": "edges", "partition": "3"}
    assert legend("{{pod}}", labels) == "sgm-0"
    assert legend("{{ pod }} p99", labels) == "sgm-0 p99"
    assert legend("{{topic}}/{{partition}}", labels) == "edges/3"
    assert legend("dead letters", labels) == "dead letters"
    # Grafana shows the label's name for a label the series lacks
    assert legend("shard {{shard}}", labels) == "shard shard"
    assert legend("", {"__name__": "up", "pod": "a", "job": "b"}) == 'up{pod="a", job="b"}'
    assert legend("", {}) == "{}"


def test_a_panel_without_data_says_so(tmp_path: Path) -> None:
    dashboard = load_dashboard()
    panels = {p["id"]: p for p in dashboard["panels"]}
    timeseries, stat, table = panels[9], panels[2], panels[33]
    nan = Series("x", [START, START + 1], [math.nan, math.nan])
    for panel in (timeseries, stat):
        assert panel_message(panel, None) == NO_DATA == "No data"
        assert panel_message(panel, []) == "No data"
        assert panel_message(panel, [nan]) == "No data"
        assert panel_message(panel, [nan, Series("y", [START], [1.0])]) is None
    assert panel_message(table, []) == "No data"
    assert panel_message(table, [{"pod": "a", "Value": "1"}]) is None
    assert panel_message({"type": "text"}, None) == "(text panels are not drawn here)"
    out = tmp_path / "empty.png"
    render(dashboard, {9: [nan]}, out, width_px=600, only_rows=["Overview", "Throughput"])
    assert png_size(out) == canvas_size(dashboard, 600, ["Overview", "Throughput"])


# --- fetch, against a stub of Prometheus' HTTP API ---------------------------------------------

STUB_DASHBOARD: dict[str, Any] = {
    "title": "stub",
    "panels": [
        {"type": "row", "id": 1, "title": "Row", "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0}},
        {
            "type": "timeseries",
            "id": 2,
            "title": "Rate",
            "gridPos": {"h": 8, "w": 12, "x": 0, "y": 1},
            "fieldConfig": {"defaults": {"unit": "ops"}},
            "targets": [
                {
                    "refId": "A",
                    "expr": 'sum by (pod) (rate(x_total{pod=~"$pod"}[$__rate_interval]))',
                    "legendFormat": "{{pod}} rate",
                    "range": True,
                },
                {"refId": "B", "expr": "hidden", "hide": True},
            ],
        },
        {
            "type": "stat",
            "id": 3,
            "title": "Age",
            "gridPos": {"h": 8, "w": 6, "x": 12, "y": 1},
            "fieldConfig": {"defaults": {"unit": "s"}},
            "targets": [{"refId": "A", "expr": "time() - x", "instant": True, "range": False}],
        },
        {
            "type": "table",
            "id": 4,
            "title": "Info",
            "gridPos": {"h": 8, "w": 6, "x": 18, "y": 1},
            "targets": [{"refId": "A", "expr": 'info{r="$__range"}', "format": "table"}],
        },
    ],
}


def _matrix(query: str) -> dict[str, Any]:
    return {
        "resultType": "matrix",
        "result": [
            {"metric": {"pod": pod}, "values": [[START, "1"], [START + 1, "NaN"]]}
            for pod in ("p0", "p1")
        ],
    }


@pytest.fixture
def stub_prometheus() -> Iterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """A stub of Prometheus' query API: its URL and the requests it got (path, parameters)."""
    seen: list[tuple[str, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            params = dict(urllib.parse.parse_qsl(url.query))
            seen.append((url.path, params))
            query, status = params["query"], 200
            if "refuse" in query:
                answer: dict[str, Any] = {"status": "error", "errorType": "bad_data"}
                answer["error"] = "parse error"
                status = 400
            elif url.path.endswith("/query_range"):
                answer = {"status": "success", "data": _matrix(query)}
            elif query.startswith("time()"):
                answer = {"status": "success", "data": {"resultType": "scalar"}}
                answer["data"]["result"] = [START, "12.5"]
            else:
                metric = {"__name__": "info", "pod": "p0", "version": "1.0"}
                result = [{"metric": metric, "value": [START, "1"]}]
                answer = {"status": "success", "data": {"resultType": "vector", "result": result}}
            body = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_runs_each_panel_query_with_the_variables_filled_in(
    stub_prometheus: tuple[str, list[tuple[str, dict[str, str]]]], tmp_path: Path
) -> None:
    url, seen = stub_prometheus
    variables = {"pod": "p.*", "__rate_interval": "15s"}
    data = fetch(STUB_DASHBOARD, url, variables, START, START + 60, substitute=substitute_grafana)
    assert [(path, p["query"]) for path, p in seen] == [
        ("/api/v1/query_range", 'sum by (pod) (rate(x_total{pod=~"p.*"}[15s]))'),
        ("/api/v1/query", "time() - x"),
        ("/api/v1/query", 'info{r="60s"}'),
    ]
    assert seen[0][1] | {"query": ""} == {
        "query": "",
        "start": f"{START:.3f}",
        "end": f"{START + 60:.3f}",
        "step": "1",
    }
    assert seen[1][1]["time"] == f"{START + 60:.3f}"
    rate = data[2]
    assert [s.label for s in rate if isinstance(s, Series)] == ["p0 rate", "p1 rate"]
    assert isinstance(rate[0], Series) and rate[0].times == [START, START + 1]
    assert math.isnan(rate[0].values[1])
    assert data[3] == [Series("{}", [START], [12.5])]
    assert data[4] == [{"__name__": "info", "pod": "p0", "version": "1.0", "Value": "1.0"}]
    out = tmp_path / "stub.png"
    render(STUB_DASHBOARD, data, out, width_px=800)
    assert png_size(out) == (800, HEADER_PX + 9 * ROW_PX + GAP_PX)


def test_fetch_raises_on_a_refused_query(
    stub_prometheus: tuple[str, list[tuple[str, dict[str, str]]]],
) -> None:
    url, _ = stub_prometheus
    panel = {"type": "stat", "id": 1, "targets": [{"expr": "refuse(", "instant": True}]}
    with pytest.raises(RuntimeError, match="bad_data: parse error"):
        fetch({"panels": [panel]}, url, {}, START, START + 1, substitute=substitute_grafana)
