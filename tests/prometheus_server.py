"""A real Prometheus for tests: scrape a port, then evaluate PromQL through the HTTP API.

``run_prometheus(targets, labels, workdir)`` starts ``prometheus`` (the Debian package's
``/usr/bin/prometheus``, found on ``PATH``) on a free port with a temporary config and TSDB, and
stops it on exit. :func:`evaluate_exprs` and :func:`evaluate_range` run expressions and return,
per expression, ``None`` when Prometheus accepted it and returned data, else the reason
(Prometheus' own error for a rejected expression). :func:`substitute_grafana` replaces the
Grafana variables of dashboard queries with concrete values; :func:`metric_names` lists the
metric names an expression reads.

The alert rules of the Helm chart can be checked with the same functions: their expressions
normally return nothing (no alert fires), so pass ``require_data=False`` there.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scripts import deploy_tools


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_binary() -> str:
    """The ``prometheus`` executable, installed with apt-get when missing (as the chart tests'
    promtool is, whichever test runs first); fails the test (never skips) when there is none."""
    try:
        return str(deploy_tools.prometheus())
    except deploy_tools.DeployToolsError as exc:
        pytest.fail(f"no `prometheus` binary: {exc}", pytrace=False)


def _get_json(url: str, timeout: float = 30) -> dict[str, Any]:
    """GET ``url`` and decode the JSON body, also of an error status (Prometheus sends its
    error message as JSON with 400 and 422)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
    decoded: dict[str, Any] = json.loads(body)
    return decoded


