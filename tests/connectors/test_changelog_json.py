"""Changelog records, a batch at a time, against the encoding they replace: one ``orjson.dumps``
of a key list and a value dict per changed tuple or event (``KafkaSink.write_changelog`` and
``write_event_changelog`` before issue #14), byte for byte, tombstones where they were."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.changelog_json import clock_record, event_records, tuple_records
from connectors.sinks import event_objects, id_list
from core.columns import Coded, Column
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
