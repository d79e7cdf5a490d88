"""Records of schema-registry formats made JSON records: the field map, logical types, failures,
and the Avro schema of the output widened as it goes (no registry needed here; the round trips
through a real registry are in tests/registry)."""

from __future__ import annotations

import datetime as dt
import decimal
import io
from typing import Any

import fastavro
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.avro_output import DeltaSchema
from connectors.kafka_records import Records, decode_messages
from connectors.registry_records import (
    FieldMap,
    RecordFormats,
    RegistryUnavailable,
    UnknownSchema,
    plain,
)


def test_the_field_map_moves_renames_and_reaches_nested_records() -> None:
    fields = FieldMap.parse({"src": "from_account", "dst": "to.account", "ts": "booked_at"})
    decoded = {
        "from_account": "A",
        "to": {"account": "B", "bank": "X"},
        "booked_at": dt.datetime(2026, 12, 2, 10, 15, tzinfo=dt.UTC),
        "amount": decimal.Decimal("1500.50"),
        "note": None,
        "tags": ["a"],
    }
    assert fields.apply(decoded) == {
        "src": "A",
        "dst": "B",
        "ts": 1_796_206_500_000,  # 2026-12-02T10:15:00Z
        "amount": 1500.5,
    }
    swapped = FieldMap.parse({"src": "dst", "dst": "src"}).apply({"src": 1, "dst": 2, "x": 3})
    assert swapped == {"src": 2, "dst": 1, "x": 3}
    missing = fields.apply({"from_account": "A", "booked_at": 0})
    assert missing == "field 'to.account' (mapped to 'dst') is not in the record"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (dt.datetime(1970, 1, 1, 0, 0, 1, 500, tzinfo=dt.UTC), 1000.5),
        (dt.datetime(1970, 1, 2), 86_400_000),
        (dt.date(1970, 1, 3), 2 * 86_400_000),
        (decimal.Decimal("12.00"), 12),
        (decimal.Decimal("-0.25"), -0.25),
        ("x", "x"),
        (True, True),
    ],
)
def test_logical_types_become_what_a_json_record_holds(value: object, expected: object) -> None:
    assert plain(value) == expected
    assert type(plain(value)) is type(expected)


def test_bad_specs_of_the_field_map_are_refused() -> None:
    with pytest.raises(ValueError, match="dotted path"):
        FieldMap.parse({"src": "a..b"})
    with pytest.raises(ValueError, match="one of"):
        RecordFormats("xml", {}, {}, FieldMap())


def _records(values: list[bytes], topic: str = "payments") -> Records:
    n = len(values)
    return Records([topic] * n, [0] * n, list(range(n)), values, [(1, 0)] * n)


def _decoder(value: bytes) -> Any:
    """A stand-in for a format (the tests of tests/registry use the real ones): the value
    after a marker byte is JSON; ``U`` is an unknown schema, ``D`` a registry that is down."""
    marker, body = value[:1], value[1:]
    if marker == b"U":
        raise UnknownSchema("schema id 99 is not in the registry")
    if marker == b"D":
        raise RegistryUnavailable("the schema registry did not answer: refused")
    if marker != b"\0":
        raise ValueError("Invalid magic byte")
    return orjson.loads(body)


def test_a_poll_of_a_registry_format_decodes_maps_and_dead_letters_with_reasons() -> None:
    formats = RecordFormats(
        "avro",
        {"accounts": "json"},
        {"avro": _decoder},
        FieldMap.parse({"src": "from", "dst": "to"}),
        compared={"e": frozenset({"amount"})},
    )
    values = [
        b"\0" + orjson.dumps({"from": 1, "to": 2, "amount": 5}),
        b"U...",
        b"{not framed}",
        b"\0" + orjson.dumps({"from": 1, "amount": 5}),
        b"\0" + orjson.dumps({"from": 2, "to": 3}),
        b"\0" + orjson.dumps({"from": 3, "to": 1, "amount": 7}),
        b"\0" + orjson.dumps({"op": "delete", "from": 3, "to": 1}),  # (a delete: no amount)
    ]
    polled = decode_messages(_records(values), 0, "e", {}, formats=formats)
    assert polled.batch.count == 3
    letters = {d.offset: (d.category, d.reason) for d in polled.dead_letters}
    assert sorted(letters) == [1, 2, 3, 4]
    assert letters[1] == ("unknown_schema", "schema id 99 is not in the registry")
    assert letters[2] == ("undecodable", "does not decode: Invalid magic byte")
    assert letters[3][0] == "missing_field" and "'to'" in letters[3][1]
    assert letters[4][0] == "missing_field" and "'amount' of e" in letters[4][1]
    assert [d.value for d in polled.dead_letters if d.offset == 1] == [b"U..."]
    json_topic = decode_messages(
        _records([b'{"src": 1, "dst": 2}'], "accounts"), 0, "e", {}, formats=formats
    )
    assert json_topic.batch.count == 1 and not json_topic.dead_letters


