"""Avro, Protobuf and JSON Schema records through a real schema registry (Apicurio, started by
the ``schema_registry`` fixture): written by ``confluent_kafka``'s serializers as any producer
writes them, read by the service's decoders into the JSON records the rest reads; a schema
evolving in the middle of a stream; every bad input a dead letter with its reason; a registry
that does not answer raised, never dead-lettered; and the Avro output read back by the
standard deserializer with no code of ours.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
from google.protobuf.message_factory import GetMessageClass

from connectors.avro_columns import columnar_avro
from connectors.avro_output import AvroDeltas
from connectors.events import FieldTypes
from connectors.kafka_records import Records, decode_messages
from connectors.registry_decoders import decoders, registry_client
from connectors.registry_records import FieldMap, RecordFormats, RegistryUnavailable
from scripts.registry_local import SchemaRegistry
from tests.connectors.test_avro_columns import positions
from tests.connectors.test_kafka_records import same_batch

MAP = {"src": "from_account", "dst": "to_account", "ts": "booked_at"}
BOOKED = dt.datetime(2026, 12, 2, 10, 15, tzinfo=dt.UTC)
BOOKED_MS = 1_796_206_500_000


def avro_payment(*extra: dict[str, Any], amount: bool = True) -> str:
    fields: list[dict[str, Any]] = [
        {"name": "id", "type": "string"},
        {"name": "from_account", "type": "string"},
        {"name": "to_account", "type": "string"},
        {"name": "booked_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ]
    if amount:
        fields.append(
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
            }
        )
    fields += extra
    return json.dumps({"type": "record", "name": "Payment", "namespace": "bank", "fields": fields})


def payment(n: int, **extra: Any) -> dict[str, Any]:
    import decimal

    record = {
        "id": f"tx-{n}",
        "from_account": f"acct-{n}",
        "to_account": f"acct-{n + 1}",
        "booked_at": BOOKED + dt.timedelta(seconds=n),
        "amount": decimal.Decimal(f"{n}00.25"),
    }
    return {**record, **extra}


def expected(n: int, **extra: Any) -> dict[str, Any]:
    """What a JSON record of the same payment holds."""
    return {
        "id": f"tx-{n}",
        "src": f"acct-{n}",
        "dst": f"acct-{n + 1}",
        "ts": BOOKED_MS + n * 1000,
        "amount": float(f"{n}00.25"),
        **extra,
    }


def records(topic: str, values: list[bytes]) -> Records:
    n = len(values)
    return Records([topic] * n, [0] * n, list(range(n)), values, [(1, 0)] * n)


def formats_for(
    registry: SchemaRegistry,
    name: str,
    field_map: dict[str, str] = MAP,
    columns: bool = False,
    **compared: set[str],
) -> RecordFormats:
    """The service's formats; with ``columns``, Avro polls read as columns first (as
    ``SGM_AVRO_DECODING=columns``, the service's default, reads them)."""
    client = registry_client(registry.url, {})
    wanted = {r: frozenset(f) for r, f in compared.items()}
    column_decoder = columnar_avro(client, FieldMap.parse(field_map), wanted) if columns else None
    return RecordFormats(
        name,
        {},
        decoders(client, {name}),
        FieldMap.parse(field_map),
        wanted,
        {name: column_decoder} if column_decoder is not None else None,
    )


def translated(formats: RecordFormats, topic: str, values: list[bytes]) -> list[Any]:
    out = formats.translate([topic] * len(values), values, {topic: "transfer"})
    return [orjson.loads(v) if v else out.failures[i] for i, v in enumerate(out.values)]


@pytest.fixture
def topic() -> str:
    return f"payments-{uuid.uuid4().hex[:8]}"


