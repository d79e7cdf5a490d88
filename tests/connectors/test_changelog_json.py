"""Changelog records, a batch at a time, against the encoding they replace: one ``orjson.dumps``
of a key list and a value dict per changed tuple or event (``KafkaSink.write_changelog`` and
``write_event_changelog`` before issue #14), byte for byte, tombstones where they were; and a
changelog read back whole against the rebuild's decoding of one record at a time."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.changelog_json import (
    CLOCK_KEY,
    clock_record,
    event_records,
    live_batch,
    tuple_records,
)
from connectors.events import EventRecord, FieldTypes, decode_event
from connectors.kafka_records import updates_batch
from connectors.sinks import event_objects, id_list
from core.columns import Coded, Column
from core.errors import StateError
from core.records import Update, UpdateBatch
from tests.connectors.test_json_rows import FLOATS, STRINGS

RELATIONS = st.sampled_from(["e", "transfer", 'q"é\\', "#events"])
EPOCHS = st.integers(0, 2**40)


def id_column(rows: int) -> st.SearchStrategy[npt.NDArray[np.generic]]:
    """External ids as the dictionaries decode them: ``int64``, or ``object`` holding ``int``
    and ``str``."""
    ints = st.lists(st.integers(-(2**63), 2**63 - 1), min_size=rows, max_size=rows).map(
        lambda v: np.array(v, np.int64)
    )
    mixed = st.lists(st.one_of(STRINGS, st.integers(-5, 2**62)), min_size=rows, max_size=rows)
    return st.one_of(ints, mixed.map(objects))


def objects(items: list[Any]) -> npt.NDArray[np.generic]:
    column = np.empty(len(items), object)
    column[:] = items
    return column


def signs(rows: int) -> st.SearchStrategy[npt.NDArray[np.int8]]:
    return st.lists(st.sampled_from([1, -1]), min_size=rows, max_size=rows).map(
        lambda v: np.array(v, np.int8)
    )


@st.composite
def tuple_changes(draw: st.DrawFn) -> dict[str, Any]:
    rows = draw(st.integers(0, 12))
    arity = draw(st.integers(1, 3))
    return {
        "relation": draw(RELATIONS),
        "epoch": draw(EPOCHS),
        "columns": [draw(id_column(rows)) for _ in range(arity)],
        "diffs": draw(signs(rows)),
    }


@st.composite
def event_changes(draw: st.DrawFn) -> dict[str, Any]:
    """Events as ``EventStore.columns`` hands them out: ids, pair, then number fields (NaN
    absent) and string and boolean fields (codes, -1 absent)."""
    rows = draw(st.integers(0, 12))
    events: dict[str, Column] = {
        "id": draw(id_column(rows)),
        "src": draw(id_column(rows)),
        "dst": draw(id_column(rows)),
    }
    strings = draw(st.lists(STRINGS, min_size=1, max_size=4))
    for name in draw(st.lists(st.sampled_from(["ts", "amount", "channel", "ok"]), unique=True)):
        if name in ("ts", "amount"):
            events[name] = np.array(draw(st.lists(FLOATS, min_size=rows, max_size=rows)))
        else:
            table: list[object] = [False, True] if name == "ok" else list(strings)
            codes = st.lists(st.integers(-1, len(table) - 1), min_size=rows, max_size=rows)
            events[name] = Coded(np.array(draw(codes), np.int32), table)
    return {
        "relation": draw(RELATIONS),
        "epoch": draw(EPOCHS),
        "events": events,
        "diffs": draw(signs(rows)),
    }


def naive_tuples(d: dict[str, Any]) -> list[tuple[bytes, bytes | None]]:
    ids = [id_list(c) for c in d["columns"]]
    value = orjson.dumps({"epoch": d["epoch"]})
    return [
        (orjson.dumps([d["relation"], [column[i] for column in ids]]), value if s > 0 else None)
        for i, s in enumerate(d["diffs"].tolist())
    ]


def naive_events(d: dict[str, Any]) -> list[tuple[bytes, bytes | None]]:
    return [
        (
            orjson.dumps([d["relation"], event["id"]]),
            orjson.dumps({"epoch": d["epoch"], "event": event}) if s > 0 else None,
        )
        for s, event in zip(d["diffs"].tolist(), event_objects(d["events"]), strict=True)
    ]


@settings(max_examples=300, deadline=None)
@given(tuple_changes())
def test_tuple_records_are_what_one_dumps_per_tuple_wrote(d: dict[str, Any]) -> None:
    got = list(tuple_records(d["relation"], d["epoch"], d["columns"], d["diffs"]))
    assert got == naive_tuples(d)


@settings(max_examples=300, deadline=None)
@given(event_changes())
def test_event_records_are_what_one_dumps_per_event_wrote(d: dict[str, Any]) -> None:
    got = list(event_records(d["relation"], d["epoch"], d["events"], d["diffs"]))
    assert got == naive_events(d)


@settings(max_examples=50, deadline=None)
@given(tuple_changes(), event_changes())
def test_records_are_the_same_across_chunk_boundaries(
    tuples: dict[str, Any], events: dict[str, Any]
) -> None:
    got = list(tuple_records(tuples["relation"], 5, tuples["columns"], tuples["diffs"], 3))
    got_events = list(event_records(events["relation"], 5, events["events"], events["diffs"], 3))
    assert got == naive_tuples({**tuples, "epoch": 5})
    assert got_events == naive_events({**events, "epoch": 5})


def test_a_tuple_and_an_event_as_the_readme_shows_them() -> None:
    (record,) = tuple_records("transfer", 7, [objects(["A"]), objects(["B"])], np.array([1]))
    assert record == (b'["transfer",["A","B"]]', b'{"epoch":7}')
    events: dict[str, Column] = {
        "id": objects(["tx-91", "tx-92"]),
        "src": objects(["A", "A"]),
        "dst": objects(["B", "C"]),
        "amount": np.array([1500.5, np.nan]),
    }
    deleted, inserted = event_records("payment", 7, events, np.array([-1, 1]))
    assert deleted == (b'["payment","tx-91"]', None)
    assert inserted == (
        b'["payment","tx-92"]',
        b'{"epoch":7,"event":{"id":"tx-92","src":"A","dst":"C"}}',
    )
    assert clock_record(7, "payments:3", [1.5, 2.0]) == (
        b'["#clock","payments:3"]',
        b'{"epoch":7,"times":[1.5,2.0]}',
    )


def test_ids_that_are_neither_int_nor_str_are_refused() -> None:
    with pytest.raises(TypeError, match="int or str"):
        list(tuple_records("e", 1, [objects([1.5])], np.array([1])))


# -- reading a changelog back ---------------------------------------------------------------


def naive_live(
    present: dict[bytes, bytes | None], types: FieldTypes | None
) -> tuple[UpdateBatch, dict[str, list[float]]]:
    """The rebuild's decoding before issue #14: one ``orjson.loads`` and one ``Update`` or
    event per live record."""
    updates: list[Update] = []
    events: list[tuple[int, EventRecord]] = []
    clock: dict[str, list[float]] = {}
    for key, value in present.items():
        if value is None:
            continue
        decoded = orjson.loads(key)
        if decoded[0] == CLOCK_KEY:
            clock[str(decoded[1])] = [float(t) for t in orjson.loads(value)["times"]]
        elif isinstance(decoded[1], list):
            updates.append(Update(decoded[0], tuple(decoded[1]), 1))
        else:
            assert types is not None
            event = orjson.loads(value)["event"]
            position = f"changelog {key.decode()}"
            found = decode_event(event, decoded[0], 1, position, types)
            events.append((len(updates) + len(events), found))
    return updates_batch(updates, events, 0, types), clock


def comparable(batch: UpdateBatch) -> dict[str, Any]:
    def column(c: npt.NDArray[Any]) -> tuple[str, list[Any]]:
        items = [None if isinstance(v, float) and math.isnan(v) else v for v in c.tolist()]
        return str(c.dtype), [(type(v).__name__, v) for v in items]

    return {
        "count": (batch.first_seq, batch.count),
        "parts": {
            r: ([column(c) for c in p.columns], p.diff.tolist(), p.seq.tolist())
            for r, p in batch.parts.items()
        },
        "events": {
            r: (
                [column(c) for c in (e.ids, e.src, e.dst)],
                e.diff.tolist(),
                e.seq.tolist(),
                {n: column(c) for n, c in e.fields.items()},
            )
            for r, e in batch.events.items()
        },
    }


TYPES = {"payment": {"amount": "number", "channel": "string", "ok": "bool"}}


@st.composite
def changelogs(draw: st.DrawFn) -> list[tuple[bytes, bytes | None]]:
    """The records of a few epochs of tuple, event and clock changes, in the order written."""
    out: list[tuple[bytes, bytes | None]] = []
    vertex = st.one_of(st.integers(-3, 5), st.sampled_from(["a", "b", 'q"', "7"]))
    for epoch in range(1, draw(st.integers(1, 4)) + 1):
        for relation, arity in (("e", 2), ("flagged", 1)):
            rows = draw(st.lists(st.tuples(*[vertex] * arity), max_size=6))
            columns = [objects([row[k] for row in rows]) for k in range(arity)]
            out += tuple_records(relation, epoch, columns, draw(signs(len(rows))))
        n = draw(st.integers(0, 5))
        events: dict[str, Column] = {
            "id": objects(
                draw(st.lists(st.sampled_from(["tx-1", "tx-2", 3, 4]), min_size=n, max_size=n))
            ),
            "src": objects(draw(st.lists(vertex, min_size=n, max_size=n))),
            "dst": objects(draw(st.lists(vertex, min_size=n, max_size=n))),
            "amount": np.array(draw(st.lists(FLOATS, min_size=n, max_size=n)), np.float64),
            "channel": Coded(
                np.array(draw(st.lists(st.integers(-1, 1), min_size=n, max_size=n)), np.int32),
                ["wire", "card"],
            ),
            "ok": Coded(
                np.array(draw(st.lists(st.integers(-1, 1), min_size=n, max_size=n)), np.int32),
                [False, True],
            ),
        }
        out += event_records("payment", epoch, events, draw(signs(n)))
        for partition in draw(st.lists(st.sampled_from(["in:0", "in:1"]), unique=True)):
            out.append(
                clock_record(
                    epoch, partition, draw(st.lists(FLOATS.filter(math.isfinite), max_size=3))
                )
            )
    return out


@settings(max_examples=200, deadline=None)
@given(changelogs())
def test_a_changelog_reads_back_as_one_record_at_a_time_did(
    written: list[tuple[bytes, bytes | None]],
) -> None:
    present = dict(written)
    live = [(k, v) for k, v in present.items() if v is not None]
    batch, clock = live_batch([k for k, _ in live], [v for _, v in live], FieldTypes.of(TYPES))
    expected, expected_clock = naive_live(present, FieldTypes.of(TYPES))
    assert comparable(batch) == comparable(expected)
    assert clock == expected_clock


def test_events_of_a_relation_the_queries_do_not_read_as_events_are_refused() -> None:
    (record,) = event_records(
        "payment", 1, {"id": objects([1]), "src": objects([1]), "dst": objects([2])}, np.array([1])
    )
    assert record[1] is not None
    with pytest.raises(StateError, match="events of 'payment'"):
        live_batch([record[0]], [record[1]], FieldTypes.of({"other": {}}))
    with pytest.raises(StateError, match="events of 'payment'"):
        live_batch([record[0]], [record[1]], None)


def test_tuples_of_different_arities_are_refused() -> None:
    with pytest.raises(StateError, match="different arities"):
        live_batch([b'["e",[1,2]]', b'["e",[1]]'], [b'{"epoch":1}'] * 2, None)
