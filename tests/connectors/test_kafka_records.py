"""Batch decoding of Kafka records against the per-record decoding it replaced.

Random batches of records from several topics and partitions (edge records, tuples of any
arity, a relation's tuples of several lengths, events with ids, fields and times, deletes by id,
malformed JSON, wrong types, unknown and invalid relations, missing fields, oversized values),
with some relations' arities known beforehand, are decoded by
:func:`~connectors.kafka_records.decode_messages` (whole, and in two chunks merged as a poll
merges them) and by the scale-out worker's ``decode_epoch``; the results must be exactly what
the old per-record ``take_message`` made of them (``kafka_reference.py``): the same updates with
the same sequence numbers and column types, the same events and fields, the same dead letters,
positions, counts, timestamps, event times, late-event dead letters, and the same field kinds
and arities learned; neither may raise. Messages are fakes with ``confluent_kafka.Message``'s
accessors: this is a unit test of decoding; the Kafka integration tests run against a real
broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np
import orjson
import pytest
from confluent_kafka import KafkaError, KafkaException, Message
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.events import FieldTypes
from connectors.kafka_records import (
    MAX_RECORD_BYTES,
    Polled,
    decode_messages,
    merge_polled,
    message_columns,
)
from core.records import INT64_MAX, UpdateBatch
from monitor.service.cluster.epoch_input import decode_epoch
from monitor.service.settings import Settings
from tests.connectors.kafka_reference import ReferencePolled, reference_epoch, reference_poll

DEFAULT = "e"
TOPIC_RELATIONS = {"t2": "transfer"}


def kafka_message(
    topic: str,
    partition: int,
    offset: int,
    value: bytes | None,
    timestamp: tuple[int, int],
    error: KafkaError | None = None,
) -> Message:
    """A real ``confluent_kafka.Message`` as a consumer would return it (the decoding takes
    columns out of messages through ``Message``'s own methods, so no stand-in will do)."""
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        value=value,
        timestamp=timestamp,
        error=error,
    )


# Records ---------------------------------------------------------------------------------------

VALID_IDS = st.one_of(
    st.integers(-5, 5),
    st.integers(INT64_MAX - 1, INT64_MAX),
    st.sampled_from(["a", "b", "x y", "", "é", "7"]),
)
ANY_IDS = st.one_of(
    VALID_IDS,
    st.integers(INT64_MAX - 1, 2**64 - 1),
    st.just("x" * 1025),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
    st.just([1]),
    st.just({"a": 1}),
)
RELATIONS = st.sampled_from(["e", "f", "transfer", "login", "bad name", "r3", 3, None, ["e"]])
OPS = st.sampled_from(["insert", "insert", "delete", "upsert", 1, None])
VALID_TIMES = st.one_of(
    st.integers(0, 2_000_000_000_000),
    st.floats(0, 2e12),
    st.sampled_from(["2026-12-02T10:15:00Z", "2026-12-02T10:15:00.5+01:00"]),
)
ANY_TIMES = st.one_of(
    VALID_TIMES,
    st.integers(0, 2_000_000_000_000),
    st.integers(10**17, 2**64 - 1),
    st.sampled_from(["2026-12-02T10:15:00", "yesterday", True, 1e300, -1e300, None, [1]]),
)


