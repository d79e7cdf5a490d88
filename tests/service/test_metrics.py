"""Metrics: every family exported and parseable, bulk histograms equal to prometheus_client's,
consumer lag read from a librdkafka statistics document."""

from __future__ import annotations

import json
import time
from collections import Counter
from importlib.metadata import version
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from connectors.kafka_records import DEAD_LETTER_CATEGORIES
from monitor.service.metrics import LATENCY_BUCKETS, METRIC_NAMES, BulkHistogram, Metrics


def samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the rendered text, by name and labels."""
    text = metrics.render().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return samples(metrics)[(name, frozenset(labels.items()))]


def exercise(metrics: Metrics) -> None:
    """Call every method the loop calls, once or twice."""
    metrics.consumed("edges", 10)
    metrics.consumed("edges", 5)
    metrics.consumed("transfers", 2)
    metrics.ignored(Counter({"present": 3, "absent": 1}))
    metrics.dead_letter("not json")
    metrics.dead_letter("not json")
    metrics.dead_letter("missing field src")
    metrics.deltas("triangle", 4, 1)
    metrics.deltas("cycle3", 0, 2)
    metrics.epoch(0.02, 17)
    metrics.committed(7, 0.004, np.array([0.05, 0.2, 1.5]), 1_700_000_000.5)
    metrics.aborted()
    metrics.output_waited(0.25)
    metrics.rebalanced()
    metrics.rebalanced()
    metrics.index({"e": 120, "transfer": 30}, 4096)
    metrics.kept({"ring{3}": 7, "ring{4}": 2})
    metrics.kept({"ring{3}": 5})
    metrics.set_ready(True)
    metrics.observe_librdkafka_stats(json.dumps(consumer_stats({("edges", 0): 12})))


def test_every_family_is_exported_and_parses() -> None:
    metrics = Metrics()
    exercise(metrics)
    text = metrics.render().decode()
    for name in METRIC_NAMES:
        assert f"# TYPE {name} " in text, name
    families = {f.name for f in text_string_to_metric_families(text)}
    for name in METRIC_NAMES:
        assert name.removesuffix("_total") in families, name
    assert "_created" not in text
    assert "process_cpu_seconds_total" in text


def test_values_follow_the_calls() -> None:
    metrics = Metrics()
    exercise(metrics)
    ns = "subgraph_monitor_"
    assert value(metrics, ns + "updates_consumed_total", topic="edges") == 15
    assert value(metrics, ns + "updates_consumed_total", topic="transfers") == 2
    assert value(metrics, ns + "updates_ignored_total", reason="present") == 3
    assert value(metrics, ns + "dead_letters_total", reason="not json") == 2
    assert value(metrics, ns + "match_deltas_total", query="triangle", sign="plus") == 4
    assert value(metrics, ns + "match_deltas_total", query="triangle", sign="minus") == 1
    assert value(metrics, ns + "match_deltas_total", query="cycle3", sign="plus") == 0
    assert value(metrics, ns + "epoch_duration_seconds_count") == 1
    assert value(metrics, ns + "epoch_updates_sum") == 17
    assert value(metrics, ns + "commit_duration_seconds_sum") == pytest.approx(0.004)
    assert value(metrics, ns + "end_to_end_latency_seconds_count") == 3
    assert value(metrics, ns + "end_to_end_latency_seconds_sum") == pytest.approx(1.75)
    assert value(metrics, ns + "end_to_end_latency_seconds_bucket", le="0.1") == 1
    assert value(metrics, ns + "end_to_end_latency_seconds_bucket", le="+Inf") == 3
    assert value(metrics, ns + "rebalances_total") == 2
    assert value(metrics, ns + "transactions_aborted_total") == 1
    assert value(metrics, ns + "output_waits_seconds_total") == 0.25
    assert value(metrics, ns + "index_edges", relation="transfer") == 30
    assert value(metrics, ns + "index_bytes") == 4096
    assert value(metrics, ns + "live_matches", query="ring{3}") == 5
    assert (ns + "live_matches", frozenset({("query", "ring{4}")})) not in samples(metrics)
    assert value(metrics, ns + "last_committed_epoch") == 7
    assert value(metrics, ns + "last_committed_epoch_timestamp_seconds") == 1_700_000_000.5
    assert value(metrics, ns + "ready") == 1
    assert value(metrics, ns + "build_info", version=version("subgraph-monitor")) == 1


def test_instances_do_not_share_a_registry() -> None:
    first, second = Metrics(), Metrics(process_metrics=False)
    first.consumed("edges", 3)
    assert ("subgraph_monitor_updates_consumed_total", frozenset({("topic", "edges")})) not in (
        samples(second)
    )
    assert "process_cpu_seconds_total" not in second.render().decode()


def bucket_counts(families_text: str, name: str) -> list[tuple[str, float]]:
    return [
        (s.labels["le"], s.value)
        for family in text_string_to_metric_families(families_text)
        for s in family.samples
        if s.name == name + "_bucket"
    ]


def test_bulk_histogram_equals_prometheus_histogram() -> None:
    """The vectorized histogram against prometheus_client's own, on values including every
    bucket bound exactly (le is inclusive), NaNs and negatives."""
    rng = np.random.default_rng(4)
    values = np.concatenate(
        [rng.lognormal(-2, 2.5, 5000), np.asarray(LATENCY_BUCKETS, dtype=np.float64), [1e9]]
    )
    registry = CollectorRegistry()
    bulk = BulkHistogram("bulk_seconds", "vectorized", LATENCY_BUCKETS)
    registry.register(bulk)
    reference = Histogram("ref_seconds", "one by one", registry=registry, buckets=LATENCY_BUCKETS)
    for v in values:
        reference.observe(float(v))
    bulk.observe(values[:1000])
    bulk.observe(list(values[1000:]))
    bulk.observe(np.array([np.nan]))
    bulk.observe([])
    text = generate_latest(registry).decode()
    got, want = bucket_counts(text, "bulk_seconds"), bucket_counts(text, "ref_seconds")
    assert [float(le) for le, _ in got] == [float(le) for le, _ in want]
    assert [c for _, c in got] == [c for _, c in want]
    sums = {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.endswith("_sum")
    }
    assert sums["bulk_seconds_sum"] == pytest.approx(sums["ref_seconds_sum"])

    bulk.observe([-3.0])
    text = generate_latest(registry).decode()
    assert bucket_counts(text, "bulk_seconds")[0][1] == dict(want)["0.001"] + 1


def partition_stats(partition: int, lag: int) -> dict[str, Any]:
    """One partition of a consumer's statistics, with the fields librdkafka emits."""
    hi = 5000 + partition
    return {
        "partition": partition,
        "broker": 1,
        "leader": 1 if partition >= 0 else -1,
        "desired": partition >= 0,
        "unknown": False,
        "msgq_cnt": 0,
        "msgq_bytes": 0,
        "xmit_msgq_cnt": 0,
        "xmit_msgq_bytes": 0,
        "fetchq_cnt": 3,
        "fetchq_size": 412,
        "fetch_state": "active" if partition >= 0 else "none",
        "query_offset": -1001,
        "next_offset": hi - lag if lag >= 0 else -1001,
        "app_offset": hi - lag if lag >= 0 else -1001,
        "stored_offset": -1001,
        "stored_leader_epoch": -1,
        "committed_offset": hi - lag - 10 if lag >= 0 else -1001,
        "committed_leader_epoch": -1,
        "eof_offset": -1001,
        "lo_offset": 0 if lag >= 0 else -1001,
        "hi_offset": hi if lag >= 0 else -1001,
        "ls_offset": hi if lag >= 0 else -1001,
        "consumer_lag": lag,
        "consumer_lag_stored": lag + 10 if lag >= 0 else -1,
        "leader_epoch": 0,
        "txmsgs": 0,
        "txbytes": 0,
        "rxmsgs": 812,
        "rxbytes": 96211,
        "msgs": 812,
        "rx_ver_drops": 0,
        "msgs_inflight": 0,
        "next_ack_seq": 0,
        "next_err_seq": 0,
        "acked_msgid": 0,
    }


