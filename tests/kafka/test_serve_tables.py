"""A table of account attributes through ``serve`` against a real broker: its own compacted
topic (``SGM_TOPIC_RELATIONS``), read from its beginning by a new group even with
``auto.offset.reset=latest``; an update that breaks a match retracts it with ``cause:
"updated"``, a tombstone (a message with no value) with ``"deleted"``; a record without
``key`` is a dead letter with its reason; and after a SIGKILL the restarted service still
holds the attributes (the next update is judged against them), with every delta exactly once.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.kafka.test_serve import (
    Service,
    check_exactly_once,
    read_topic,
    wait_consumed,
    wait_ready,
)
from tests.kafka.test_serve_windows import wait_rows

pytestmark = pytest.mark.kafka

QUERIES = 'risky(a, b) := transfer(a, b) as t, account(b) as y, y.risk = "high".\n'


def compacted_topic(bootstrap: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, 1, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([topic], operation_timeout=30)[name].result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic=name, timeout=10).topics.get(name)
        if meta is not None and meta.error is None and meta.partitions[0].leader >= 0:
            return name
        time.sleep(0.1)
    raise AssertionError(f"topic {name} has no leader after 30s")


def account(producer: Producer, topic: str, key: str, record: dict[str, object] | None) -> None:
    """An account record keyed by ``key`` (None: its tombstone)."""
    value = None if record is None else json.dumps({"key": key, **record}).encode()
    producer.produce(topic, value, key.encode())


def seen(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each row's diff, receiving account and cause."""
    return [(r["diff"], r["match"]["b"], r.get("cause")) for r in rows]


def transfer(producer: Producer, topic: str, tx: str, src: str, dst: str) -> None:
    record = {"relation": "transfer", "id": tx, "src": src, "dst": dst, "amount": 10}
    producer.produce(topic, json.dumps(record).encode(), tx.encode(), 0)


def test_a_table_topic_updates_retracts_and_survives_a_kill(
    service: Callable[..., Service],
) -> None:
    svc = service(partitions=1, SGM_UNDIRECTED="false")
    accounts = compacted_topic(svc.bootstrap, f"sgm-accounts-{svc.group}")
    svc.env.update(
        {
            "SGM_INPUT_TOPICS": f"{svc.input},{accounts}",
            "SGM_TOPIC_RELATIONS": f"{accounts}=account",
            "SGM_TABLES": "account",
            # (a table's topic is read whole anyway; the transfers' topic from here on)
            "SGM_KAFKA": json.dumps({"auto.offset.reset": "latest"}),
        }
    )
    (svc.tmp / "queries.q").write_text(QUERIES)
    producer = Producer({"bootstrap.servers": svc.bootstrap})
    for key, risk in (("B", "high"), ("C", "high"), ("D", "low")):
        account(producer, accounts, key, {"risk": risk, "country": "DE"})
    assert producer.flush(30) == 0
    svc.start()
    wait_ready(svc)
    wait_consumed(svc.bootstrap, svc.group, accounts, svc=svc)
    for tx, dst in (("t1", "B"), ("t2", "C"), ("t3", "D")):
        transfer(producer, svc.input, tx, "A", dst)
    assert producer.flush(30) == 0
    rows = wait_rows(svc, 2)
    assert sorted(seen(rows)) == [(1, "B", None), (1, "C", None)], rows

    account(producer, accounts, "B", {"risk": "low", "country": "DE"})  # breaks A->B
    account(producer, accounts, "C", {"risk": "high", "country": "FR"})  # keeps A->C
    producer.produce(accounts, b'{"risk": "high"}', b"E")  # no key in the record
    assert producer.flush(30) == 0
    rows = wait_rows(svc, 3)
    assert seen(rows[2:]) == [(-1, "B", "updated")], rows

    svc.stop(signal.SIGKILL)
    account(producer, accounts, "C", None)  # a tombstone: removes C
    account(producer, accounts, "D", {"risk": "high", "country": "DE"})  # makes A->D
    assert producer.flush(30) == 0
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, accounts, svc=svc)
    rows = wait_rows(svc, 5)
    assert svc.stop() == 0, svc.log_text()
    assert sorted(seen(rows[3:])) == [
        (-1, "C", "deleted"),
        (1, "D", None),
    ], rows
    first: dict[str, Any] = rows[0]
    assert first["edges"]["y"] == {
        "id": "B",
        "src": "B",
        "dst": "B",
        "risk": "high",
        "country": "DE",
    }
    got = check_exactly_once(rows)
    assert {match for (_, match), n in got.items() if n} == {("A", "D")}, got
    dead = read_topic(svc.bootstrap, svc.dead)
    assert len(dead) == 1, dead
    assert b"needs 'key'" in dead[0][2]["reason"], dead[0][2]
