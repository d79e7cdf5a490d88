"""The Grafana dashboard of the Helm chart: well formed, and every query works on live data.

Static: the JSON parses, every panel has an id (unique), a position and queries, every query
filters by the ``namespace`` and ``pod`` variables and reads only metrics the service exports.

Live: ``subgraph-monitor serve`` runs against the real broker on a 3-partition topic fed in
waves (edges; timed events of a windowed query, so that the watermark advances and events
expire; late and untimed events and some garbage, so that there are dead letters), scraped
every second by a real Prometheus that adds ``namespace`` and ``pod`` as the ServiceMonitor
does. Every panel query, with the Grafana variables filled in, must be accepted and return a
series with a value, as an instant query and (time-series panels) as a range query over the
scraped window; every legend label must be on the series; the template variables'
``label_values`` must resolve. The alert rules of the chart's PrometheusRule (rendered by helm)
go through the same Prometheus: each expression must be accepted, and every metric it reads
must have series from the service.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from monitor.service.metrics import METRIC_NAMES, Metrics
from scripts import deploy_tools
from scripts.dashboard_data import fetch, panel_message
from scripts.dashboard_render import render
from tests.kafka.test_serve import GARBAGE, QUERIES, Service, edge_key, stream_records
from tests.kafka_broker import KafkaCluster
from tests.prometheus_server import (
    PrometheusServer,
    evaluate_exprs,
    evaluate_range,
    free_port,
    metric_names,
    query_series,
    run_prometheus,
    substitute_grafana,
)

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
#: Where the dashboard drawn from the live run is kept with the test's output.
SCREENSHOTS = ROOT / "test-output" / "screenshots"
CHART = ROOT / "helm" / "subgraph-monitor"
DASHBOARD = CHART / "dashboards" / "subgraph-monitor.json"
LABELS = {"namespace": "test", "pod": "subgraph-monitor-0"}
#: The Grafana variables of the panel queries, for the live check.
RATE_INTERVAL = "15s"
#: Seconds of scraped data (1 s scrape interval) before the queries run.
SCRAPED_SECONDS = 20


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those inside collapsed rows."""
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def query_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in all_panels(dashboard) if p["type"] != "row"]


def targets(dashboard: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(panel, target)`` of every query of the dashboard."""
    return [(p, t) for p in query_panels(dashboard) for t in p["targets"]]


def exported_names() -> set[str]:
    """Metric names a PromQL query may select on the service's /metrics: the families of
    METRIC_NAMES (histograms with their ``_bucket``, ``_sum``, ``_count``), and the samples of
    the process and platform collectors as :meth:`Metrics.render` produces them."""
    families = list(text_string_to_metric_families(Metrics().render().decode()))
    histograms = {f.name for f in families if f.type == "histogram"}
    names = set(METRIC_NAMES)
    for name in METRIC_NAMES:
        if name in histograms:
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    for family in families:
        for sample in family.samples:
            if sample.name.startswith(("process_", "python_")):
                names.add(sample.name)
    return names


def legend_labels(target: dict[str, Any]) -> set[str]:
    return set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))


def variable_queries(dashboard: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(variable, label, match selector)`` of every ``label_values`` template variable."""
    out = []
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        found = re.fullmatch(r"\s*label_values\((.+),\s*(\w+)\s*\)\s*", query)
        assert found, f"variable {var['name']}: not a label_values query: {query!r}"
        out.append((var["name"], found.group(2), found.group(1)))
    return out


# --- static ----------------------------------------------------------------------------------


def test_the_dashboard_is_well_formed() -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    panels = all_panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(ids)}"
    rows = [p["title"] for p in panels if p["type"] == "row"]
    assert rows == [
        "Overview",
        "Throughput",
        "Latency",
        "Kafka",
        "Index and memory",
        "Events",
        "Event time",
        "Shards (engine: distributed)",
        "Health",
    ]
    for panel in panels:
        grid = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= grid.keys(), panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["pod"]["multi"] and variables["pod"]["includeAll"]
    for panel in query_panels(dashboard):
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']!r}: no unit"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), f"panel {panel['title']!r}: empty expr"
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_query_reads_exported_metrics_of_the_selected_pods() -> None:
    exported = exported_names()
    selector = re.compile(r'\{[^}]*namespace=~"\$namespace"[^}]*pod=~"\$pod"[^}]*\}')
    problems = []
    for panel, target in targets(load_dashboard()):
        expr = target["expr"]
        names = metric_names(expr)
        if not names:
            problems.append(f"{panel['title']}: reads no metric: {expr}")
        for name in sorted(names - exported):
            problems.append(f"{panel['title']}: {name} is not exported by the service")
        for name in names:
            for found in re.finditer(rf"\b{name}\b(\{{[^}}]*\}})?", expr):
                if not found.group(1) or not selector.fullmatch(found.group(1)):
                    problems.append(f"{panel['title']}: {name} not filtered by $namespace/$pod")
        if "rate(" in expr and "[$__rate_interval]" not in expr:
            problems.append(f"{panel['title']}: a rate without $__rate_interval: {expr}")
    assert not problems, "\n".join(problems)


