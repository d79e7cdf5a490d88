"""``serve`` with Avro in and out through a real broker and a real schema registry (Apicurio):
records written by the standard Avro serializer, mapped by ``SGM_FIELD_MAP``, a new schema
version in the middle of the stream, bad records as dead letters with their reasons, a SIGKILL
and a restart with every delta exactly once, the output read by the standard Avro deserializer;
and a registry that does not answer: not ready, nothing dead-lettered, every record read once
it answers again.
"""

from __future__ import annotations

import decimal
import json
import signal
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from scripts.registry_local import SchemaRegistry
from tests.kafka.test_serve import (
    Service,
    _port_from_log,
    check_exactly_once,
    read_topic,
    wait_consumed,
    wait_ready,
)

pytestmark = pytest.mark.kafka

QUERIES = "big(a, b) := transfer(a, b) as t, t.amount >= 100.\n"
FIELD_MAP = "src=from_account,dst=to_account,ts=booked_at,channel=meta.channel"
BASE_MS = 1_796_206_500_000  # 2026-12-02T10:15:00Z


def payment_schema(*extra: dict[str, Any], amount: bool = True) -> str:
    fields: list[dict[str, Any]] = [
        {"name": "op", "type": "string", "default": "insert"},
        {"name": "id", "type": "string"},
        {"name": "from_account", "type": "string"},
        {"name": "to_account", "type": "string"},
        {"name": "booked_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "meta",
            "type": {
                "type": "record",
                "name": "Meta",
                "fields": [{"name": "channel", "type": "string"}],
            },
        },
    ]
    if amount:
        decimal_type = {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}
        fields.append({"name": "amount", "type": decimal_type})
    fields += extra
    return json.dumps({"type": "record", "name": "Payment", "namespace": "bank", "fields": fields})


CURRENCY = {"name": "currency", "type": "string", "default": "EUR"}


class Payments:
    """A producer of Avro payments to the service's input topic, schema versions v1..v3."""

    def __init__(self, svc: Service, registry_url: str) -> None:
        client = SchemaRegistryClient({"url": registry_url, "timeout": 30})
        self.ctx = SerializationContext(svc.input, MessageField.VALUE)
        conf = {"subject.name.strategy.type": "TOPIC"}  # (as a producer of TOPIC-value)
        self.v1 = AvroSerializer(client, payment_schema(), conf=conf)
        self.v2 = AvroSerializer(client, payment_schema(CURRENCY), conf=conf)  # (a default)
        self.v3 = AvroSerializer(client, payment_schema(CURRENCY, amount=False), conf=conf)
        self.producer = Producer({"bootstrap.servers": svc.bootstrap})
        self.topic = svc.input

    def send(self, n: int, amount: str | None, version: int = 1, **extra: Any) -> bytes:
        record: dict[str, Any] = {
            "id": f"tx-{n}",
            "from_account": f"acct-{n}",
            "to_account": f"acct-{n + 1}",
            "booked_at": BASE_MS + n,
            "meta": {"channel": "web"},
            **extra,
        }
        if amount is not None:
            record["amount"] = decimal.Decimal(amount)
        writer = {1: self.v1, 2: self.v2, 3: self.v3}[version]
        value: bytes | None = writer(record, self.ctx)
        assert value is not None
        self.raw(value)
        return value

    def raw(self, value: bytes) -> None:
        self.producer.produce(self.topic, value, None, 0)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