def test_a_registry_that_does_not_answer_is_raised_not_dead_lettered() -> None:
    formats = RecordFormats("avro", {}, {"avro": _decoder}, FieldMap())
    with pytest.raises(RegistryUnavailable):
        decode_messages(_records([b"\0{}", b"D"]), 0, "e", {}, formats=formats)


def test_a_tombstone_of_a_table_passes_through_untranslated() -> None:
    formats = RecordFormats("avro", {}, {"avro": _decoder}, FieldMap())
    translated = formats.translate(
        ["t"], [b'{"op":"delete","key":"a"}'], {"t": "account"}, b'{"op"'
    )
    assert translated.values == [b'{"op":"delete","key":"a"}'] and not translated.failures


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=5),
)
ids = st.one_of(st.integers(0, 10**6), st.text(min_size=1, max_size=4))
events = st.fixed_dictionaries(
    {"id": ids, "src": ids, "dst": ids},
    optional={"amount": scalars, "currency": scalars, "flag": scalars},
)
deltas = st.fixed_dictionaries(
    {
        "query": st.text(max_size=5),
        "epoch": st.integers(0, 10**9),
        "diff": st.sampled_from([1, -1]),
        "match": st.dictionaries(st.sampled_from("abc"), ids, min_size=1),
    },
    optional={
        "edges": st.dictionaries(st.sampled_from(["t1", "t2"]), events, min_size=1),
        "cause": st.sampled_from(["expired", "deleted", "updated"]),
        "match_id": st.text(max_size=16),
        "values": st.dictionaries(st.sampled_from(["count", "sum_amount"]), scalars),
        "events": st.lists(ids, max_size=3),
    },
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(deltas, min_size=1, max_size=5), min_size=1, max_size=4))
def test_the_output_schema_reads_back_every_delta_as_written(chunks: list[list[Any]]) -> None:
    """Chunk by chunk the schema widens; each chunk's deltas, written with it, read back as
    they were (an event's missing field as null), and the older chunks' schemas are read
    by the newer ones (backward compatible: what a registry checks)."""
    schema = DeltaSchema()
    at_once = DeltaSchema()
    written: list[tuple[Any, list[Any]]] = []
    for chunk in chunks:
        for delta in chunk:
            schema.add(delta)
        at_once.add_all(chunk)
        assert at_once.avro() == schema.avro()  # (a chunk at once: the same as one by one)
        assert DeltaSchema.of(schema.avro()).avro() == schema.avro()  # (read back, restarted)
        parsed = fastavro.parse_schema(schema.avro())
        for old_schema, old_deltas in written:
            for delta in old_deltas:
                buffer = io.BytesIO()
                fastavro.schemaless_writer(buffer, old_schema, _filled(delta, old_schema))
                buffer.seek(0)
                fastavro.schemaless_reader(buffer, old_schema, parsed)
        for delta in chunk:
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, parsed, _filled(delta, parsed))
            buffer.seek(0)
            back = fastavro.schemaless_reader(buffer, parsed)
            assert _present(back) == _present(_filled(delta, parsed))
        written.append((parsed, chunk))


def _filled(delta: dict[str, Any], schema: Any) -> dict[str, Any]:
    names = _event_fields(schema)
    out = dict(delta)
    if out.get("edges"):
        out["edges"] = {v: {n: e.get(n) for n in names} for v, e in out["edges"].items()}
    return out


def _event_fields(schema: Any) -> list[str]:
    for entry in schema["fields"]:
        if entry["name"] == "edges":
            return [f["name"] for f in entry["type"][1]["values"]["fields"]]
    return []


def _present(record: dict[str, Any]) -> dict[str, Any]:
    """A record without its null members (a reader fills what a writer left out with null)."""
    return {k: v for k, v in record.items() if v is not None}
