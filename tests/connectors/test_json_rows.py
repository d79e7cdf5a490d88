"""Whole-batch JSON encoding against the naive encoding: ``orjson.dumps`` of one dict per row.

Every kind of column (:mod:`core.columns`) with absent values, negative and extreme integers,
floats that print as integers and ones that do not, strings that need escaping, dictionary
columns; whole records with edges and extra members, and Kafka keys."""

from __future__ import annotations

import math
from typing import Any
from unittest.mock import patch

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import json_place
from connectors.delta_json import (
    DeltaRows,
    chunks,
    key_pieces,
    keys_and_values,
    object_pieces,
    value_pieces,
    vertex_ids,
)
from connectors.json_rows import constant, encode_rows, integers, values
from core.columns import Coded, Column, EventRows, python_values

ROWS = st.integers(min_value=0, max_value=12)


#: Both assemblies: the compiled one (numba) and the numpy one (its fallback).
ASSEMBLIES = pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])


def texts(column: Column, compiled: bool = True) -> list[bytes]:
    """Each row's encoding of one column alone (absent: empty)."""
    return split(*encode_rows([values(column)], column.shape[0], compiled=compiled))


def naive(column: Column) -> list[bytes]:
    return [b"" if v is None else orjson.dumps(v) for v in python_values(column)]


def int_columns(dtype: type[np.integer[Any]]) -> st.SearchStrategy[npt.NDArray[np.generic]]:
    info = np.iinfo(dtype)
    special = [info.min, info.max, 0, 1, 9, 10, 99, 9999, 10_000, -1, -9999, -10_000]
    edges = st.sampled_from([v for v in special if info.min <= v <= info.max])
    value = st.one_of(edges, st.integers(int(info.min), int(info.max)))
    return st.lists(value, max_size=12).map(lambda v: np.array(v, dtype=dtype))


FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=False),
    st.integers(-(2**60), 2**60).map(float),
    st.sampled_from([0.0, -0.0, 2.0**53, -(2.0**53), 1e16, 0.1, 1500.0, math.nan]),
)
STRINGS = st.text(max_size=8)


@st.composite
def object_columns(draw: st.DrawFn) -> npt.NDArray[np.generic]:
    items = draw(st.lists(st.one_of(st.none(), STRINGS, st.integers(-(2**63), 2**63 - 1))))
    column = np.empty(len(items), object)
    column[:] = items
    return column


@st.composite
def coded_columns(draw: st.DrawFn) -> Coded:
    table = draw(st.lists(st.one_of(STRINGS, st.booleans()), max_size=5))
    codes = draw(st.lists(st.integers(-1, len(table) - 1), max_size=12))
    return Coded(np.array(codes, np.int32), table)


@st.composite
def ascii_columns(draw: st.DrawFn) -> npt.NDArray[np.generic]:
    alphabet = st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters='"\\')
    items = draw(st.lists(st.text(alphabet, max_size=6), max_size=12))
    return np.array([s.encode() for s in items], dtype="S6")


COLUMNS = st.one_of(
    int_columns(np.int64),
    int_columns(np.int32),
    int_columns(np.uint64),
    int_columns(np.int8),
    st.lists(FLOATS, max_size=12).map(lambda v: np.array(v, np.float64)),
    object_columns(),
    coded_columns(),
    ascii_columns(),
    st.lists(st.booleans(), max_size=12).map(lambda v: np.array(v, np.bool_)),
)


def column_of(rows: int) -> st.SearchStrategy[Column]:
    """A column of ``rows`` rows whose values may be absent (floats or dictionary codes)."""
    floats = st.lists(FLOATS, min_size=rows, max_size=rows).map(lambda v: np.array(v))
    codes = st.lists(st.integers(-1, 1), min_size=rows, max_size=rows)
    return st.one_of(floats, codes.map(lambda c: Coded(np.array(c, np.int32), ["x", True])))


@ASSEMBLIES
@settings(max_examples=400, deadline=None)
@given(column=COLUMNS)
def test_every_kind_of_column_encodes_as_orjson_does(compiled: bool, column: Column) -> None:
    assert texts(column, compiled) == naive(column)


@ASSEMBLIES
def test_integers_of_every_width_and_sign(compiled: bool) -> None:
    column = np.array([0, 7, -7, 10**4, -(10**4), 2**63 - 1, -(2**63), 123456789], np.int64)
    assert texts(column, compiled) == [str(v).encode() for v in column.tolist()]
    assert encode_rows([integers(column[:0])], 0, compiled=compiled)[0].shape == (0,)
    unsigned = np.array([0, 2**64 - 1, 10**19], np.uint64)
    assert texts(unsigned, compiled) == [str(v).encode() for v in unsigned.tolist()]