def consumer_stats(lags: dict[tuple[str, int], int]) -> dict[str, Any]:
    """A consumer's librdkafka statistics document (STATISTICS.md), trimmed of broker windows;
    every topic also carries librdkafka's internal UA partition -1."""
    topics: dict[str, Any] = {}
    for (topic, partition), lag in lags.items():
        entry = topics.setdefault(
            topic,
            {
                "topic": topic,
                "age": 30012,
                "metadata_age": 2004,
                "batchsize": {"min": 0, "max": 0, "avg": 0, "sum": 0, "cnt": 0},
                "batchcnt": {"min": 0, "max": 0, "avg": 0, "sum": 0, "cnt": 0},
                "partitions": {"-1": partition_stats(-1, -1)},
            },
        )
        entry["partitions"][str(partition)] = partition_stats(partition, lag)
    return {
        "name": "rdkafka#consumer-1",
        "client_id": "subgraph-monitor",
        "type": "consumer",
        "ts": 5016483227792,
        "time": 1700000000,
        "age": 30012345,
        "replyq": 0,
        "msg_cnt": 0,
        "msg_size": 0,
        "msg_max": 100000,
        "msg_size_max": 1073741824,
        "simple_cnt": 0,
        "metadata_cache_cnt": 1,
        "brokers": {
            "localhost:9092/1": {
                "name": "localhost:9092/1",
                "nodeid": 1,
                "nodename": "localhost:9092",
                "source": "configured",
                "state": "UP",
                "stateage": 29981234,
                "rtt": {"min": 180, "max": 2210, "avg": 455, "p99": 2200, "cnt": 57},
                "toppars": {f"{t}-{p}": {"topic": t, "partition": p} for (t, p) in lags if p >= 0},
            }
        },
        "topics": topics,
        "cgrp": {
            "state": "up",
            "stateage": 29000,
            "join_state": "steady",
            "rebalance_age": 28000,
            "rebalance_cnt": 1,
            "rebalance_reason": "group rejoin",
            "assignment_size": len(lags),
        },
        "tx": 120,
        "tx_bytes": 9120,
        "rx": 120,
        "rx_bytes": 118000,
        "txmsgs": 0,
        "txmsg_bytes": 0,
        "rxmsgs": 1624,
        "rxmsg_bytes": 192422,
    }