def alert_rules(selector: str = "") -> dict[str, str]:
    """The chart's alert rules, ``{alert: expr}``, rendered by helm (``prometheusRule`` on)."""
    args = ["--set", "prometheusRule.enabled=true"]
    if selector:
        args += ["--set-string", f"prometheusRule.selector={selector}"]
    out = subprocess.run(
        [
            str(deploy_tools.helm()),
            "template",
            "sgm",
            str(CHART),
            "--kube-version",
            "1.31.0",
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (rule,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "PrometheusRule"]
    return {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}


def test_every_alert_reads_exported_metrics() -> None:
    exported = exported_names()
    rules = alert_rules()
    assert len(rules) >= 5
    problems = [
        f"{name}: {metric} is not exported by the service"
        for name, expr in rules.items()
        for metric in sorted(metric_names(expr) - exported)
    ]
    assert not problems, "\n".join(problems)


def test_metric_names_parses_promql() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (pod, le) (rate(a_bucket{pod=~"$pod", x="b_c"}[5m])))'
        " / on (pod) group_left (version) max without (instance) (b_info offset 1h) or vector(0)"
    )
    assert metric_names(expr) == {"a_bucket", "b_info"}
    assert metric_names("time() - (max by (pod) (ts_seconds) > 0)") == {"ts_seconds"}
    with pytest.raises(ValueError, match="not a PromQL function"):
        metric_names("rat(x[1m])")


# --- live ------------------------------------------------------------------------------------

#: A windowed event query beside the tuple queries, so that the Events and Event time rows have
#: data: transfer events live 3 s after their ts (the query's span), so they expire during the
#: test.
EVENT_QUERY = (
    "relay(a, b, c) := transfer(a, b) as t1, transfer(b, c) as t2, t1.amount >= 10,"
    " t1.ts <= t2.ts, within 3s.\n"
    # (a cycle in a window: it keeps its live matches, the series of live_matches)
    "back(a, b) := transfer(a, b) as t1, transfer(b, a) as t2, within 3s.\n"
)
#: The watermark stays this far behind the latest event time (the service's SGM_ALLOWED_LATENESS).
ALLOWED_LATENESS = "1s"


