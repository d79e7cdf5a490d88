"""The two output formats against a real broker: the sink alone, and ``serve``.

``SGM_OUTPUT_FORMAT=batches`` must publish exactly the deltas of ``records``, decoded by the
package's reader (:func:`connectors.batches.read_message`), epoch by epoch and in order, under
the same exactly-once guarantee; a full producer queue must block and lose nothing.
(Scale-out workers in the batches format: tests/kafka/test_cluster.py.)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from connectors.batches import batch_info, read_message
from connectors.kafka_sink import KafkaSink
from core.columns import Coded
from tests.kafka.test_serve import (
    Service,
    produce,
    stream_records,
    wait_consumed,
    wait_ready,
)
from tests.kafka_broker import KafkaCluster

pytestmark = pytest.mark.kafka


def read_messages(bootstrap: str, topic: str, idle: float = 3.0) -> list[Message]:
    """Every committed message of a one-partition topic, in offset order (assigned, not
    subscribed: no group to join on a broker whose coordinators may still be loading)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[Message] = []
    last = time.monotonic()
    while time.monotonic() - last < idle:
        for message in consumer.consume(1000, timeout=0.5):
            if message.error() is None:
                out.append(message)
                last = time.monotonic()
    consumer.close()
    return out


def decoded(messages: list[Message]) -> list[dict[str, Any]]:
    return [delta for m in messages for delta in read_message(m)]


def sink(
    kafka: KafkaCluster, topic: str, output_format: str, encoding: str = "jsonl", **config: Any
) -> KafkaSink:
    return KafkaSink(
        {"bootstrap.servers": kafka.bootstrap, **config},
        transactional_id=f"test-{uuid.uuid4().hex}",
        output_topic=topic,
        dead_letter_topic=topic,
        version="9.9.9",
        output_format=output_format,  # type: ignore[arg-type]
        batch_encoding=encoding,  # type: ignore[arg-type]
    )


def epochs_of_deltas(rows: int) -> list[dict[str, Any]]:
    """Two queries' deltas over three epochs: integer and string ids, events with fields,
    a cause on the retractions and a match id."""
    rng = np.random.default_rng(7)
    out: list[dict[str, Any]] = []
    for epoch in (1, 2, 3):
        ids = np.empty(rows, object)
        ids[:] = [f"acct-{int(i)}" for i in rng.integers(0, 10**6, rows)]
        diffs = np.where(rng.random(rows) < 0.3, -1, 1).astype(np.int8)
        extra = {
            "cause": Coded(np.where(diffs < 0, 0, -1).astype(np.int32), ["deleted"]),
            "match_id": np.array([b"%016x" % i for i in range(rows)], "S16"),
        }
        out.append(
            {
                "query": "tri",
                "epoch": epoch,
                "variables": ["a", "b", "c"],
                "columns": [rng.integers(-5, 10**9, rows) for _ in range(3)],
                "diffs": diffs,
                "edges": None,
                "extra": extra,
            }
        )
        edges = {
            "t": {
                "id": ids,
                "src": ids,
                "dst": rng.integers(0, 100, rows),
                "amount": np.where(rng.random(rows) < 0.5, np.nan, rng.random(rows) * 1000),
            }
        }
        ring = {"query": "ring", "columns": [ids, ids], "variables": ["a", "b"], "edges": edges}
        out.append({**out[-1], **ring, "extra": {"match_id": extra["match_id"]}})
    return out