def test_avro_records_decode_with_each_writers_schema_as_the_schema_evolves(
    schema_registry: SchemaRegistry, topic: str
) -> None:
    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = AvroSerializer(client, avro_payment())
    currency = {"name": "currency", "type": "string", "default": "EUR"}
    v2 = AvroSerializer(client, avro_payment(currency))  # (backward compatible: a default)
    v3 = AvroSerializer(client, avro_payment(currency, amount=False))  # amount removed
    values = [
        v1(payment(1), ctx),
        v2(payment(2, currency="USD"), ctx),
        v1(payment(3), ctx),
        v3({k: v for k, v in payment(4, currency="CHF").items() if k != "amount"}, ctx),
    ]
    assert [v[1:5] for v in values[:3]] != [values[0][1:5]] * 3  # two schema ids
    formats = formats_for(schema_registry, "avro", transfer={"amount"})
    got = translated(formats, topic, values)
    assert got[:3] == [expected(1), expected(2, currency="USD"), expected(3)]
    assert got[3].category == "missing_field"
    assert "'amount' of transfer, which the queries compare" in got[3].reason
    polled = decode_messages(records(topic, values), 0, "transfer", {}, formats=formats)
    assert polled.batch.count == 3
    assert [(d.offset, d.category) for d in polled.dead_letters] == [(3, "missing_field")]
    assert polled.dead_letters[0].value == values[3]


def test_avro_polls_read_as_columns_equal_the_librarys_record_by_record(
    schema_registry: SchemaRegistry, topic: str
) -> None:
    """The column path against the library's deserializer, on what its serializer wrote: a
    poll per schema version (v1, v2 with a field added, v3 without the compared amount) and
    one of them mixed; the updates, events, field kinds and dead letters the same each time,
    and the polls of one version that every record passes taken as columns."""
    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    ctx = SerializationContext(topic, MessageField.VALUE)
    currency = {"name": "currency", "type": ["null", "string"], "default": None}
    v1 = AvroSerializer(client, avro_payment())
    v2 = AvroSerializer(client, avro_payment(currency))
    v3 = AvroSerializer(client, avro_payment(currency, amount=False))
    polls = {
        "v1": [v1(payment(n), ctx) for n in range(40)],
        "v2": [v2(payment(n, currency=["EUR", None][n % 2]), ctx) for n in range(40)],
        "v3": [v3({**payment(n, currency="CHF"), "amount": None}, ctx) for n in range(5)],
    }
    polls["mixed"] = polls["v1"][:3] + polls["v2"][:3]
    columns = formats_for(schema_registry, "avro", columns=True, transfer={"amount"})
    library = formats_for(schema_registry, "avro", transfer={"amount"})
    assert columns.columns and not library.columns
    spec = {"transfer": {"amount": "number", "currency": "string"}}
    taken = {}
    for name, values in polls.items():
        got = decode_messages(
            records(topic, values), 0, "transfer", {}, FieldTypes.of(spec), {}, columns
        )
        want = decode_messages(
            records(topic, values), 0, "transfer", {}, FieldTypes.of(spec), {}, library
        )
        same_batch(want.batch, got.batch)
        assert [(d.offset, d.reason) for d in got.dead_letters] == [
            (d.offset, d.reason) for d in want.dead_letters
        ]
        decoder = columns.columns["avro"]
        quick = decoder.decode(values, "transfer", positions, FieldTypes.of(spec), {}, 1 << 20)
        taken[name] = quick is not None
    assert taken == {"v1": True, "v2": True, "v3": False, "mixed": False}
    events = decode_messages(
        records(topic, polls["v2"]), 0, "transfer", {}, FieldTypes.of(spec), {}, columns
    ).batch.events["transfer"]
    assert events.fields["amount"].tolist()[:2] == [0.25, 100.25]
    assert events.fields["ts"].tolist()[:2] == [BOOKED_MS, BOOKED_MS + 1000]


