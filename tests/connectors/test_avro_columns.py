"""Avro polls decoded as columns (polars) against the per-record path (fastavro, as the library's
``AvroDeserializer`` reads each value): on random schemas and records, the same updates, events,
field kinds and dead letters, and the column path taking every poll it should. (No registry here:
the round trips through a real one, on both paths, are in tests/registry.)"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import math
from collections.abc import Sequence
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from connectors.avro_columns import AvroColumns
from connectors.events import FieldTypes
from connectors.kafka_records import MAX_RECORD_BYTES, Records, decode_messages
from connectors.registry_records import FieldMap, RecordFormats, UnknownSchema
from tests.connectors.test_json_arrow import learned, same_decoded
from tests.connectors.test_kafka_records import same_batch

pytest.importorskip("polars")

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class Registry:
    """Writer schemas by id, as a registry client's cache holds them."""

    def __init__(self) -> None:
        self.schemas: dict[int, str] = {}
        self.parsed: dict[int, Any] = {}

    def add(self, schema: dict[str, Any]) -> int:
        schema_id = len(self.schemas) + 1
        self.schemas[schema_id] = json.dumps(schema)
        self.parsed[schema_id] = fastavro.parse_schema(schema)
        return schema_id

    def schema_of(self, schema_id: int) -> str:
        if schema_id not in self.schemas:
            raise UnknownSchema(f"schema id {schema_id} is not in the registry")
        return self.schemas[schema_id]

    def frame(self, schema_id: int, record: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.parsed[schema_id], record)
        return b"\0" + schema_id.to_bytes(4, "big") + out.getvalue()

    def read(self, value: bytes) -> Any:
        """The per-record path's decoder: the writer's schema by the value's id, fastavro."""
        if value[:1] != b"\0" or len(value) < 5:
            raise ValueError("Invalid magic byte")
        schema_id = int.from_bytes(value[1:5], "big")
        self.schema_of(schema_id)
        return fastavro.schemaless_reader(io.BytesIO(value[5:]), self.parsed[schema_id], None)


def formats(
    registry: Registry,
    field_map: FieldMap,
    compared: dict[str, frozenset[str]],
    columns: bool,
) -> RecordFormats:
    decoder = AvroColumns(registry.schema_of, field_map, compared)
    return RecordFormats(
        "avro",
        {},
        {"avro": registry.read},
        field_map,
        compared,
        {"avro": decoder} if columns else None,
    )


def positions(rows: Sequence[int]) -> list[str]:
    """The identities of events without an id: their rows."""
    return [f"row {r}" for r in rows]


def records(values: list[bytes]) -> Records:
    n = len(values)
    return Records(["payments"] * n, [0] * n, list(range(n)), values, [(1, 0)] * n)


# Random schemas and their records ----------------------------------------------------------------

NULLABLE = "nullable"


def kind_of(field: dict[str, Any]) -> Any:
    kind = field["type"]
    return kind[1] if isinstance(kind, list) else kind


