"""The operations HTTP server, over real HTTP on an ephemeral port."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message

import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.errors import ConfigError
from monitor.service.health import Health
from monitor.service.http import HealthServer
from monitor.service.metrics import METRIC_NAMES, Metrics


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def get(url: str, method: str = "GET") -> tuple[int, Message, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers, error.read()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def health(clock: Clock) -> Health:
    return Health(liveness_timeout_s=10.0, clock=clock)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(process_metrics=False)


@pytest.fixture
def server(metrics: Metrics, health: Health) -> Iterator[HealthServer]:
    with HealthServer(0, metrics, health, host="127.0.0.1") as running:
        yield running


def test_metrics_endpoint_serves_the_exposition(server: HealthServer, metrics: Metrics) -> None:
    metrics.consumed("edges", 3)
    metrics.deltas("triangle", 2, 0)
    metrics.epoch(0.01, 3)
    metrics.committed(1, 0.002, [0.1, 0.2, 0.3], time.time())
    status, headers, body = get(server.url + "/metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = body.decode()
    for name in METRIC_NAMES:
        assert f"# TYPE {name} " in text
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert values[("subgraph_monitor_updates_consumed_total", (("topic", "edges"),))] == 3
    assert values[("subgraph_monitor_end_to_end_latency_seconds_count", ())] == 3


def test_ready_gauge_follows_health_at_scrape(server: HealthServer, health: Health) -> None:
    def ready_gauge() -> float:
        text = get(server.url + "/metrics")[2].decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        return families["subgraph_monitor_ready"].samples[0].value

    assert ready_gauge() == 0
    health.set_assigned(True)
    health.set_recovered(True)
    health.set_broker_reachable(True)
    assert ready_gauge() == 1


def test_healthz_fails_without_beats_and_recovers_after_one(
    server: HealthServer, health: Health, clock: Clock
) -> None:
    assert get(server.url + "/healthz")[::2] == (200, b"ok\n")
    clock.now += 9.5
    assert get(server.url + "/healthz")[0] == 200
    clock.now += 3.0
    status, _, body = get(server.url + "/healthz")
    assert status == 503
    assert body.decode() == "stalled: no progress for 12.5 s (liveness timeout 10 s)\n"
    health.beat()
    assert get(server.url + "/healthz")[::2] == (200, b"ok\n")


def test_healthz_with_the_real_clock(metrics: Metrics) -> None:
    health = Health(liveness_timeout_s=0.2)
    with HealthServer(0, metrics, health, host="127.0.0.1") as server:
        assert get(server.url + "/healthz")[0] == 200
        time.sleep(0.4)
        assert get(server.url + "/healthz")[0] == 503
        health.beat()
        assert get(server.url + "/healthz")[0] == 200


def test_readyz_lists_what_is_missing(server: HealthServer, health: Health) -> None:
    status, headers, body = get(server.url + "/readyz")
    assert status == 503
    assert headers["Content-Type"] == "application/json"
    document = json.loads(body)
    assert document["ready"] is False
    assert document["missing"] == ["partitions_assigned", "state_recovered", "broker_reachable"]

    health.set_assigned(True)
    health.set_broker_reachable(True)
    status, _, body = get(server.url + "/readyz")
    assert (status, json.loads(body)["missing"]) == (503, ["state_recovered"])

    health.set_recovered(True)
    status, _, body = get(server.url + "/readyz")
    assert status == 200
    assert json.loads(body) == {
        "ready": True,
        "partitions_assigned": True,
        "state_recovered": True,
        "broker_reachable": True,
        "schema_registry_reachable": True,
    }

    health.set_broker_reachable(False)
    status, _, body = get(server.url + "/readyz")
    assert (status, json.loads(body)["missing"]) == (503, ["broker_reachable"])


def test_unknown_paths_are_404_and_head_has_no_body(server: HealthServer) -> None:
    status, _, body = get(server.url + "/nope")
    assert status == 404
    assert b"/metrics" in body
    assert get(server.url + "/metrics?x=1")[0] == 200
    status, headers, body = get(server.url + "/healthz", method="HEAD")
    assert (status, body) == (200, b"")
    assert headers["Content-Length"] == "3"


def test_requests_are_not_logged_on_stderr(
    server: HealthServer, capfd: pytest.CaptureFixture[str]
) -> None:
    for path in ("/metrics", "/healthz", "/readyz", "/nope"):
        get(server.url + path)
    assert capfd.readouterr().err == ""


def test_a_port_in_use_is_a_config_error(server: HealthServer, metrics: Metrics) -> None:
    other = HealthServer(server.port, metrics, Health(), host="127.0.0.1")
    with pytest.raises(ConfigError, match=f"127.0.0.1:{server.port}.*SGM_HTTP_PORT"):
        other.start()


def test_stop_releases_the_port(metrics: Metrics, health: Health) -> None:
    first = HealthServer(0, metrics, health, host="127.0.0.1").start()
    port = first.port
    assert port != 0
    first.stop()
    first.stop()
    with HealthServer(port, metrics, health, host="127.0.0.1") as second:
        assert get(second.url + "/healthz")[0] == 200


def test_health_rejects_a_nonpositive_timeout() -> None:
    with pytest.raises(ValueError, match="liveness timeout"):
        Health(liveness_timeout_s=0)