def test_bad_avro_input_becomes_dead_letters_with_reasons(
    schema_registry: SchemaRegistry, topic: str
) -> None:
    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    ctx = SerializationContext(topic, MessageField.VALUE)
    meta = {"name": "meta", "type": ["null", {"type": "record", "name": "Meta", "fields": [
        {"name": "channel", "type": "string"}]}], "default": None}  # fmt: skip
    writer = AvroSerializer(client, avro_payment(meta))
    good = writer(payment(1, meta={"channel": "web"}), ctx)
    unknown = b"\x00" + (987_654).to_bytes(4, "big") + good[5:]
    truncated = good[:9]
    no_channel = writer(payment(2, meta=None), ctx)
    not_framed = b'{"src": "a", "dst": "b"}'
    formats = formats_for(schema_registry, "avro", {**MAP, "channel": "meta.channel"})
    values = [good, unknown, truncated, no_channel, not_framed]
    polled = decode_messages(records(topic, values), 0, "transfer", {}, formats=formats)
    assert polled.batch.count == 1
    letters = {d.offset: (d.category, d.reason) for d in polled.dead_letters}
    assert letters[1][0] == "unknown_schema" and "987654" in letters[1][1]
    assert letters[2][0] == "undecodable"
    assert letters[3] == (
        "missing_field",
        "field 'meta.channel' (mapped to 'channel') is not in the record",
    )
    assert letters[4][0] == "undecodable"
    assert translated(formats, topic, [good]) == [expected(1, channel="web")]