@st.composite
def schemas(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, str]]:
    """A payment record's schema, and the field map that reads it."""
    fields: list[dict[str, Any]] = []
    mapping: dict[str, str] = {}
    if draw(st.booleans()):
        fields.append({"name": "op", "type": "string"})
    relation = draw(st.sampled_from(["none", "string", "enum"]))
    if relation == "string":
        fields.append({"name": "relation", "type": "string"})
    elif relation == "enum":
        enum = {"type": "enum", "name": "Relation", "symbols": ["transfer", "pays"]}
        fields.append({"name": "relation", "type": enum})
    id_kind = draw(st.sampled_from(["none", "string", "long", NULLABLE]))
    if id_kind != "none":
        kind: Any = ["null", "string"] if id_kind == NULLABLE else id_kind
        fields.append({"name": "id", "type": kind})
    ends = draw(st.sampled_from(["long", "string", NULLABLE, "nested"]))
    if ends == "nested":
        party = {
            "type": "record",
            "name": "Parties",
            "fields": [{"name": "from", "type": "long"}, {"name": "to", "type": "long"}],
        }
        fields.append({"name": "parties", "type": party})
        mapping |= {"src": "parties.from", "dst": "parties.to"}
    else:
        kind = ["null", "long"] if ends == NULLABLE else ends
        fields += [{"name": "src", "type": kind}, {"name": "dst", "type": kind}]
    ts = draw(st.sampled_from(["none", "long", "timestamp-millis", "timestamp-micros", "date"]))
    if ts != "none":
        name = draw(st.sampled_from(["ts", "booked_at"]))
        if name != "ts":
            mapping["ts"] = name
        if ts == "long":
            fields.append({"name": name, "type": "long"})
        else:
            base = "int" if ts == "date" else "long"
            fields.append({"name": name, "type": {"type": base, "logicalType": ts}})
    amount = draw(st.sampled_from(["none", "double", "float", "int", "decimal", NULLABLE]))
    if amount == "decimal":
        fields.append(
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
            }
        )
    elif amount == NULLABLE:
        fields.append({"name": "amount", "type": ["null", "double"]})
    elif amount != "none":
        fields.append({"name": "amount", "type": amount})
    channel = draw(st.sampled_from(["none", "string", "enum", NULLABLE]))
    if channel == "enum":
        kinds = {"type": "enum", "name": "Channel", "symbols": ["web", "app", "atm"]}
        fields.append({"name": "channel", "type": kinds})
    elif channel != "none":
        fields.append(
            {"name": "channel", "type": ["null", "string"] if channel == NULLABLE else channel}
        )
    if draw(st.booleans()):
        fields.append({"name": "flag", "type": "boolean"})
    if draw(st.booleans()):
        fields.append({"name": "blob", "type": "bytes"})
    if draw(st.booleans()):
        fields.append({"name": "tags", "type": {"type": "array", "items": "string"}})
    fields = draw(st.permutations(fields))
    return {"type": "record", "name": "Payment", "namespace": "bank", "fields": fields}, mapping


def value_of(draw: st.DrawFn, name: str, kind: Any, nullable: bool) -> Any:
    if nullable and draw(st.integers(0, 9)) == 0:
        return None
    if isinstance(kind, dict):
        logical = kind.get("logicalType")
        if logical == "decimal":
            cents = draw(st.integers(-(10**11), 10**11))
            return decimal.Decimal(cents).scaleb(-2)
        if logical == "date":
            return dt.date(1970, 1, 1) + dt.timedelta(days=draw(st.integers(0, 40_000)))
        if logical in ("timestamp-millis", "timestamp-micros"):
            micros = draw(st.integers(-(10**15), 4 * 10**15))
            if logical == "timestamp-millis":
                micros -= micros % 1000
            return EPOCH + dt.timedelta(microseconds=micros)
        if kind["type"] == "enum":
            return draw(st.sampled_from(kind["symbols"]))
        if kind["type"] == "record":
            return {f["name"]: draw(st.integers(0, 30)) for f in kind["fields"]}
        if kind["type"] == "array":
            return draw(st.lists(st.text(max_size=3), max_size=2))
    if name == "op":
        return draw(st.sampled_from(["insert", "insert", "insert", "delete"]))
    if name == "relation":
        return draw(st.sampled_from(["transfer", "pays"]))
    if kind == "string":
        return draw(st.text(min_size=1, max_size=4))
    if kind in ("long", "int"):
        top = 2**31 - 1 if kind == "int" else 2**40
        return draw(st.integers(0 if name in ("src", "dst", "id") else -top, top))
    if kind == "double":
        special = st.sampled_from([math.nan, math.inf, -math.inf, -0.0])
        return draw(st.floats(width=64) if draw(st.integers(0, 9)) else special)
    if kind == "float":
        return draw(st.floats(allow_nan=False, allow_infinity=False, width=32))
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "bytes":
        return draw(st.binary(max_size=3))
    raise AssertionError(kind)


@st.composite
def payments(draw: st.DrawFn, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        f["name"]: value_of(draw, f["name"], kind_of(f), isinstance(f["type"], list))
        for f in schema["fields"]
    }