@ASSEMBLIES
def test_strings_with_commas_quotes_and_backslashes_are_cut_where_values_end(
    compiled: bool,
) -> None:
    items = ["a,b", '"', "\\", '\\"', '",', "", None, 12, '\\\\",\\', "é,\n", True, -0.5]
    column = np.empty(len(items), object)
    column[:] = items
    assert texts(column, compiled) == naive(column)
    assert texts(column[:0], compiled) == []


@ASSEMBLIES
@settings(max_examples=300, deadline=None)
@given(items=st.lists(st.one_of(st.none(), st.text(st.sampled_from('\\",a\n'), max_size=6))))
def test_strings_of_separators_and_escapes_encode_as_orjson_does(
    compiled: bool, items: list[str | None]
) -> None:
    column = np.empty(len(items), object)
    column[:] = items
    assert texts(column, compiled) == naive(column)


@ASSEMBLIES
def test_a_float_column_prints_integral_values_as_integers(compiled: bool) -> None:
    column = np.array([1500.0, 1500.5, np.nan, -3.0, 2.0**60], np.float64)
    expected = [b"1500", b"1500.5", b"", b"-3", b"1.152921504606847e+18"]
    assert texts(column, compiled) == expected


@st.composite
def deltas(draw: st.DrawFn) -> dict[str, Any]:
    rows = draw(ROWS)
    variables = draw(st.lists(st.sampled_from("abcde"), min_size=1, max_size=3, unique=True))

    def ids() -> npt.NDArray[np.generic]:
        items = draw(st.lists(st.one_of(STRINGS, st.integers(-5, 2**40)), min_size=rows))
        column = np.empty(rows, object)
        column[:] = items[:rows]
        return column if draw(st.booleans()) else np.arange(rows, dtype=np.int64) * 7 - 3

    columns = [ids() for _ in variables]
    diffs = np.array(draw(st.lists(st.sampled_from([1, -1]), min_size=rows, max_size=rows)))
    edges: dict[str, dict[str, Column]] = {}
    for name in draw(st.lists(st.sampled_from(["t1", "t2", "t"]), max_size=2, unique=True)):
        amounts = draw(st.lists(FLOATS, min_size=rows, max_size=rows))
        channels = draw(st.lists(st.integers(-1, 1), min_size=rows, max_size=rows))
        edges[name] = {
            "id": ids(),
            "src": ids(),
            "dst": ids(),
            "amount": np.array(amounts, np.float64),
            "channel": Coded(np.array(channels, np.int32), ["wire", 'c"a\\sh']),
        }
    extra: dict[str, Column] = {
        "cause": Coded(np.where(diffs < 0, draw(st.sampled_from([0, 1])), -1), ["deleted", "x"]),
        "match_id": np.array([b"%016x" % i for i in range(rows)], "S16"),
    }
    return {
        "query": draw(st.sampled_from(["triangle", "ring", 'q"é'])),
        "epoch": draw(st.integers(0, 2**40)),
        "variables": variables,
        "columns": columns,
        "diffs": diffs,
        "edges": edges,
        "extra": extra,
    }


def naive_records(d: dict[str, Any]) -> tuple[list[bytes], list[bytes]]:
    """The records and keys as the service wrote them with one dict per delta."""
    rows = d["diffs"].shape[0]
    ids = [python_values(c) for c in d["columns"]]
    events = {
        n: [{f: v for f, v in zip(e, row, strict=True) if v is not None} for row in rows_of(e)]
        for n, e in d["edges"].items()
    }
    extra = {k: python_values(c) for k, c in d["extra"].items()}
    records, keys = [], []
    for i in range(rows):
        binding = [c[i] for c in ids]
        body: dict[str, object] = {
            "query": d["query"],
            "epoch": d["epoch"],
            "diff": int(d["diffs"][i]),
            "match": dict(zip(d["variables"], binding, strict=True)),
        }
        key: list[object] = [d["query"], binding]
        if events:
            body["edges"] = {n: e[i] for n, e in events.items()}
            key.append([e[i]["id"] for e in events.values()])
        body.update({k: v[i] for k, v in extra.items() if v[i] is not None})
        records.append(orjson.dumps(body))
        keys.append(orjson.dumps(key))
    return records, keys


def rows_of(fields: dict[str, Column]) -> list[tuple[object, ...]]:
    return list(zip(*(python_values(c) for c in fields.values()), strict=True))


def split(data: npt.NDArray[np.uint8], ends: npt.NDArray[np.int64]) -> list[bytes]:
    text = data.tobytes()
    starts = [0, *ends[:-1].tolist()] if ends.shape[0] else []
    return [text[s:e] for s, e in zip(starts, ends.tolist(), strict=True)]