def test_a_registry_that_does_not_answer_is_raised(
    schema_registry: SchemaRegistry, topic: str
) -> None:
    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    good = AvroSerializer(client, avro_payment())(
        payment(1), SerializationContext(topic, MessageField.VALUE)
    )
    dead = SchemaRegistry(port=_free_port())  # never started: nothing listens there
    formats = RecordFormats(
        "avro", {}, decoders(registry_client(dead.url, {}), {"avro"}), FieldMap.parse(MAP)
    )
    with pytest.raises(RegistryUnavailable, match="did not answer"):
        decode_messages(records(topic, [good]), 0, "transfer", {}, formats=formats)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def protobuf_payment() -> Any:
    """A message class made at run time (no protoc here), as a producer's generated code is."""
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"payment_{uuid.uuid4().hex[:6]}.proto", package="bank", syntax="proto3"
    )
    proto.dependency.append("google/protobuf/timestamp.proto")
    message = proto.message_type.add(name="Payment")
    for number, (name, kind) in enumerate(
        [
            ("id", field.TYPE_STRING),
            ("from_account", field.TYPE_STRING),
            ("to_account", field.TYPE_STRING),
            ("amount", field.TYPE_DOUBLE),
            ("sequence", field.TYPE_INT64),
        ],
        start=1,
    ):
        message.field.add(name=name, number=number, type=kind, label=field.LABEL_OPTIONAL)
    message.field.add(
        name="booked_at",
        number=6,
        type=field.TYPE_MESSAGE,
        type_name=".google.protobuf.Timestamp",
        label=field.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return GetMessageClass(pool.FindMessageTypeByName("bank.Payment"))


def test_protobuf_records_decode_without_generated_code(
    schema_registry: SchemaRegistry, topic: str
) -> None:
    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    payment_type = protobuf_payment()
    writer = ProtobufSerializer(payment_type, client, {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    values = []
    for n in (1, 2):
        message = payment_type(
            id=f"tx-{n}",
            from_account=f"acct-{n}",
            to_account=f"acct-{n + 1}",
            amount=float(f"{n}00.25"),
            sequence=2**40 + n,
        )
        message.booked_at.FromMilliseconds(BOOKED_MS + n * 1000)
        values.append(writer(message, ctx))
    zero = payment_type(id="tx-0", from_account="acct-0", to_account="acct-1")
    zero.booked_at.FromMilliseconds(BOOKED_MS)
    values.append(writer(zero, ctx))  # amount and sequence 0: proto3 writes neither
    no_time = payment_type(id="tx-9", from_account="acct-9", to_account="acct-1")
    values.append(writer(no_time, ctx))  # no time: the mapped ts is missing
    formats = formats_for(schema_registry, "protobuf")
    got = translated(formats, topic, values)
    assert got[:2] == [expected(n, sequence=2**40 + n) for n in (1, 2)]
    assert got[2] == {**expected(0), "amount": 0.0, "sequence": 0}
    assert got[3].category == "missing_field" and "'booked_at'" in got[3].reason
    assert (
        decode_messages(records(topic, values), 0, "transfer", {}, formats=formats).batch.count == 3
    )


def test_json_schema_records_decode_and_are_validated(
    schema_registry: SchemaRegistry, topic: str
) -> None:
    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Payment",
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "from_account": {"type": "string"},
            "to_account": {"type": "string"},
            "booked_at": {"type": "string"},
            "amount": {"type": "number"},
        },
        "required": ["id", "from_account", "to_account"],
    }
    writer = JSONSerializer(json.dumps(schema), client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    record = {
        "id": "tx-1",
        "from_account": "acct-1",
        "to_account": "acct-2",
        "booked_at": "2026-12-02T10:15:01Z",
        "amount": 100.25,
    }
    good = writer(record, ctx)
    # a value framed with the schema's id that breaks it (amount a string): refused on reading
    invalid = good[:5] + json.dumps({**record, "amount": "lots"}).encode()
    formats = formats_for(schema_registry, "jsonschema")
    got = translated(formats, topic, [good, invalid])
    assert got[0] == {**expected(1), "ts": "2026-12-02T10:15:01Z"}
    assert got[1].category == "undecodable"
    polled = decode_messages(records(topic, [good, invalid]), 0, "transfer", {}, formats=formats)
    assert polled.batch.count == 1 and [d.offset for d in polled.dead_letters] == [1]


def delta_values() -> list[bytes]:
    """Deltas as the JSON output writes them (connectors.delta_json): a ring, its retraction
    with a cause, and an aggregate's row, with fields that first appear in the later ones."""
    ring = {
        "query": "ring",
        "epoch": 1,
        "diff": 1,
        "match": {"a": "A", "b": "B"},
        "edges": {
            "t1": {"id": "tx-1", "src": "A", "dst": "B", "amount": 5000},
            "t2": {"id": "tx-2", "src": "B", "dst": "A", "amount": 4800.5},
        },
        "match_id": "316da45834828260",
    }
    retracted = {
        **ring,
        "epoch": 2,
        "diff": -1,
        "edges": {"t1": {"id": 7, "src": "A", "dst": "B", "currency": "EUR"}},
        "cause": "expired",
    }
    group = {
        "query": "fan_in",
        "epoch": 3,
        "diff": 1,
        "match": {"b": 12},
        "values": {"count_distinct_a": 12},
        "events": ["tx-1", "tx-2"],
        "match_id": "0a",
    }
    return [orjson.dumps(d) for d in (ring, retracted, group)]


def test_the_avro_output_is_read_by_the_standard_deserializer(
    schema_registry: SchemaRegistry, topic: str
) -> None:
    encoder = AvroDeltas(registry_client(schema_registry.url, {}), topic)
    values = delta_values()
    written = encoder.encode(values[:1]) + encoder.encode(values[1:])
    reader = AvroDeserializer(SchemaRegistryClient({"url": schema_registry.url, "timeout": 30}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    back = [reader(v, ctx) for v in written]
    for got, sent in zip(back, map(orjson.loads, values), strict=True):
        assert _present(got) == sent
    versions = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30}).get_versions(
        f"{topic}-value"
    )
    assert len(versions) == 2  # widened once: currency, numeric ids, values and events
    assert back[1]["edges"]["t1"] == {
        "id": 7,
        "src": "A",
        "dst": "B",
        "amount": None,
        "currency": "EUR",
    }


def _present(delta: dict[str, Any]) -> dict[str, Any]:
    """A delta as read, without the nulls the schema adds (members and event fields that a
    row does not have)."""
    out = {k: v for k, v in delta.items() if v is not None}
    if "edges" in out:
        out["edges"] = {
            v: {n: x for n, x in e.items() if x is not None} for v, e in out["edges"].items()
        }
    return out
