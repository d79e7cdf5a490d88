"""Sinks: JSON Lines output parses back to exactly the rows written; ListSink keeps them."""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import connectors.sinks
from connectors.sinks import JsonLinesSink, ListSink
from core.records import INT64_MAX, INT64_MIN, id_column

Row = tuple[str, int, tuple[object, ...], int]


def write(
    query: str,
    epoch: int,
    variables: list[str],
    columns: list[npt.NDArray[np.generic]],
    diffs: list[int],
) -> tuple[list[dict[str, object]], bytes, int]:
    stream = io.BytesIO()
    sink = JsonLinesSink(stream)
    count = sink.write_deltas(query, epoch, variables, columns, np.asarray(diffs, dtype=np.int8))
    assert sink.lines_written == count
    data = stream.getvalue()
    assert data == b"" or data.endswith(b"\n")
    return [orjson.loads(line) for line in data.splitlines()], data, count


def as_rows(records: list[dict[str, object]], variables: list[str]) -> list[Row]:
    out: list[Row] = []
    for record in records:
        assert list(record) == ["query", "epoch", "diff", "match"]
        match = record["match"]
        assert isinstance(match, dict)
        assert list(match) == variables
        query, epoch, diff = record["query"], record["epoch"], record["diff"]
        assert isinstance(query, str) and type(epoch) is int and type(diff) is int
        out.append((query, epoch, tuple(match.values()), diff))
    return out


def test_int_columns() -> None:
    columns = [np.array([1, 4, INT64_MAX], dtype=np.int64), np.array([2, 0, INT64_MIN])]
    records, data, count = write("triangle", 7, ["a", "b"], columns, [1, -1, 1])
    assert count == 3
    assert data.splitlines()[0] == b'{"query":"triangle","epoch":7,"diff":1,"match":{"a":1,"b":2}}'
    assert as_rows(records, ["a", "b"]) == [
        ("triangle", 7, (1, 2), 1),
        ("triangle", 7, (4, 0), -1),
        ("triangle", 7, (INT64_MAX, INT64_MIN), 1),
    ]


def test_object_columns_keep_int_and_str_apart() -> None:
    strange = ['he said "hi"', "back\\slash", "50%", "%d", "a,b", "}{", "é\u2028", "12", ""]
    n = len(strange)
    columns = [
        id_column(strange),
        id_column(list(range(n))),
        id_column([*range(n - 1), "x"]),
    ]
    assert columns[1].dtype == np.int64 and columns[0].dtype == object
    records, _, _ = write('q"%s', 0, ["c", "a", "b"], columns, [1] * n)
    got = as_rows(records, ["c", "a", "b"])
    assert [r[2] for r in got] == [(s, i, i if i < n - 1 else "x") for i, s in enumerate(strange)]
    assert [type(r[2][0]) for r in got] == [str] * n
    assert got[0][0] == 'q"%s'


def test_int_only_output_escapes_names() -> None:
    records, _, _ = write('50% "tri"', 1, ["a%d", 'b"'], [np.array([1]), np.array([2])], [-1])
    assert records == [{"query": '50% "tri"', "epoch": 1, "diff": -1, "match": {"a%d": 1, 'b"': 2}}]


def test_numpy_scalars_in_object_columns_become_ints() -> None:
    column = np.empty(2, dtype=object)
    column[:] = [np.int64(5), "v"]
    records, _, _ = write("q", 3, ["a"], [column], [1, 1])
    assert [r["match"] for r in records] == [{"a": 5}, {"a": "v"}]


def test_other_integer_dtypes() -> None:
    columns: list[npt.NDArray[np.generic]] = [
        np.array([1, 2], dtype=np.int32),
        np.array([3, 2**64 - 1], dtype=np.uint64),
    ]
    records, _, _ = write("q", 3, ["a", "b"], columns, [1, 1])
    assert [r["match"] for r in records] == [{"a": 1, "b": 3}, {"a": 2, "b": 2**64 - 1}]


def test_empty_delta_writes_nothing() -> None:
    records, data, count = write("q", 1, ["a", "b"], [np.empty(0, np.int64)] * 2, [])
    assert (records, data, count) == ([], b"", 0)


