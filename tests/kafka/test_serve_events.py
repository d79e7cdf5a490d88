"""Events through ``serve`` against a real broker: matches with their events, exactly once across
SIGKILLs, keys naming the events, bad event records as dead letters with their reason.

The records are those of the file job's events test (transfers by id with fields, deletes by
id, tuples, labels), keyed by event id (or tuple) so that each id's updates keep their order in
one partition. Replayed, the output's running sums per binding (vertices and events) stay in
{0, 1} and end at the brute-force oracle's matches.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Producer

from tests.engine.test_events_oracle import QUERIES, brute_force, event_records
from tests.kafka.test_serve import (
    Service,
    _port_from_log,
    read_topic,
    wait_consumed,
    wait_ready,
)

pytestmark = pytest.mark.kafka

QUERY_TEXT = "\n".join(str(q) for q in QUERIES) + "\n"
EDGES = {q.name: q.edges for q in QUERIES}

Binding = tuple[str, tuple[tuple[object, ...], tuple[str, ...]]]


def key_of(record: dict[str, object]) -> bytes:
    if "id" in record:
        return str(record["id"]).encode()
    return json.dumps(
        [record.get("relation", "e"), record.get("tuple"), record.get("src"), record.get("dst")]
    ).encode()


def produce_values(bootstrap: str, topic: str, values: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in values:
        producer.produce(topic, value=value, key=key)
    assert producer.flush(30) == 0


def replay(records: list[tuple[bytes, bytes, dict[str, bytes]]]) -> set[Binding]:
    """The bindings the output leaves current. Every key is ``[query, [vertex ids], [event
    ids]]`` of its value; per epoch each binding comes once (an id deleted and inserted again
    within it included), and the running sums stay in {0, 1}."""
    current: Counter[Binding] = Counter()
    epochs: dict[int, Counter[Binding]] = {}
    for key, value, _ in records:
        row = json.loads(value)
        events = tuple(str(row["edges"][e]["id"]) for e in EDGES[row["query"]])
        vertices = tuple(row["match"].values())
        assert json.loads(key) == [row["query"], list(vertices), list(events)]
        binding = (row["query"], (vertices, events))
        assert binding not in epochs.setdefault(row["epoch"], Counter()), f"{binding} twice"
        epochs[row["epoch"]][binding] += row["diff"]
    assert list(epochs) == sorted(epochs), "epochs out of order"
    for epoch, deltas in epochs.items():
        current.update(deltas)
        assert all(current[b] in (0, 1) for b in deltas), f"running sums after {epoch}"
    return {b for b, c in current.items() if c}


def events_service(service: Callable[..., Service], partitions: int, **env: str) -> Service:
    svc = service(partitions=partitions, SGM_UNDIRECTED="false", **env)
    (svc.tmp / "queries.q").write_text(QUERY_TEXT)
    return svc


def expected(model: object) -> set[Binding]:
    return {(q.name, b) for q in QUERIES for b in brute_force(model, q)}  # type: ignore[arg-type]


def test_events_survive_sigkills_exactly_once_with_their_fields(
    service: Callable[..., Service],
) -> None:
    svc = events_service(service, 3, SGM_BATCH_SIZE="60", SGM_MAX_BATCH_DELAY_MS="100")
    records, model = event_records(4000, seed=21)
    values = [(key_of(r), json.dumps(r).encode()) for r in records]
    rng = np.random.default_rng(5)
    kills = 0
    for lo in range(0, len(values), 1000):
        produce_values(svc.bootstrap, svc.input, values[lo : lo + 1000])
        svc.start()
        time.sleep(float(rng.uniform(1.5, 3.0)))
        svc.stop(signal.SIGKILL)
        kills += 1
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, timeout=180, svc=svc)
    wait_ready(svc)
    assert svc.stop() == 0, svc.log_text()
    output = read_topic(svc.bootstrap, svc.output)
    got = replay(output)
    assert got == expected(model)
    assert len({b[0] for b in got}) >= 3, f"too few queries match at the end: {got}"
    fields = Counter(k for _, v, _ in output for e in json.loads(v)["edges"].values() for k in e)
    assert fields["amount"] and fields["channel"] and fields["src"] == fields["id"], fields
    assert kills >= 3


def test_bad_event_records_are_dead_letters_with_their_reason(
    service: Callable[..., Service],
) -> None:
    svc = events_service(service, 1, SGM_MAX_BATCH_DELAY_MS="2000", SGM_OUTPUT_FIELDS="amount")
    good = {"relation": "transfer", "id": "tx-1", "src": 0, "dst": 1, "amount": 3}
    bad = [
        ({"relation": "transfer", "id": "tx-2", "src": 0, "dst": 1, "amount": "three"}, "a number"),
        ({"relation": "transfer", "id": "tx-3", "src": 0, "dst": 1, "amount": [3]}, "an array"),
        (
            {"relation": "transfer", "id": "tx-4", "src": 0, "dst": 1, "channel": "x" * 5000},
            "5,000",
        ),
        ({"relation": "transfer", "id": "tx-5", "dst": 1}, "missing 'src'"),
    ]
    back = {"relation": "transfer", "id": "tx-6", "src": 1, "dst": 0, "amount": 2, "channel": "x"}
    values = [json.dumps(good).encode(), *(json.dumps(r).encode() for r, _ in bad)]
    values += [b"not json", json.dumps(back).encode()]
    produce_values(svc.bootstrap, svc.input, [(b"k", v) for v in values])
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    port = _port_from_log(svc)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    assert svc.stop() == 0, svc.log_text()
    dead = read_topic(svc.bootstrap, svc.dead)
    assert len(dead) == len(bad) + 1
    for (_, value, headers), (record, reason) in zip(dead, bad, strict=False):
        assert json.loads(value) == record
        assert reason in headers["reason"].decode(), headers["reason"]
    counts = {
        line.split(b"{")[1].split(b"}")[0]: float(line.rsplit(b" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(b"subgraph_monitor_dead_letters_total{")
    }
    assert counts[b'reason="invalid_field"'] == 3, counts  # the type, the array, the length
    assert counts[b'reason="invalid_record"'] == 1, counts  # the missing src
    assert counts[b'reason="invalid_json"'] == 1, counts
    output = read_topic(svc.bootstrap, svc.output)
    rows = [json.loads(v) for _, v, _ in output]
    mutual = [r for r in rows if r["query"] == "mutual"]
    assert sorted((r["edges"]["t"] for r in mutual), key=str) == [
        {"id": "tx-1", "src": 0, "dst": 1, "amount": 3},
        {"id": "tx-6", "src": 1, "dst": 0, "amount": 2},
    ]  # SGM_OUTPUT_FIELDS=amount: channel left out


def test_events_without_id_take_their_record_position(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    svc = events_service(service, 1, SGM_MAX_BATCH_DELAY_MS="2000")
    first = {"relation": "transfer", "src": 0, "dst": 1, "amount": 3}
    second = {"relation": "transfer", "src": 1, "dst": 0, "amount": 2}
    produce_values(
        svc.bootstrap, svc.input, [(b"k", json.dumps(r).encode()) for r in (first, second)]
    )
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    assert svc.stop() == 0, svc.log_text()
    rows = [json.loads(v) for _, v, _ in read_topic(svc.bootstrap, svc.output)]
    ids = {r["edges"]["t"]["id"] for r in rows if r["query"] == "mutual"}
    assert ids == {f"{svc.input}:0@0", f"{svc.input}:0@1"}