def lags(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["topic"], dict(labels)["partition"]): v
        for (name, labels), v in samples(metrics).items()
        if name == "subgraph_monitor_consumer_lag"
    }


def test_librdkafka_statistics_set_the_lag_gauges() -> None:
    metrics = Metrics()
    stats = consumer_stats({("edges", 0): 42, ("edges", 1): 0, ("edges", 2): -1, ("likes", 0): 7})
    assert metrics.observe_librdkafka_stats(json.dumps(stats)) == 3
    assert lags(metrics) == {("edges", "0"): 42, ("edges", "1"): 0, ("likes", "0"): 7}

    # partition edges/1 revoked, likes/0 caught up: the revoked series goes away
    stats = consumer_stats({("edges", 0): 40, ("likes", 0): 0})
    assert metrics.observe_librdkafka_stats(json.dumps(stats)) == 2
    assert lags(metrics) == {("edges", "0"): 40, ("likes", "0"): 0}


def test_lag_without_a_consumer_commit_is_the_stable_offset_minus_the_position() -> None:
    """Offsets committed through the producer's transaction never reach the consumer's own
    committed offset, so librdkafka reports consumer_lag -1: the lag then comes from the last
    stable offset and the position (what was seen on a real broker)."""
    metrics = Metrics()
    stats = consumer_stats({("edges", 0): 30, ("edges", 1): 0})
    for entry in stats["topics"]["edges"]["partitions"].values():
        entry["consumer_lag"] = -1
        entry["committed_offset"] = -1001
    assert metrics.observe_librdkafka_stats(json.dumps(stats)) == 2
    assert lags(metrics) == {("edges", "0"): 30, ("edges", "1"): 0}


def test_known_reasons_exist_at_zero_from_the_start() -> None:
    found = samples(Metrics())
    for category in DEAD_LETTER_CATEGORIES:
        key = ("subgraph_monitor_dead_letters_total", frozenset({("reason", category)}))
        assert found[key] == 0


def test_librdkafka_statistics_of_a_producer_or_garbage_change_nothing() -> None:
    metrics = Metrics()
    metrics.observe_librdkafka_stats(json.dumps(consumer_stats({("edges", 0): 5})))
    producer = consumer_stats({("out", 0): -1}) | {"type": "producer", "name": "rdkafka#producer-1"}
    assert metrics.observe_librdkafka_stats(json.dumps(producer)) == 0
    for garbage in ("", "{", "[]", '{"topics": 3}', '{"topics": {"t": {"partitions": [1]}}}'):
        assert metrics.observe_librdkafka_stats(garbage) == 0
    assert lags(metrics) == {("edges", "0"): 5}


def test_samples_have_no_created_series() -> None:
    metrics = Metrics(process_metrics=False)
    exercise(metrics)
    names = {
        s.name
        for f in text_string_to_metric_families(metrics.render().decode())
        for s in f.samples
        if isinstance(s, Sample)
    }
    assert not {n for n in names if n.endswith("_created")}


def test_event_time_families_follow_the_epochs_and_the_lag_grows_with_the_clock() -> None:
    metrics = Metrics()
    ns = "subgraph_monitor_"
    metrics.time.epoch(-float("inf"), {"payments:0": -float("inf")}, {}, {})
    assert value(metrics, ns + "watermark_seconds") == 0  # unknown: never set
    now_ms = time.time() * 1000.0
    marks = {"payments:0": now_ms - 60_000.0, "payments:1": now_ms - 5_000.0}
    metrics.time.epoch(now_ms - 60_000.0, marks, {"transfer": 3}, {"transfer": 2})
    metrics.time.epoch(now_ms - 60_000.0, marks, {"transfer": 1}, {})
    assert value(metrics, ns + "watermark_seconds") == (now_ms - 60_000.0) / 1000.0
    assert (
        value(metrics, ns + "partition_watermark_seconds", partition="payments:1")
        == (now_ms - 5_000.0) / 1000.0
    )
    assert value(metrics, ns + "events_expired_total", relation="transfer") == 4
    assert value(metrics, ns + "events_late_total", relation="transfer") == 2
    lag = value(metrics, ns + "event_time_lag_seconds", partition="payments:0")
    assert 59.0 <= lag < 120.0
    time.sleep(0.05)
    assert value(metrics, ns + "event_time_lag_seconds", partition="payments:0") > lag