def avro_rows(svc: Service, registry_url: str, n: int, timeout: float = 90) -> list[Any]:
    """The output, decoded by the standard Avro deserializer, once it holds ``n`` records."""
    reader = AvroDeserializer(SchemaRegistryClient({"url": registry_url, "timeout": 30}))
    ctx = SerializationContext(svc.output, MessageField.VALUE)
    deadline = time.monotonic() + timeout
    while True:
        rows = [reader(v, ctx) for _, v, _ in read_topic(svc.bootstrap, svc.output, idle=1.0)]
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def test_avro_in_and_out_with_a_new_schema_bad_records_and_a_kill(
    service: Callable[..., Service], schema_registry: SchemaRegistry
) -> None:
    url = schema_registry.url
    svc = service(
        partitions=1,
        SGM_UNDIRECTED="false",
        SGM_DEFAULT_RELATION="transfer",
        SGM_INPUT_FORMAT="avro",
        SGM_OUTPUT_FORMAT="avro",
        SGM_SCHEMA_REGISTRY_URL=url,
        SGM_FIELD_MAP=FIELD_MAP,
    )
    (svc.tmp / "queries.q").write_text(QUERIES)
    payments = Payments(svc, url)
    for n, amount in enumerate(["50.00", "150.00", "250.50", "350.00"], start=1):
        payments.send(n, amount)
    payments.flush()
    svc.start()
    wait_ready(svc)
    rows = avro_rows(svc, url, 3)
    assert sorted(r["match"]["a"] for r in rows) == ["acct-2", "acct-3", "acct-4"], rows
    assert "is read as columns" in svc.log_text()  # (SGM_AVRO_DECODING's default)

    svc.stop(signal.SIGKILL)
    good = payments.send(5, "600.00", version=2, currency="USD")  # a new schema version
    payments.send(2, "150.00", op="delete")  # retracts tx-2
    payments.raw(b"\x00" + (987_654).to_bytes(4, "big") + good[5:])  # an unknown schema id
    payments.raw(good[:8])  # does not decode
    payments.raw(b'{"src": "a", "dst": "b"}')  # not framed: JSON on an Avro topic
    payments.send(6, None, version=3)  # amount, which the query compares, is gone
    payments.send(7, "700.00")  # v1 again after all that
    payments.flush()
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    rows = avro_rows(svc, url, 6)
    assert svc.stop() == 0, svc.log_text()

    got = check_exactly_once(rows)
    assert sorted(str(m[0]) for (_, m) in got) == ["acct-3", "acct-4", "acct-5", "acct-7"], rows
    retracted = [r for r in rows if r["diff"] == -1]
    assert [(r["match"]["a"], r.get("cause")) for r in retracted] == [("acct-2", None)]
    usd = next(r for r in rows if r["match"]["a"] == "acct-5")
    assert usd["edges"]["t"] == {
        "id": "tx-5",
        "src": "acct-5",
        "dst": "acct-6",
        "ts": BASE_MS + 5,
        "channel": "web",
        "amount": 600,
        "currency": "USD",
    }
    dead = [(h["category"].decode(), h["reason"].decode()) for _, _, h in _dead(svc)]
    assert [c for c, _ in dead] == ["unknown_schema", "undecodable", "undecodable", "missing_field"]
    assert "schema id 987654" in dead[0][1]
    assert "'amount' of transfer, which the queries compare" in dead[3][1]


def _dead(svc: Service) -> list[tuple[bytes, bytes, dict[str, bytes]]]:
    return read_topic(svc.bootstrap, svc.dead)


def test_a_registry_that_does_not_answer_holds_the_records_until_it_does(
    service: Callable[..., Service], tmp_path: Any
) -> None:
    """The registry restarts (its schemas on disk): meanwhile the service is not ready, says
    why, and dead-letters nothing; once it answers, the records held are read."""
    stored = {"apicurio.datasource.url": f"jdbc:h2:file:{tmp_path / 'registry-db'}"}
    registry = SchemaRegistry(run_dir=tmp_path / "registry", settings=stored)
    registry.start()
    try:
        svc = service(
            partitions=1,
            SGM_UNDIRECTED="false",
            SGM_DEFAULT_RELATION="transfer",
            SGM_INPUT_FORMAT="avro",
            SGM_SCHEMA_REGISTRY_URL=registry.url,
            SGM_FIELD_MAP=FIELD_MAP,
        )
        (svc.tmp / "queries.q").write_text(QUERIES)
        payments = Payments(svc, registry.url)
        payments.send(1, "500.00")
        payments.flush()
        registry.stop()

        svc.start()
        port_http = _port_from_log(svc)
        deadline = time.monotonic() + 60
        while "schema_registry_reachable" not in _readyz(port_http).get("missing", []):
            assert time.monotonic() < deadline, svc.log_text()
            time.sleep(0.3)
        assert "the schema registry did not answer" in svc.log_text()
        assert "the records are read again" in svc.log_text()

        registry.start()  # (the same port, the same schemas)
        wait_ready(svc, timeout=90)
        wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
        assert svc.stop() == 0, svc.log_text()
        assert [h["reason"] for _, _, h in _dead(svc)] == []
        rows = [json.loads(v) for _, v, _ in read_topic(svc.bootstrap, svc.output)]
        assert [(r["diff"], r["match"]) for r in rows] == [(1, {"a": "acct-1", "b": "acct-2"})]
    finally:
        registry.close()


def _readyz(port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            document: dict[str, Any] = json.loads(answer.read())
    except urllib.error.HTTPError as error:
        document = json.loads(error.read())
    except OSError:  # (not serving yet)
        document = {"ready": False, "missing": []}
    return document