def test_rows_across_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connectors.sinks, "CHUNK_ROWS", 7)
    n = 50
    ints = np.arange(n, dtype=np.int64)
    cases: list[list[npt.NDArray[np.generic]]] = [
        [ints, ints * 2],
        [ints, id_column([f"v{i}" for i in range(n)])],
    ]
    for columns in cases:
        diffs = [1 if i % 3 else -1 for i in range(n)]
        records, _, count = write("q", 9, ["a", "b"], columns, diffs)
        assert count == n
        pairs = zip(columns[0].tolist(), columns[1].tolist(), strict=True)
        assert as_rows(records, ["a", "b"]) == [
            ("q", 9, pair, diff) for pair, diff in zip(pairs, diffs, strict=True)
        ]


def test_lines_written_accumulates_and_flush_reaches_the_stream() -> None:
    class Stream(io.BytesIO):
        flushes = 0

        def flush(self) -> None:
            self.flushes += 1
            super().flush()

    stream = Stream()
    sink = JsonLinesSink(stream)
    sink.write_deltas("q", 1, ["a"], [np.array([1, 2])], np.array([1, -1]))
    sink.write_deltas("q", 2, ["a"], [np.array([3])], np.array([1]))
    assert sink.lines_written == 3
    sink.flush()
    assert stream.flushes == 1
    assert len(stream.getvalue().splitlines()) == 3


@pytest.mark.parametrize(
    ("variables", "columns", "diffs", "error", "message"),
    [
        ([], [], [1], ValueError, "at least one variable"),
        (["a", "b"], [np.array([1])], [1], ValueError, "2 variables but 1 columns"),
        (
            ["a"],
            [np.array([1, 2])],
            [1],
            ValueError,
            r"column 'a' has shape \(2,\), expected \(1,\)",
        ),
        (["a"], [np.array([1])], [2], ValueError, r"every diff must be \+1 or -1"),
        (["a"], [np.array([1])], [0], ValueError, r"every diff must be \+1 or -1"),
        (["a"], [np.array([1.5])], [1], TypeError, "integer or object arrays, got dtype float64"),
        (["a"], [np.array([True])], [1], TypeError, "got dtype bool"),
        (["a"], [id_column([1]).astype(object) * 1.5], [1], TypeError, "got float 1.5"),
        (["a"], [np.array([True, "x"], dtype=object)], [1, 1], TypeError, "got bool True"),
        (["a"], [np.array([None], dtype=object)], [1], TypeError, "got NoneType None"),
    ],
)
def test_invalid_deltas(
    variables: list[str],
    columns: list[npt.NDArray[np.generic]],
    diffs: list[int],
    error: type[Exception],
    message: str,
) -> None:
    for sink in (JsonLinesSink(io.BytesIO()), ListSink()):
        with pytest.raises(error, match=message):
            sink.write_deltas("q", 1, variables, columns, np.array(diffs))


def test_list_sink() -> None:
    sink = ListSink()
    count = sink.write_deltas(
        "q", 4, ["a", "b"], [np.array([1, 2]), id_column(["x", 5])], np.array([1, -1], np.int8)
    )
    assert count == 2
    assert sink.rows == [("q", 4, (1, "x"), 1), ("q", 4, (2, 5), -1)]
    assert all(type(v) is int for v in (sink.rows[0][2][0], sink.rows[0][1], sink.rows[0][3]))
    sink.flush()
    assert sink.flushes == 1


vertex_ids = st.one_of(st.integers(INT64_MIN, INT64_MAX), st.text(max_size=6))


@given(
    arity=st.integers(1, 4),
    data=st.data(),
    epoch=st.integers(0, 2**40),
    query=st.text(min_size=1, max_size=8),
)
def test_json_lines_parse_back_to_the_list_sink_rows(
    arity: int, data: st.DataObject, epoch: int, query: str
) -> None:
    n = data.draw(st.integers(0, 20))
    bindings = data.draw(st.lists(st.tuples(*[vertex_ids] * arity), min_size=n, max_size=n))
    diffs = np.array(data.draw(st.lists(st.sampled_from([1, -1]), min_size=n, max_size=n)))
    variables = [f"v{k}" for k in range(arity)]
    columns = [id_column([b[k] for b in bindings]) for k in range(arity)]
    listed = ListSink()
    listed.write_deltas(query, epoch, variables, columns, diffs.astype(np.int8))
    records, _, count = write(query, epoch, variables, columns, diffs.tolist())
    assert count == n == len(listed.rows)
    got = as_rows(records, variables)
    assert got == listed.rows
    assert [tuple(map(type, r[2])) for r in got] == [tuple(map(type, b)) for b in bindings]
    assert [r[2] for r in got] == bindings