@dataclass
class PrometheusServer:
    """A running Prometheus: its base URL, process and log file."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str | list[str]) -> dict[str, Any]:
        """GET ``/api/v1/<path>`` with ``params`` (a list value repeats the parameter)."""
        query = urllib.parse.urlencode(params, doseq=True)
        return _get_json(f"{self.url}/api/v1/{path}?{query}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_samples(
        self, selector: str, samples: int, timeout: float = 120, window: str = "10m"
    ) -> None:
        """Wait until ``selector`` has at least ``samples`` samples in the last ``window``."""
        expr = f"min(count_over_time({selector}[{window}]))"
        deadline = time.monotonic() + timeout
        got = 0.0
        while time.monotonic() < deadline:
            result = self.api("query", query=expr)
            if result.get("status") == "success" and result["data"]["result"]:
                got = float(result["data"]["result"][0]["value"][1])
                if got >= samples:
                    return
            time.sleep(0.5)
        raise AssertionError(
            f"Prometheus has {got:g} < {samples} samples of {selector} after {timeout}s; "
            f"targets: {self.api('targets')}\n{self.log_text()[-3000:]}"
        )


@contextlib.contextmanager
def run_prometheus(
    targets: Iterable[str],
    labels: Mapping[str, str],
    workdir: Path,
    *,
    scrape_interval: str = "1s",
    job: str = "subgraph-monitor",
    metrics_path: str = "/metrics",
) -> Iterator[PrometheusServer]:
    """Run Prometheus scraping ``targets`` (``host:port``) with static ``labels`` on every
    series (as the ServiceMonitor's relabelling adds ``namespace`` and ``pod``); yields once
    it is ready, and terminates it (then kills it) on exit."""
    binary = prometheus_binary()
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": metrics_path,
                "scrape_interval": scrape_interval,
                "scrape_timeout": scrape_interval,
                "static_configs": [{"targets": list(targets), "labels": dict(labels)}],
            }
        ],
    }
    config_file = workdir / "prometheus.yml"
    config_file.write_text(json.dumps(config, indent=2))  # JSON is YAML
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    server = PrometheusServer(f"http://127.0.0.1:{port}", proc, log)
    try:
        _wait_ready(server)
        yield server
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def _wait_ready(server: PrometheusServer, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise AssertionError(
                f"prometheus exited with {server.proc.returncode}:\n{server.log_text()}"
            )
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"prometheus not ready after {timeout}s:\n{server.log_text()}")


def _has_value(values: Iterable[str]) -> bool:
    return any(not math.isnan(float(v)) for v in values)


def _problem(result: Mapping[str, Any], require_data: bool) -> str | None:
    """Why a query API answer does not count as accepted with data, or ``None``."""
    if result.get("status") != "success":
        return f"{result.get('errorType', 'error')}: {result.get('error', result)}"
    data = result["data"]
    if not require_data:
        return None
    kind, rows = data["resultType"], data["result"]
    if kind == "scalar":
        return None if _has_value([rows[1]]) else "the scalar is NaN"
    if not rows:
        return "accepted, but the result is empty"
    if kind == "vector":
        values = [row["value"][1] for row in rows]
    else:  # matrix
        values = [v for row in rows for _, v in row["values"]]
    if not _has_value(values):
        return f"accepted, but every value of the {len(rows)} series is NaN"
    return None


def evaluate_exprs(
    prom_url: str,
    exprs: Iterable[str],
    *,
    at: float | None = None,
    require_data: bool = True,
) -> dict[str, str | None]:
    """Run each expression as an instant query (at ``at``, default now) on ``prom_url``.

    Per expression: ``None`` when Prometheus accepted it and (with ``require_data``) returned
    at least one series with a value that is not NaN; otherwise the reason, with Prometheus'
    error message for an expression it refused.
    """
    out: dict[str, str | None] = {}
    for expr in exprs:
        params = {"query": expr, "time": f"{time.time() if at is None else at:.3f}"}
        result = _get_json(f"{prom_url}/api/v1/query?{urllib.parse.urlencode(params)}")
        out[expr] = _problem(result, require_data)
    return out


def evaluate_range(
    prom_url: str,
    exprs: Iterable[str],
    start: float,
    end: float,
    step: str = "1s",
    *,
    require_data: bool = True,
) -> dict[str, str | None]:
    """:func:`evaluate_exprs`, as range queries over ``[start, end]`` (``/api/v1/query_range``)."""
    out: dict[str, str | None] = {}
    for expr in exprs:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step}
        result = _get_json(f"{prom_url}/api/v1/query_range?{urllib.parse.urlencode(params)}")
        out[expr] = _problem(result, require_data)
    return out


def query_series(prom_url: str, expr: str) -> list[dict[str, str]]:
    """The label sets of an instant query's series (empty on any error)."""
    result = _get_json(f"{prom_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    if result.get("status") != "success" or result["data"]["resultType"] != "vector":
        return []
    return [dict(row["metric"]) for row in result["data"]["result"]]


def substitute_grafana(expr: str, variables: Mapping[str, str]) -> str:
    """Replace Grafana variables (``$name``, ``${name}``, ``[[name]]``) by ``variables``;
    a variable left over is an error."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name not in variables:
            raise KeyError(f"no value for Grafana variable {name!r} in {expr!r}")
        return variables[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", value, expr)


#: PromQL functions and aggregation operators (Prometheus 2.42).
PROMQL_FUNCTIONS = frozenset(
    [
        "abs",
        "absent",
        "absent_over_time",
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atan",
        "atanh",
        "avg_over_time",
        "ceil",
        "changes",
        "clamp",
        "clamp_max",
        "clamp_min",
        "cos",
        "cosh",
        "count_over_time",
        "days_in_month",
        "day_of_month",
        "day_of_week",
        "day_of_year",
        "deg",
        "delta",
        "deriv",
        "exp",
        "floor",
        "histogram_count",
        "histogram_fraction",
        "histogram_quantile",
        "histogram_sum",
        "holt_winters",
        "hour",
        "idelta",
        "increase",
        "irate",
        "label_join",
        "label_replace",
        "last_over_time",
        "ln",
        "log10",
        "log2",
        "max_over_time",
        "min_over_time",
        "minute",
        "month",
        "pi",
        "predict_linear",
        "present_over_time",
        "quantile_over_time",
        "rad",
        "rate",
        "resets",
        "round",
        "scalar",
        "sgn",
        "sin",
        "sinh",
        "sort",
        "sort_desc",
        "sqrt",
        "stddev_over_time",
        "stdvar_over_time",
        "sum_over_time",
        "tan",
        "tanh",
        "time",
        "timestamp",
        "vector",
        "year",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    ]
)
#: Keywords that are not metric names.
PROMQL_KEYWORDS = frozenset(
    [
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
        "inf",
        "nan",
    ]
)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MODIFIER_LISTS = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.IGNORECASE
)
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects.

    String literals, label matchers (``{...}``), range and subquery durations (``[...]``),
    grouping lists (``by (...)``, ``on (...)``, ...), numbers, functions (an identifier before
    ``(``) and keywords are not metric names. Raises ``ValueError`` on an identifier before
    ``(`` that is no PromQL function (a typo Prometheus would reject too).
    """
    text = _STRINGS.sub('""', expr)
    text = re.sub(r"\boffset\s+-?[0-9a-z]+", " ", text)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _MODIFIER_LISTS.sub(" ", text)
    text = re.sub(r"(?<![A-Za-z_:])\d+(?:\.\d+)?(?:e[+-]?\d+)?", " ", text)
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        word = match.group(0)
        if re.match(r"\s*\(", text[match.end() :]):
            if word.lower() not in PROMQL_FUNCTIONS:
                raise ValueError(f"{word!r} is not a PromQL function in {expr!r}")
            continue
        if word.lower() in PROMQL_KEYWORDS or word.lower() in PROMQL_FUNCTIONS:
            continue
        names.add(word)
    return names