def test_the_sink_publishes_the_same_deltas_in_both_formats(
    kafka: KafkaCluster, make_topic: Callable[..., str]
) -> None:
    deltas = epochs_of_deltas(3000)
    topics = {f: make_topic(1, prefix=f"sgm-{f}") for f in ("records", "batches", "arrow")}
    for name, topic in topics.items():
        # message.max.bytes 20,000: a batch holds at most 15,904 bytes, so an epoch's query
        # takes several records
        output_format, encoding = ("batches", name) if name == "arrow" else (name, "jsonl")
        out = sink(kafka, topic, output_format, encoding, **{"message.max.bytes": 20_000})
        for epoch in (1, 2, 3):
            out.begin()
            for d in deltas:
                if d["epoch"] == epoch:
                    out.write_deltas(
                        d["query"],
                        epoch,
                        d["variables"],
                        d["columns"],
                        d["diffs"],
                        d["edges"],
                        d["extra"],
                    )
            out.commit({}, None)
        out.flush()
    records = read_messages(kafka.bootstrap, topics["records"])
    assert len(records) == 6 * 3000 and not any(m.headers() for m in records)
    for encoding in ("batches", "arrow"):
        batches = read_messages(kafka.bootstrap, topics[encoding])
        assert decoded(batches) == decoded(records), encoding
        assert len(batches) > 6, "the size limit cut the epochs into several records"
        check_batches(batches, b"arrow" if encoding == "arrow" else b"jsonl")


def check_batches(batches: list[Message], encoding: bytes) -> None:
    """Every epoch's query in parts under the size limit, numbered in order, none lost."""
    seen: dict[tuple[str, int], int] = {}
    for m in batches:
        assert dict(m.headers() or [])["format"] == encoding
        info = batch_info(m.headers())
        assert info is not None and len(m.value() or b"") <= 20_000 - 4096
        assert orjson.loads(m.key() or b"") == info.query and info.total == 3000
        assert info.first == seen.get((info.query, info.epoch), 0), "parts in order, none lost"
        seen[(info.query, info.epoch)] = info.first + info.count
        rows = read_message(m)
        assert len(rows) == info.count
        assert {(r["query"], r["epoch"]) for r in rows} == {(info.query, info.epoch)}
        assert dict(m.headers() or [])["service-version"] == b"9.9.9"
    assert set(seen.values()) == {3000} and len(seen) == 6


def test_a_full_producer_queue_blocks_and_loses_nothing(
    kafka: KafkaCluster, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(1, prefix="sgm-out")
    out = sink(kafka, topic, "records", "jsonl", **{"queue.buffering.max.messages": 50})
    rows = 20_000
    out.begin()
    out.write_deltas("q", 1, ["a"], [np.arange(rows)], np.ones(rows, np.int8))
    out.commit({}, None)
    assert out.take_waited() > 0 and out.take_waited() == 0
    got = decoded(read_messages(kafka.bootstrap, topic))
    assert [r["match"]["a"] for r in got] == list(range(rows))


def test_serve_in_batches_publishes_what_records_publishes(service: Callable[..., Service]) -> None:
    """One input partition, epochs cut by count: every format sees the same epochs, and the
    batches (JSON Lines and Arrow) decode to the records, line for line."""
    records = stream_records(3000, seed=21)
    out: dict[str, list[Message]] = {}
    for name, output_format, encoding in (
        ("records", "records", "jsonl"),
        ("jsonl", "batches", "jsonl"),
        ("arrow", "batches", "arrow"),
    ):
        svc = service(
            partitions=1,
            SGM_MAX_BATCH_DELAY_MS="10000",
            SGM_OUTPUT_FORMAT=output_format,
            SGM_BATCH_ENCODING=encoding,
        )
        produce(svc.bootstrap, svc.input, records)
        svc.start()
        wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
        wait_ready(svc)
        assert svc.stop() == 0, svc.log_text()
        out[name] = read_messages(svc.bootstrap, svc.output)
    for encoding in ("jsonl", "arrow"):
        assert decoded(out[encoding]) == decoded(out["records"]), encoding
        assert {dict(m.headers() or [])["format"] for m in out[encoding]} == {encoding.encode()}
        infos = [batch_info(m.headers()) for m in out[encoding]]
        per_epoch = {(i.query, i.epoch) for i in infos if i is not None}
        assert len(infos) == len(per_epoch), "one record per query and epoch (all fit in 1 MB)"
        assert all(i is not None and i.last for i in infos)