@ASSEMBLIES
@settings(max_examples=300, deadline=None)
@given(d=deltas())
def test_records_and_keys_encode_as_one_dict_per_delta_does(
    compiled: bool, d: dict[str, Any]
) -> None:
    rows = d["diffs"].shape[0]
    pieces = value_pieces(
        d["query"], d["epoch"], d["variables"], d["columns"], d["diffs"], d["edges"], d["extra"]
    )
    edge_ids = [e["id"] for e in d["edges"].values()]
    records, keys = naive_records(d)
    assert split(*encode_rows(pieces, rows, compiled=compiled)) == records
    key = key_pieces(d["query"], d["columns"], edge_ids)
    assert split(*encode_rows(key, rows, compiled=compiled)) == keys
    lines = encode_rows([*pieces, constant(b"\n")], rows, compiled=compiled)[0].tobytes()
    assert lines == b"".join(r + b"\n" for r in records)
    part = DeltaRows(d["columns"], d["diffs"], d["edges"], d["extra"])
    assert keys_and_values(d["query"], d["epoch"], d["variables"], part) == (keys, records)


@st.composite
def shared_events(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`deltas` whose edge variables hold events of a smaller table, several rows each
    (as a hub's transfer is in many matches): once as :class:`EventRows`, once gathered."""
    d = draw(deltas())
    rows = d["diffs"].shape[0]
    shared, gathered = dict(d), dict(d)
    shared["edges"], gathered["edges"] = {}, {}
    for name, table in d["edges"].items():
        codes = np.array(
            draw(st.lists(st.integers(0, max(rows - 1, 0)), min_size=rows, max_size=rows)),
            np.int64,
        )
        shared["edges"][name] = EventRows(table, codes)
        gathered["edges"][name] = {f: c[codes] for f, c in table.items()}
    return shared, gathered


@ASSEMBLIES
@settings(max_examples=300, deadline=None)
@given(pair=shared_events(), size=st.integers(1, 5))
def test_shared_events_are_written_once_and_read_as_every_row_holds_them(
    compiled: bool, pair: tuple[dict[str, Any], dict[str, Any]], size: int
) -> None:
    """Each distinct event's object is written once and placed in every row that holds it
    (compiled; the numpy assembly writes the rows' gathered columns): the records and keys
    are those of one dict per delta, also cut into chunks of rows."""
    with patch.object(json_place, "COMPILED", compiled):
        _written_as_one_dict_per_delta(*pair, size, compiled)


def _written_as_one_dict_per_delta(
    shared: dict[str, Any], gathered: dict[str, Any], size: int, compiled: bool
) -> None:
    rows = shared["diffs"].shape[0]
    records, keys = naive_records(gathered)
    head = (shared["query"], shared["epoch"], shared["variables"])
    pieces = value_pieces(
        *head, shared["columns"], shared["diffs"], shared["edges"], shared["extra"]
    )
    assert split(*encode_rows(pieces, rows, compiled=compiled)) == records
    chunked = chunks(shared["columns"], shared["diffs"], shared["edges"], shared["extra"], size)
    written: list[bytes] = []
    texts: list[bytes] = []
    for part in chunked:
        assert all(isinstance(e, EventRows) for e in part.edges.values())
        got_keys, got = keys_and_values(*head, part)
        written += got
        texts += got_keys
    assert (written, texts) == (records, keys)
    for name, events in shared["edges"].items():  # (read as a mapping: a value per row)
        for field, column in gathered["edges"][name].items():
            assert python_values(events[field]) == python_values(column)


def test_vertex_ids_take_numpy_integers_and_refuse_other_types() -> None:
    column = np.empty(2, object)
    column[:] = [np.int64(5), "v"]
    assert vertex_ids(column).tolist() == [5, "v"]
    assert type(vertex_ids(column).tolist()[0]) is int
    column[:] = [1.5, "v"]
    with pytest.raises(TypeError, match="int or str, got float"):
        vertex_ids(column)
    with pytest.raises(TypeError, match="dtype float64"):
        vertex_ids(np.array([1.0]))


@ASSEMBLIES
@settings(max_examples=200, deadline=None)
@given(columns=st.integers(0, 8).flatmap(lambda n: st.lists(column_of(n), min_size=1, max_size=4)))
def test_objects_leave_out_absent_members_wherever_they_stand(
    compiled: bool, columns: list[Column]
) -> None:
    members = [(f"m{k}", c) for k, c in enumerate(columns)]
    rows = columns[0].shape[0]
    expected = [
        orjson.dumps({n: v for (n, _), v in zip(members, row, strict=True) if v is not None})
        for row in rows_of(dict(members))
    ]
    assert split(*encode_rows(object_pieces(members), rows, compiled=compiled)) == expected