@st.composite
def record(draw: st.DrawFn, mode: str) -> bytes:
    """One record value: valid records of every kind (``clean``), records whose fields may be
    wrong (``fields``), tuples and edges of a few relations with valid ids and tuples of any
    length (``arities``), or anything."""
    if mode == "arities":
        return draw(mixed_arity())
    clean = mode == "clean"
    ids = ANY_IDS if mode == "anything" else VALID_IDS
    kind = draw(st.sampled_from(["edge", "event", "event", "delete", "tuple", "raw"]))
    pairs: list[tuple[str, Any]] = []
    if kind == "raw":
        if mode != "anything":
            kind = "edge"
        else:
            return draw(
                st.sampled_from(
                    [
                        b"{",
                        b"",
                        b"   ",
                        b"# a comment",
                        b"nul",
                        b"\xff\xfe",
                        b"[1, 2]",
                        b'"text"',
                        b"12",
                        b'{"src": 1, "dst": 2}{',
                        b"{" + b" " * MAX_RECORD_BYTES + b"}",
                    ]
                )
            )
    if kind == "edge":
        if draw(st.booleans()):
            pairs.append(("op", draw(st.sampled_from(["insert", "delete"]) if clean else OPS)))
        if draw(st.booleans()):
            relation = draw(st.sampled_from(["e", "f"]) if clean else RELATIONS)
            pairs.append(("relation", relation))
        for key in ("src", "dst"):
            if clean or draw(st.integers(0, 9)):
                pairs.append((key, draw(ids)))
        if not clean and not draw(st.integers(0, 9)):
            pairs.append(("tuple", [1, 2]))
        if not draw(st.integers(0, 9)):
            pairs.append(("note", "extra keys are allowed"))
    elif kind == "tuple":
        relation = draw(st.sampled_from(["r3", "e"]))
        pairs.append(("relation", relation))
        size = {"r3": 3, "e": 2}[relation] if clean else draw(st.integers(0, 3))
        pairs.append(("tuple", draw(st.lists(ids, min_size=size, max_size=size))))
        if draw(st.booleans()):
            pairs.append(("op", draw(st.sampled_from(["insert", "delete"]))))
    else:
        if draw(st.booleans()):
            pairs.append(("relation", draw(st.sampled_from(["transfer", "login"]))))
        pairs.append(("op", "delete" if kind == "delete" else "insert"))
        if draw(st.integers(0, 3)):
            pairs.append(("id", draw(st.one_of(st.sampled_from(["tx-1", "tx-2", "tx-3"]), ids))))
        if kind == "event":
            for key in ("src", "dst"):
                if mode != "anything" or draw(st.integers(0, 9)):
                    pairs.append((key, draw(ids)))
            fields = {
                "amount": st.floats(0, 1e6) | st.integers(0, 10**6),
                "channel": st.sampled_from(["wire", "card", "x" * 4097 if not clean else "cash"]),
                "ts": VALID_TIMES if clean else ANY_TIMES,
                "flag": st.booleans(),
            }
            for name, values in fields.items():
                if draw(st.booleans()):
                    wrong = not clean and not draw(st.integers(0, 5))
                    pairs.append((name, draw(ANY_IDS if wrong else values | st.none())))
    order = draw(st.permutations(range(len(pairs))))
    return orjson.dumps({pairs[i][0]: pairs[i][1] for i in order})


@st.composite
def mixed_arity(draw: st.DrawFn) -> bytes:
    """A valid tuple or edge record of a relation among a few, its tuple of one to four ids,
    or now and then a ``tuple`` that is not an array of ids."""
    pairs: dict[str, Any] = {}
    if draw(st.integers(0, 3)):
        pairs["relation"] = draw(st.sampled_from(["e", "f", "r3", "transfer"]))
    if draw(st.booleans()):
        pairs["op"] = draw(st.sampled_from(["insert", "delete"]))
    shape = draw(st.sampled_from(["tuple", "tuple", "tuple", "edge", "odd"]))
    if shape == "edge":
        pairs["src"], pairs["dst"] = draw(VALID_IDS), draw(VALID_IDS)
    elif shape == "tuple":
        pairs["tuple"] = draw(st.lists(VALID_IDS, min_size=1, max_size=4))
    else:
        pairs["tuple"] = draw(st.sampled_from([[], 5, "ab", None, {"a": 1}, [[1], 2], [True]]))
    return orjson.dumps(pairs)


