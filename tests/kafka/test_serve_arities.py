"""``serve`` against a real broker: tuples of another length than their relation's arity.

Polls hold tuple records of one relation with several lengths: the first record of the first
poll has three ids where the queries read ``e`` with two, others are shorter, and a relation no
query reads has its first tuple's arity. Those records go to the dead-letter topic with the
reason ``relation 'e' has 2 ids per tuple, got 3``, counted as ``invalid_record``; every other
record is applied (the output is the file job's on them), the positions reach the end, and the
service neither crashes nor restarts (it used to stop on an IndexError at every restart).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Producer

from tests.kafka.test_serve import (
    Service,
    _port_from_log,
    check_exactly_once,
    deltas,
    expected_matches,
    read_topic,
    stream_records,
    wait_consumed,
)

pytestmark = pytest.mark.kafka

#: Where each odd tuple goes in the stream, and why it is a dead letter.
ODD: list[tuple[int, dict[str, object], str]] = [
    (0, {"relation": "e", "tuple": [1, 2, 3]}, "relation 'e' has 2 ids per tuple, got 3"),
    (5, {"tuple": [7]}, "relation 'e' has 2 ids per tuple, got 1"),
    (40, {"op": "delete", "tuple": [1, 2, 3, 4]}, "relation 'e' has 2 ids per tuple, got 4"),
    (
        60,
        {"relation": "pays", "tuple": ["acct-1", "acct-2", "acct-3"]},
        "relation 'pays' has 2 ids per tuple, got 3",
    ),
    (90, {"relation": "other", "tuple": [1, 2]}, "relation 'other' has 3 ids per tuple, got 2"),
    (450, {"relation": "e", "tuple": [8]}, "relation 'e' has 2 ids per tuple, got 1"),
]


def stream(seed: int) -> list[dict[str, object]]:
    """Edge records, a third of them written as two-id tuples, and tuples of a relation no
    query reads (three ids, the first at offset 20)."""
    rng = np.random.default_rng(seed)
    records: list[dict[str, object]] = []
    for record in stream_records(600, seed):
        if rng.random() < 0.33:
            ends = [record.pop("src"), record.pop("dst")]
            record["tuple"] = ends
        records.append(record)
    for at in (20, 100, 300):
        records.insert(at, {"relation": "other", "tuple": [at, at + 1, at + 2]})
    return records


def test_odd_tuples_are_dead_letters_and_the_rest_is_applied(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    svc = service(partitions=1, SGM_MAX_BATCH_DELAY_MS="2000")
    good = stream(seed=12)
    mixed = [json.dumps(r).encode() for r in good]
    for at, record, _ in ODD:
        mixed.insert(at, json.dumps(record).encode())
    producer = Producer({"bootstrap.servers": svc.bootstrap})
    for value in mixed:
        producer.produce(svc.input, value=value)
    assert producer.flush(30) == 0
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, timeout=90, svc=svc)
    port = _port_from_log(svc)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    assert svc.stop() == 0, svc.log_text()
    assert svc.restarts == 0 and "Traceback" not in svc.log_text()

    dead = read_topic(svc.bootstrap, svc.dead)
    assert [(int(h["source-offset"]), v, h["reason"].decode()) for _, v, h in dead] == [
        (at, json.dumps(record).encode(), reason) for at, record, reason in ODD
    ]
    assert b'subgraph_monitor_dead_letters_total{reason="invalid_record"} 6.0' in metrics
    assert b'subgraph_monitor_updates_ignored_total{reason="wrong_arity"} 0.0' in metrics
    got = check_exactly_once(deltas(read_topic(svc.bootstrap, svc.output)))
    assert got and got == expected_matches(good, tmp_path)
