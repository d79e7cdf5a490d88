"""Avro input in the replicated scale-out: two workers on a six-partition topic of Avro
payments (written by the standard serializer, mapped by ``SGM_FIELD_MAP``) read what one
service reads: every record a real transition, the end the brute force's, and a record of an
unknown schema one dead letter with its reason, written once.
"""

from __future__ import annotations

import decimal
import json

import numpy as np
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from scripts.registry_local import SchemaRegistry
from tests.kafka.test_cluster import Workers, output_rows
from tests.kafka.test_serve import read_topic
from tests.kafka.test_serve_registry import BASE_MS, FIELD_MAP, QUERIES, payment_schema

pytestmark = pytest.mark.kafka


def test_two_workers_read_avro_as_one_service_does(
    workers: Workers, schema_registry: SchemaRegistry
) -> None:
    (workers.tmp / "queries.q").write_text(QUERIES)
    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    writer = AvroSerializer(client, payment_schema(), conf={"subject.name.strategy.type": "TOPIC"})
    ctx = SerializationContext(workers.input, MessageField.VALUE)
    rng = np.random.default_rng(7)
    live: dict[str, tuple[str, str, float]] = {}
    producer = Producer({"bootstrap.servers": workers.bootstrap})
    for i in range(240):
        if live and rng.random() < 0.2:
            tx = str(rng.choice(sorted(live)))
            src, dst, amount = live.pop(tx)
            record = {"op": "delete", "id": tx, "from_account": src, "to_account": dst}
        else:
            tx = f"tx-{i}"
            src, dst = (f"acct-{v}" for v in rng.choice(20, 2, replace=False))
            amount = float(rng.choice([50, 150, 250]))
            live[tx] = (src, dst, amount)
            record = {"id": tx, "from_account": src, "to_account": dst}
        value = writer(
            {
                **record,
                "booked_at": BASE_MS + i,
                "meta": {"channel": "web"},
                "amount": decimal.Decimal(f"{amount:.2f}"),
            },
            ctx,
        )
        assert value is not None
        producer.produce(workers.input, value, tx.encode())
        if i == 100:
            producer.produce(workers.input, b"\x00" + (424_242).to_bytes(4, "big") + value[5:])
    assert producer.flush(30) == 0
    env = {
        "SGM_UNDIRECTED": "false",
        "SGM_DEFAULT_RELATION": "transfer",
        "SGM_INPUT_FORMAT": "avro",
        "SGM_SCHEMA_REGISTRY_URL": schema_registry.url,
        "SGM_FIELD_MAP": FIELD_MAP,
        "SGM_BATCH_SIZE": "60",
    }
    workers.start("w0", **env)
    workers.start("w1", **env)
    workers.wait_consumed()
    rows = output_rows(workers)
    for name in ("w0", "w1"):
        assert workers.stop(name) == 0, workers.log_text()
    # (a binding is the pair and its transfer: two transfers between a pair are two matches)
    total: dict[tuple[object, ...], int] = {}
    for r in rows:
        key = (*r["match"].values(), r["edges"]["t"]["id"])  # type: ignore[attr-defined, index]
        total[key] = total.get(key, 0) + int(r["diff"])  # type: ignore[call-overload]
        assert total[key] in (0, 1), f"running sum {total[key]} for {key}"
    expected = {(s, d, tx) for tx, (s, d, amount) in live.items() if amount >= 100}
    assert {k for k, n in total.items() if n} == expected
    epochs = [int(r["epoch"]) for r in rows]  # type: ignore[call-overload]
    assert epochs == sorted(epochs)
    dead = read_topic(workers.bootstrap, workers.dead)
    assert [(h["category"], json.dumps(h["reason"].decode())) for _, _, h in dead] == [
        (b"unknown_schema", json.dumps(dead[0][2]["reason"].decode()))
    ]
    assert b"schema id 424242" in dead[0][2]["reason"]
