"""Windows through ``serve`` against a real broker: the watermark is the minimum over the input
partitions, expiry retracts with ``"cause": "expired"``, a late event is a dead letter with
reason ``late``, and the event-time metrics say so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from tests.kafka.test_serve import Service, read_topic, settled_metrics, wait_consumed

pytestmark = pytest.mark.kafka

RING = (
    "ring(a, b, c) := transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, a) as t3,\n"
    "    t1.ts < t2.ts, t2.ts < t3.ts, within 10m, distinct.\n"
)
MIN = 60_000


def send(svc: Service, partition: int, *events: tuple[str, str, str, int]) -> None:
    producer = Producer({"bootstrap.servers": svc.bootstrap})
    for key, src, dst, ts in events:
        record = {"relation": "transfer", "id": key, "src": src, "dst": dst, "ts": ts}
        producer.produce(svc.input, json.dumps(record).encode(), key.encode(), partition)
    assert producer.flush(30) == 0


def wait_rows(svc: Service, n: int, timeout: float = 60) -> list[dict[str, object]]:
    """The output once it holds ``n`` records (or what it holds after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = [json.loads(v) for _, v, _ in read_topic(svc.bootstrap, svc.output, idle=1.0)]
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def scrape(svc: Service) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in settled_metrics(svc).splitlines()
        if line.startswith("subgraph_monitor_") and not line.startswith("#")
    }


def test_the_slowest_partition_holds_the_window_and_late_events_are_dead_letters(
    service: Callable[..., Service],
) -> None:
    svc = service(partitions=2, SGM_UNDIRECTED="false", SGM_ALLOWED_LATENESS="5s")
    (svc.tmp / "queries.q").write_text(RING)
    send(svc, 0, ("t1", "A", "B", 0), ("t2", "B", "C", MIN), ("t3", "C", "A", 2 * MIN))
    send(svc, 0, ("x1", "X", "Y", 30 * MIN), ("x2", "X", "Y", 31 * MIN))
    send(svc, 1, ("p1", "P", "Q", MIN), ("p2", "P", "Q", MIN))
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    rows = [json.loads(v) for _, v, _ in read_topic(svc.bootstrap, svc.output)]
    # partition 1 is at 1m: the watermark is 55s, the ring (0..2m, 10m window) stays
    assert [r["diff"] for r in rows] == [1], rows
    metrics = scrape(svc)
    assert metrics["subgraph_monitor_watermark_seconds"] == 55.0, metrics
    part = f'subgraph_monitor_partition_watermark_seconds{{partition="{svc.input}:0"}}'
    assert metrics[part] == 30 * 60 - 5.0, metrics  # the 2nd largest time of partition 0

    send(svc, 1, ("p3", "P", "Q", 30 * MIN), ("p4", "P", "Q", 31 * MIN))
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    # no more input: the service runs an epoch of its own for the expiries now due
    rows = wait_rows(svc, 2)
    assert [(r["diff"], r.get("cause")) for r in rows] == [(1, None), (-1, "expired")], rows
    send(svc, 0, ("old", "C", "A", 3 * MIN))  # 3m + 10m is behind the watermark 29m55s
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    metrics = scrape(svc)
    assert svc.stop() == 0, svc.log_text()

    rows = [json.loads(v) for _, v, _ in read_topic(svc.bootstrap, svc.output)]
    assert [(r["diff"], r.get("cause")) for r in rows] == [(1, None), (-1, "expired")], rows
    assert rows[0]["match_id"] == rows[1]["match_id"]
    dead = read_topic(svc.bootstrap, svc.dead)
    assert len(dead) == 1, dead
    value, headers = dead[0][1], dead[0][2]
    assert json.loads(value)["id"] == "old"
    assert b"older than the window" in headers["reason"]
    assert metrics["subgraph_monitor_watermark_seconds"] == 30 * 60 - 5.0, metrics
    assert metrics['subgraph_monitor_events_late_total{relation="transfer"}'] == 1
    assert metrics['subgraph_monitor_events_expired_total{relation="transfer"}'] == 5  # t1-3, p1-2
    assert metrics['subgraph_monitor_dead_letters_total{reason="late"}'] == 1
    lag = f'subgraph_monitor_event_time_lag_seconds{{partition="{svc.input}:1"}}'
    assert metrics[lag] > 1e9  # 1970 event times: decades of lag