def clean(schema: dict[str, Any], rows: list[dict[str, Any]], compared: frozenset[str]) -> bool:
    """Whether a poll of ``rows`` is one the column path must take: no array, no null where a
    record would be a dead letter, no NaN where a field is compared, every compared field
    there."""
    names = {f["name"] for f in schema["fields"]}
    if "tags" in names:
        return False  # (an array's length does not follow from its values: not measurable)
    for row in rows:
        delete = row.get("op") == "delete"
        for name in ("src", "dst", "amount"):
            if name in row and row[name] is None and (name != "amount" or compared):
                if name == "amount" and delete:
                    continue  # (a delete needs no compared field)
                return False
        amount = row.get("amount")
        if isinstance(amount, float) and not math.isfinite(amount) and compared:
            return False
    return compared <= names


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_poll_decodes_as_columns_exactly_as_record_by_record(data: st.DataObject) -> None:
    schema, mapping = data.draw(schemas())
    rows = data.draw(st.lists(payments(schema), min_size=1, max_size=12))
    events = data.draw(st.booleans())
    compared = frozenset({"amount"}) if events and data.draw(st.booleans()) else frozenset()
    spec = {"transfer": {"amount": "number"} if compared else {}} if events else None
    registry = Registry()
    schema_id = registry.add(schema)
    values = [registry.frame(schema_id, row) for row in rows]
    field_map = FieldMap.parse(mapping)
    wanted = {"transfer": compared} if compared else {}

    def poll(columns: bool) -> tuple[Any, Any]:
        types = None if spec is None else FieldTypes.of(spec)
        polled = decode_messages(
            records(values),
            0,
            "transfer",
            {},
            types,
            {},
            formats(registry, field_map, wanted, columns),
        )
        return polled, types

    slow, slow_types = poll(False)
    fast, fast_types = poll(True)
    same_batch(slow.batch, fast.batch)
    assert learned(fast_types) == learned(slow_types)
    letters = [(d.offset, d.category, d.reason) for d in slow.dead_letters]
    assert sorted((d.offset, d.category, d.reason) for d in fast.dead_letters) == sorted(letters)
    took = AvroColumns(registry.schema_of, field_map, wanted).decode(
        values,
        "transfer",
        positions,
        None if spec is None else FieldTypes.of(spec),
        {},
        MAX_RECORD_BYTES,
    )
    event("decoded as columns" if took is not None else "decoded record by record")
    if clean(schema, rows, compared):
        assert took is not None, "the column path refused a poll it should take"


def test_several_schema_ids_in_a_poll_are_read_record_by_record() -> None:
    """A new version mid-stream: the poll is the library's; the next, of one id, columns."""
    registry = Registry()
    fields = [{"name": "src", "type": "long"}, {"name": "dst", "type": "long"}]
    first = registry.add({"type": "record", "name": "E", "fields": fields})
    second = registry.add(
        {"type": "record", "name": "E", "fields": [*fields, {"name": "amount", "type": "double"}]}
    )
    values = [registry.frame(first, {"src": 1, "dst": 2})]
    values.append(registry.frame(second, {"src": 2, "dst": 3, "amount": 1.5}))
    columns = AvroColumns(registry.schema_of, FieldMap(), {})
    spec = FieldTypes.of({"e": {}})
    decode = lambda v: columns.decode(v, "e", positions, spec, {}, 1 << 20)  # noqa: E731
    assert decode(values) is None
    took = decode(values[1:])
    assert took is not None
    assert list(took.events["e"].fields) == ["amount"]
    assert took.events["e"].fields["amount"].tolist() == [1.5]


@pytest.mark.parametrize(
    ("field", "why"),
    [
        ({"name": "x", "type": ["null", "long", "string"]}, "a union polars does not read"),
        ({"name": "x", "type": {"type": "string", "logicalType": "uuid"}}, "uuid"),
        ({"name": "x", "type": {"type": "int", "logicalType": "time-millis"}}, "a time of day"),
    ],
)
def test_schemas_this_path_does_not_read_are_read_record_by_record(
    field: dict[str, Any], why: str
) -> None:
    registry = Registry()
    fields = [{"name": "src", "type": "long"}, {"name": "dst", "type": "long"}, field]
    schema_id = registry.add({"type": "record", "name": "E", "fields": fields})
    value = {"x": None} if "null" in field["type"] else {}
    record = {"src": 1, "dst": 2, **value}
    if not value:
        kind = field["type"]["logicalType"]
        record["x"] = "0b6c3a0e-3f8e-4a4e-9d1c-6c1b2a3b4c5d" if kind == "uuid" else dt.time(1)
    columns = AvroColumns(registry.schema_of, FieldMap(), {})
    got = columns.decode([registry.frame(schema_id, record)], "e", positions, None, {}, 1 << 20)
    assert got is None, why
    assert columns.writers[schema_id] is None  # (remembered: not tried again per poll)


