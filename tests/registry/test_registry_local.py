"""A real Confluent-compatible schema registry: Apicurio Registry run by ``scripts/registry_local``.

One registry (in memory, no auth) serves the whole module; each test uses subjects of its own.
It never skips: when no registry can be had (no Java 21+, no Maven the first time), every test
fails with the reason. Schemas are read back with a fresh client, so that the answer comes from
the registry and not from the client's cache.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from scripts.registry_local import SchemaRegistry


def avro_record(name: str, *fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "sgm.test", "fields": fields})


ID = {"name": "id", "type": "string"}
AMOUNT = {"name": "amount", "type": "double"}
CURRENCY_WITH_DEFAULT = {"name": "currency", "type": "string", "default": "EUR"}
MERCHANT_REQUIRED = {"name": "merchant", "type": "string"}

PAYMENT_V1 = avro_record("Payment", ID, AMOUNT)
PAYMENT_V2 = avro_record("Payment", ID, AMOUNT, CURRENCY_WITH_DEFAULT)


@pytest.fixture
def registry(schema_registry: SchemaRegistry) -> SchemaRegistry:
    return schema_registry


@pytest.fixture
def client(registry: SchemaRegistry) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url, "timeout": 30})


def fresh(registry: SchemaRegistry) -> SchemaRegistryClient:
    """A client with empty caches: whatever it returns, the registry said."""
    return SchemaRegistryClient({"url": registry.url, "timeout": 30})


def test_url_is_the_ccompat_api(registry: SchemaRegistry) -> None:
    assert registry.running
    assert registry.url == f"http://127.0.0.1:{registry.port}/apis/ccompat/v7"
    assert registry.log_path.is_file()


def test_avro_versions_and_compatibility(
    registry: SchemaRegistry, client: SchemaRegistryClient
) -> None:
    subject = "payments-value"
    id1 = client.register_schema(subject, Schema(PAYMENT_V1, "AVRO"))

    got = fresh(registry).get_schema(id1)  # GET /schemas/ids/{id}
    assert got.schema_type == "AVRO"
    assert json.loads(got.schema_str or "") == json.loads(PAYMENT_V1)
    latest = fresh(registry).get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (1, id1)
    # Registering the same schema again is idempotent.
    assert client.register_schema(subject, Schema(PAYMENT_V1, "AVRO")) == id1

    client.set_compatibility(subject, "BACKWARD")
    assert fresh(registry).get_compatibility(subject) == "BACKWARD"

    # A new field with a default: backward compatible, a new version with a new id.
    assert client.test_compatibility(subject, Schema(PAYMENT_V2, "AVRO")) is True
    id2 = client.register_schema(subject, Schema(PAYMENT_V2, "AVRO"))
    assert id2 != id1
    reader = fresh(registry)
    assert reader.get_versions(subject) == [1, 2]
    latest = reader.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, id2)
    assert reader.lookup_schema(subject, Schema(PAYMENT_V1, "AVRO")).version == 1

    # A new field without a default: a v2 reader cannot read v1 data, BACKWARD refuses it.
    breaking = Schema(avro_record("Payment", ID, AMOUNT, CURRENCY_WITH_DEFAULT, MERCHANT_REQUIRED))
    assert client.test_compatibility(subject, breaking) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, breaking)
    assert refused.value.http_status_code == 409
    assert fresh(registry).get_versions(subject) == [1, 2]


def test_removing_a_field_without_default(client: SchemaRegistryClient) -> None:
    """Removing a field is BACKWARD compatible (the new reader ignores it) but not FORWARD
    compatible when the field has no default (an old reader needs it), as in Confluent's."""
    removed = Schema(avro_record("Refund", ID), "AVRO")
    for subject, level, compatible in (
        ("refunds-backward-value", "BACKWARD", True),
        ("refunds-forward-value", "FORWARD", False),
        ("refunds-full-value", "FULL", False),
    ):
        client.register_schema(subject, Schema(avro_record("Refund", ID, AMOUNT), "AVRO"))
        client.set_compatibility(subject, level)
        assert client.test_compatibility(subject, removed) is compatible, level
        if not compatible:
            with pytest.raises(SchemaRegistryError) as refused:
                client.register_schema(subject, removed)
            assert refused.value.http_status_code == 409, level


def test_global_compatibility_is_backward(registry: SchemaRegistry) -> None:
    """Confluent's default, which SchemaRegistry sets (Apicurio's own default is NONE)."""
    assert fresh(registry).get_compatibility() == "BACKWARD"


def test_avro_serializer_round_trip(registry: SchemaRegistry, client: SchemaRegistryClient) -> None:
    serializer = AvroSerializer(client, PAYMENT_V2)  # auto-registers orders-value
    ctx = SerializationContext("orders", MessageField.VALUE)
    record = {"id": "p-1", "amount": 12.5, "currency": "CHF"}
    data = serializer(record, ctx)
    assert data is not None
    schema_id = fresh(registry).get_latest_version("orders-value").schema_id
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == schema_id

    deserializer = AvroDeserializer(fresh(registry))  # the writer's schema from the registry
    assert deserializer(data, ctx) == record


def test_schema_references(registry: SchemaRegistry, client: SchemaRegistryClient) -> None:
    address = avro_record("Address", {"name": "city", "type": "string"})
    client.register_schema("sgm.test.Address", Schema(address, "AVRO"))
    customer = avro_record("Customer", {"name": "address", "type": "sgm.test.Address"})
    reference = SchemaReference("sgm.test.Address", "sgm.test.Address", 1)
    schema_id = client.register_schema("customers-value", Schema(customer, "AVRO", [reference]))
    got = fresh(registry).get_schema(schema_id)
    assert [(r.name, r.subject, r.version) for r in got.references or []] == [
        ("sgm.test.Address", "sgm.test.Address", 1)
    ]


def test_protobuf_and_json_schema(registry: SchemaRegistry, client: SchemaRegistryClient) -> None:
    proto = 'syntax = "proto3";\npackage sgm.test;\n\nmessage Ping {\n  string id = 1;\n}\n'
    json_schema = json.dumps(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
        }
    )
    for subject, schema in (
        ("pings-value", Schema(proto, "PROTOBUF")),
        ("documents-value", Schema(json_schema, "JSON")),
    ):
        schema_id = client.register_schema(subject, schema)
        got = fresh(registry).get_schema(schema_id)
        assert got.schema_type == schema.schema_type
        latest = fresh(registry).get_latest_version(subject)
        assert (latest.version, latest.schema_id) == (1, schema_id)