@st.composite
def messages(draw: st.DrawFn) -> list[Message]:
    """Records of topics ``t1`` (default relation ``e``) and ``t2`` (``transfer``) over two
    partitions each, offsets increasing per partition."""
    mode = draw(st.sampled_from(["clean", "fields", "arities", "anything"]))
    values = draw(st.lists(record(mode), max_size=40))
    next_offset: dict[tuple[str, int], int] = {}
    out = []
    for value in values:
        topic = draw(st.sampled_from(["t1", "t2"]))
        partition = draw(st.integers(0, 1))
        offset = next_offset.get((topic, partition), draw(st.integers(0, 100)))
        next_offset[(topic, partition)] = offset + draw(st.integers(1, 3))
        stamp = (draw(st.integers(0, 2)), draw(st.sampled_from([-1, 0, 1_700_000_000_123])))
        out.append(kafka_message(topic, partition, offset, value or None, stamp))
    return out


TYPES = st.sampled_from(
    [
        None,
        {"transfer": {}, "login": {}},
        {"transfer": {"amount": "number", "channel": "string"}, "login": {}},
        {"transfer": {"ts": "string"}},
    ]
)


def field_types(spec: Mapping[str, Mapping[str, str]] | None) -> FieldTypes | None:
    return None if spec is None else FieldTypes.of(spec)


#: The arities known before decoding (the queries' and the index's).
KNOWN = st.sampled_from([{}, {"e": 2}, {"e": 2, "r3": 3}, {"e": 3, "f": 1}, {"r3": 2}])


# Comparisons -----------------------------------------------------------------------------------