def test_values_not_framed_or_of_an_unknown_schema_are_left_to_the_library() -> None:
    registry = Registry()
    fields = [{"name": "src", "type": "long"}, {"name": "dst", "type": "long"}]
    schema_id = registry.add({"type": "record", "name": "E", "fields": fields})
    good = registry.frame(schema_id, {"src": 1, "dst": 2})
    columns = AvroColumns(registry.schema_of, FieldMap(), {})
    for values in ([good, b"{not framed}"], [good, b"\0\0\0\0\x09" + good[5:]], [b"\0\0"]):
        assert columns.decode(values, "e", positions, None, {}, 1 << 20) is None
    assert columns.decode([good], "e", positions, None, {}, 1 << 20) is not None
    assert columns.decode([good[:6]], "e", positions, None, {}, 1 << 20) is None  # (cut short)


def test_a_poll_as_columns_and_as_records_through_decode_messages_agree_on_dead_letters() -> None:
    """A null src is the per-record path's dead letter: the whole poll goes that way."""
    registry = Registry()
    fields = [{"name": "src", "type": ["null", "long"]}, {"name": "dst", "type": "long"}]
    schema_id = registry.add({"type": "record", "name": "E", "fields": fields})
    values = [registry.frame(schema_id, {"src": s, "dst": 2}) for s in (1, None, 3)]
    got = decode_messages(
        records(values), 0, "e", {}, None, {}, formats(registry, FieldMap(), {}, True)
    )
    reference = decode_messages(
        records(values), 0, "e", {}, None, {}, formats(registry, FieldMap(), {}, False)
    )
    same_batch(reference.batch, got.batch)
    assert [d.offset for d in got.dead_letters] == [d.offset for d in reference.dead_letters] == [1]
    same = AvroColumns(registry.schema_of, FieldMap(), {}).decode(
        values[::2], "e", positions, None, {}, 1 << 20
    )
    assert same is not None
    reference_two = decode_messages(
        records(values[::2]), 0, "e", {}, None, {}, formats(registry, FieldMap(), {}, False)
    )
    assert same.batch(0).count == reference_two.batch.count == 2
    same_decoded(same, same)


def test_a_value_with_a_byte_too_many_or_too_few_never_shifts_the_others() -> None:
    """Read as one block, a trailing byte in a value of two longs would read the next record as
    (3, 3): each record's length, computed back from its values, must be its value's."""
    registry = Registry()
    fields = [{"name": "src", "type": "long"}, {"name": "dst", "type": "long"}]
    schema_id = registry.add({"type": "record", "name": "E", "fields": fields})
    a, b = (registry.frame(schema_id, {"src": s, "dst": s + 1}) for s in (1, 3))
    c = registry.frame(schema_id, {"src": 5, "dst": 6})
    columns = AvroColumns(registry.schema_of, FieldMap(), {})
    assert columns.decode([a, b, c], "e", positions, None, {}, 1 << 20) is not None
    for values in ([a + b"\x06", b], [a[:-1], b, c], [a, b + b"\x00\x02", c]):
        assert columns.decode(values, "e", positions, None, {}, 1 << 20) is None
        got = decode_messages(
            records(values), 0, "e", {}, None, {}, formats(registry, FieldMap(), {}, True)
        )
        want = decode_messages(
            records(values), 0, "e", {}, None, {}, formats(registry, FieldMap(), {}, False)
        )
        same_batch(want.batch, got.batch)
        assert [d.offset for d in got.dead_letters] == [d.offset for d in want.dead_letters]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_damaged_value_in_a_poll_is_never_read_as_columns_differently(
    data: st.DataObject,
) -> None:
    """One value of a poll cut short or given extra bytes: the poll decodes as the library
    decodes it record by record, whichever path takes it."""
    schema, mapping = data.draw(schemas())
    rows = data.draw(st.lists(payments(schema), min_size=2, max_size=8))
    registry = Registry()
    schema_id = registry.add(schema)
    values = [registry.frame(schema_id, row) for row in rows]
    at = data.draw(st.integers(0, len(values) - 1))
    if data.draw(st.booleans()) and len(values[at]) > 6:
        values[at] = values[at][: data.draw(st.integers(5, len(values[at]) - 1))]
    else:
        values[at] += data.draw(st.binary(min_size=1, max_size=3))
    field_map = FieldMap.parse(mapping)

    def poll(columns: bool) -> Any:
        return decode_messages(
            records(values), 0, "transfer", {}, None, {}, formats(registry, field_map, {}, columns)
        )

    got, want = poll(True), poll(False)
    same_batch(want.batch, got.batch)
    # (the category: fastavro's message names the address of its stream, different each time)
    assert [(d.offset, d.category) for d in got.dead_letters] == [
        (d.offset, d.category) for d in want.dead_letters
    ]