def _produce_waves(
    bootstrap: str, topic: str, stop: threading.Event, produced: list[int]
) -> threading.Thread:
    """Produce edge records, a few transfer events timed now (and one an hour old: late once
    the watermark is known, one without a time, one with a field of the wrong type, one delete
    without an id) and two garbage records per wave, in waves until ``stop``."""
    records = stream_records(12_000, seed=21)
    rng = np.random.default_rng(22)
    small_garbage = [g for g in GARBAGE if len(g) < 1000]

    def run() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for lo in range(0, len(records), 150):
            if stop.is_set():
                break
            for record in records[lo : lo + 150]:
                producer.produce(topic, value=json.dumps(record).encode(), key=edge_key(record))
            for i in rng.integers(0, len(small_garbage), 2):
                producer.produce(topic, value=small_garbage[int(i)])
            now = int(time.time() * 1000)
            events = [
                {"relation": "transfer", "id": f"tx-{lo}-{k}", "src": k, "dst": k + 1, "ts": now}
                | {"amount": float(rng.lognormal(3, 1)), "channel": "wire"}
                for k in range(5)
            ]
            tx = {"relation": "transfer", "src": 1, "dst": 2, "amount": 50.0}
            events += [
                tx | {"id": f"tx-{lo}-late", "ts": now - 3_600_000},
                tx | {"id": f"tx-{lo}-untimed"},
                tx | {"id": f"tx-{lo}-bad", "ts": now, "amount": "x"},
                {"op": "delete", "relation": "transfer"},
            ]
            for event in events:
                # Keyed by source: every partition that gets an old event also gets current
                # ones, so none holds the watermark an hour back.
                key = f"transfer:{event.get('src')}".encode()
                producer.produce(topic, value=json.dumps(event).encode(), key=key)
            producer.flush(30)
            produced[0] += min(150, len(records) - lo) + 2 + len(events)
            stop.wait(0.6)
        producer.flush(30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _wait_ready(port: int, svc: Service, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert svc.proc is not None and svc.proc.poll() is None, svc.log_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError("the service did not become ready:\n" + svc.log_text()[-3000:])


#: The engines the live check runs (the shard panels have data only with ``distributed``).
ENGINES = {
    "embedded": {},
    "distributed": {"SGM_ENGINE": "distributed", "SGM_WORKERS": "2", "SGM_SHARDS": "3"},
}


def _shard_panel(panel: dict[str, Any]) -> bool:
    return any(shard_query(t["expr"]) for t in panel.get("targets", []))


def kept_query(expr: str) -> bool:
    """Whether a query reads the live matches kept, which the partitioned engine keeps none of."""
    return "subgraph_monitor_live_matches" in expr


def shard_query(expr: str) -> bool:
    """Whether a query reads the partitioned engine's families (the Shards row)."""
    return any(
        f"subgraph_monitor_{name}" in expr
        for name in ("shard", "shards", "exchange_", "engine_reloads")
    )


@pytest.fixture(params=sorted(ENGINES))
def served(
    kafka: KafkaCluster,
    make_topic: Callable[..., str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[tuple[Service, int]]:
    """A running ``serve`` on a 3-partition topic with its HTTP port, on each engine; killed at
    the end if a test did not stop it."""
    if request.param == "distributed":
        pytest.importorskip("ray", reason="the partitioned engine needs Ray")
    port = free_port()
    svc = Service(
        kafka,
        make_topic,
        tmp_path / "svc",
        3,
        **ENGINES[request.param],
        SGM_HTTP_PORT=str(port),
        SGM_BATCH_SIZE="50",
        SGM_MAX_BATCH_DELAY_MS="200",
        SGM_ALLOWED_LATENESS=ALLOWED_LATENESS,
    )
    (svc.tmp / "queries.q").write_text(QUERIES + EVENT_QUERY)
    svc.start()
    try:
        yield svc, port
    finally:
        svc._stopping = True
        if svc.proc is not None and svc.proc.poll() is None:
            svc.proc.kill()
            svc.proc.wait(timeout=30)


@pytest.fixture
def prometheus(served: tuple[Service, int], tmp_path: Path) -> Iterator[PrometheusServer]:
    """Prometheus scraping the served instance every second, with namespace and pod labels."""
    _, port = served
    with run_prometheus([f"127.0.0.1:{port}"], LABELS, tmp_path / "prometheus") as server:
        yield server


def test_every_dashboard_query_returns_data_from_a_live_service(
    served: tuple[Service, int], prometheus: PrometheusServer
) -> None:
    svc, port = served
    dashboard = load_dashboard()
    stop = threading.Event()
    produced = [0]
    producing = _produce_waves(svc.bootstrap, svc.input, stop, produced)
    try:
        _wait_ready(port, svc)
        started = time.time()
        # index_edges is set at the first commit; every series the service sets exists by then.
        sel = ",".join(f'{k}="{v}"' for k, v in LABELS.items())
        prometheus.wait_for_samples(f"subgraph_monitor_index_edges{{{sel}}}", SCRAPED_SECONDS)
        prometheus.wait_for_samples(f"subgraph_monitor_dead_letters_total{{{sel}}}", 5)
        # The watermark exists once timed events flowed; expired events once it passed them.
        prometheus.wait_for_samples(f"subgraph_monitor_watermark_seconds{{{sel}}}", 5)
        prometheus.wait_for_samples(f"subgraph_monitor_events_expired_total{{{sel}}}", 5)
        distributed = "SGM_ENGINE" in svc.env
        if distributed:
            prometheus.wait_for_samples(f"subgraph_monitor_shard_work_total{{{sel}}}", 5)
        end = time.time()
        window = f"{int(end - started)}s"
        variables = {
            **LABELS,
            "__rate_interval": RATE_INTERVAL,
            "__interval": "1s",
            "__range": window,
            "__range_s": str(int(end - started)),
        }
        instant: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        ranged: list[str] = []
        for panel, target in targets(dashboard):
            expr = substitute_grafana(target["expr"], variables)
            instant.setdefault(expr, []).append((panel["title"], target))
            if target.get("range", not target.get("instant", False)):
                ranged.append(expr)

        failures = []
        # The Shards row has data on the partitioned engine only, the live matches on the
        # single process's only; elsewhere they must be valid.
        optional = {
            e
            for e in instant
            if (shard_query(e) and not distributed) or (kept_query(e) and distributed)
        }
        for expr, error in evaluate_exprs(prometheus.url, optional, require_data=False).items():
            if error is not None:
                failures.append(f"instant {expr}\n    -> {error}")
        ranged = [e for e in ranged if e not in optional]
        for expr in optional:
            del instant[expr]
        for expr, error in evaluate_exprs(prometheus.url, set(instant)).items():
            if error is not None:
                titles = ", ".join(t for t, _ in instant[expr])
                failures.append(f"instant [{titles}] {expr}\n    -> {error}")
        for expr, error in evaluate_range(prometheus.url, ranged, started, end).items():
            if error is not None:
                failures.append(f"range {expr}\n    -> {error}")
        rules = alert_rules('namespace="test"')
        accepted = evaluate_exprs(prometheus.url, set(rules.values()), require_data=False)
        for name, expr in rules.items():
            if accepted[expr] is not None:
                failures.append(f"alert {name}: {expr}\n    -> {accepted[expr]}")
            selectors = {f'{m}{{namespace="test"}}' for m in metric_names(expr)}
            needed = distributed or not shard_query(expr)
            checked = evaluate_exprs(prometheus.url, selectors, require_data=needed)
            for selector, error in checked.items():
                if error is not None:
                    failures.append(f"alert {name} reads {selector}: {error}")
        for expr, uses in instant.items():
            series = query_series(prometheus.url, expr)
            for title, target in uses:
                for label in sorted(legend_labels(target)):
                    if series and not all(label in s for s in series):
                        failures.append(f"{title}: legend label {label!r} not on {series}")
        # The event time is kept per input partition (topic:partition), here 3 of them.
        lags = query_series(prometheus.url, f"subgraph_monitor_event_time_lag_seconds{{{sel}}}")
        partitions = {s.get("partition", "") for s in lags}
        if not partitions or not all(p.startswith(f"{svc.input}:") for p in partitions):
            failures.append(f"event-time lag: partitions {sorted(partitions)}, not the input's")
        for name, label, match in variable_queries(dashboard):
            found = prometheus.api(
                f"label/{label}/values", **{"match[]": substitute_grafana(match, variables)}
            )
            if found.get("status") != "success" or LABELS[label] not in found["data"]:
                failures.append(f"variable {name}: label_values({match}, {label}) -> {found}")
        # Drawn as the docs show it (Grafana cannot run here): every panel but the Shards row
        # off the partitioned engine, and the live matches on it, has data to draw.
        drawn = fetch(
            dashboard, prometheus.url, variables, started, end, substitute=substitute_grafana
        )
        for panel in dashboard["panels"]:
            if panel["type"] == "row" or (not distributed and _shard_panel(panel)):
                continue
            if distributed and any(kept_query(t["expr"]) for t in panel.get("targets", [])):
                continue
            if panel_message(panel, drawn.get(panel["id"])) is not None:
                failures.append(f"{panel['title']}: drawn with no data")
        engine = "distributed" if distributed else "embedded"
        picture = SCREENSHOTS / f"dashboard-{engine}.png"
        render(dashboard, drawn, picture, title=f"subgraph-monitor ({engine} engine, live)")
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert not failures, (
            f"{len(failures)} dashboard queries failed on live data "
            f"({produced[0]} records produced):\n" + "\n".join(failures)
        )
    finally:
        stop.set()
        producing.join(timeout=60)
    assert svc.stop() == 0, svc.log_text()[-3000:]