def same_column(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype
    if a.dtype.kind == "f":
        assert np.array_equal(a, b, equal_nan=True)
        zero = a == 0  # (and -0.0 is not 0.0: it prints as -0.0)
        assert np.array_equal(np.signbit(a[zero]), np.signbit(b[zero]))
    else:
        assert [(type(v), v) for v in a.tolist()] == [(type(v), v) for v in b.tolist()]


def same_batch(reference: UpdateBatch, batch: UpdateBatch) -> None:
    assert (batch.first_seq, batch.count) == (reference.first_seq, reference.count)
    assert list(batch.parts) == list(reference.parts)
    for name, part in reference.parts.items():
        mine = batch.parts[name]
        assert len(mine.columns) == len(part.columns)
        for a, b in zip(part.columns, mine.columns, strict=True):
            same_column(a, b)
        same_column(part.diff, mine.diff)
        same_column(part.seq, mine.seq)
    assert list(batch.events) == list(reference.events)
    for name, events in reference.events.items():
        mine_events = batch.events[name]
        for column in ("ids", "diff", "seq", "src", "dst"):
            same_column(getattr(events, column), getattr(mine_events, column))
        assert list(mine_events.fields) == list(events.fields)
        for field, column in events.fields.items():
            same_column(column, mine_events.fields[field])
    assert list(batch.times) == list(reference.times)
    for key, times in reference.times.items():
        same_column(times, batch.times[key])


def late(draw: st.DrawFn, batch: UpdateBatch) -> dict[str, np.ndarray]:
    """Some sequence numbers of each event relation, and some that are not events."""
    out = {}
    for name, events in batch.events.items():
        seqs = events.seq.tolist()
        picked = draw(st.lists(st.sampled_from(seqs), unique=True)) if seqs else []
        out[name] = np.asarray([*sorted(picked), batch.first_seq + batch.count + 5], np.int64)
    return out


def same_poll(reference: ReferencePolled, polled: Polled, draw: st.DrawFn) -> None:
    same_batch(reference.batch, polled.batch)
    assert polled.dead_letters == reference.dead_letters
    assert polled.next_offsets == reference.next_offsets
    assert polled.per_topic == reference.per_topic
    assert polled.timestamps == reference.timestamps
    assert polled.records == reference.records
    window = late(draw, reference.batch)
    assert polled.refused(window) == reference.refused(reference.batch.first_seq, window)


def learned(types: FieldTypes | None) -> list[tuple[str, list[tuple[str, str]]]] | None:
    return None if types is None else [(r, list(f.items())) for r, f in types.types.items()]


# Tests -----------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(messages(), TYPES, KNOWN, st.integers(0, 1000), st.data())
def test_batch_decoding_is_the_per_record_decoding(
    batch: list[Message], spec: Any, known: dict[str, int], first_seq: int, data: st.DataObject
) -> None:
    """One batch, and the same records in two chunks merged, against the per-record decoder."""
    types_ref = field_types(spec)
    arities_ref = dict(known)
    expected = reference_poll(
        cast(list[Message], batch), first_seq, DEFAULT, TOPIC_RELATIONS, types_ref, arities_ref
    )
    types = field_types(spec)
    arities = dict(known)
    records = message_columns(cast(list[Message], batch))
    got = decode_messages(records, first_seq, DEFAULT, TOPIC_RELATIONS, types, arities)
    same_poll(expected, got, data.draw)
    assert learned(types) == learned(types_ref)
    assert arities == arities_ref

    cut = data.draw(st.integers(0, len(batch)))
    types = field_types(spec)
    arities = dict(known)  # as the source holds them from chunk to chunk
    head = decode_messages(
        message_columns(cast(list[Message], batch[:cut])),
        first_seq,
        DEFAULT,
        TOPIC_RELATIONS,
        types,
        arities,
    )
    tail = decode_messages(
        message_columns(cast(list[Message], batch[cut:])),
        first_seq + head.batch.count,
        DEFAULT,
        TOPIC_RELATIONS,
        types,
        arities,
    )
    same_poll(expected, merge_polled([head, tail], first_seq), data.draw)
    assert learned(types) == learned(types_ref)
    assert arities == arities_ref


@settings(max_examples=200, deadline=None)
@given(messages(), TYPES, KNOWN, st.data())
def test_epoch_decoding_is_the_per_record_decoding(
    batch: list[Message], spec: Any, known: dict[str, int], data: st.DataObject
) -> None:
    """The scale-out worker's epoch, partition by partition, against the per-record decoder."""
    by_partition: dict[tuple[str, int], list[Message]] = {}
    for message in batch:
        by_partition.setdefault((message.topic(), message.partition()), []).append(
            cast(Message, message)
        )
    types_ref = field_types(spec)
    arities_ref = dict(known)
    reference_batch, bounds, polled = reference_epoch(
        by_partition, DEFAULT, TOPIC_RELATIONS, types_ref, arities_ref
    )
    types = field_types(spec)
    arities = dict(known)
    config = Settings(default_relation=DEFAULT, topic_relations=TOPIC_RELATIONS)
    got = decode_epoch(by_partition, config, types, arities)
    same_batch(reference_batch, got.batch)
    assert got.bounds.tolist() == bounds
    assert list(got.polled) == list(polled)
    window = late(data.draw, reference_batch)
    for p, part in polled.items():
        mine = got.polled[p]
        assert mine.dead_letters == part.dead_letters
        assert (mine.per_topic, mine.timestamps, mine.records) == (
            part.per_topic,
            part.timestamps,
            part.records,
        )
        assert mine.refused(window) == part.refused(0, window)
    assert learned(types) == learned(types_ref)
    assert arities == arities_ref


def test_message_columns_skip_partition_ends_and_raise_other_errors() -> None:
    data = kafka_message("t1", 0, 7, b'{"src": 1, "dst": 2}', (1, 5))
    end = kafka_message("t1", 0, 8, None, (0, 0), KafkaError(KafkaError._PARTITION_EOF))
    records = message_columns(cast(list[Message], [data, end]))
    assert (records.topics, records.offsets, records.values) == (["t1"], [7], [data.value()])
    broken = kafka_message("t1", 0, 8, None, (0, 0), KafkaError(KafkaError._MSG_TIMED_OUT))
    with pytest.raises(KafkaException):
        message_columns(cast(list[Message], [data, broken]))


def test_a_record_without_a_value_is_an_empty_one() -> None:
    """``value()`` is None for a tombstone: an invalid JSON dead letter with an empty value."""
    polled = decode_messages(
        message_columns(cast(list[Message], [kafka_message("t1", 0, 3, None, (0, 0))])),
        0,
        DEFAULT,
        {},
    )
    assert polled.batch.count == 0
    [letter] = polled.dead_letters
    assert (letter.offset, letter.value, letter.category) == (3, b"", "invalid_json")
