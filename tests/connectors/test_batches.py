"""The batched output format: values cut at line ends under the size limit, the same lines as the
JSON Lines sink, and the reader of both formats (Kafka itself: tests/kafka/test_output.py)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.batches import (
    JSONL,
    Batch,
    BatchEncoding,
    BatchInfo,
    batch_info,
    batches,
    cuts,
    read_deltas,
    read_message,
)
from connectors.sinks import JsonLinesSink
from tests.connectors.test_json_rows import deltas


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 40), max_size=30), st.integers(1, 100))
def test_cuts_take_as_many_whole_rows_as_fit(lengths: list[int], limit: int) -> None:
    ends = np.cumsum(np.array(lengths, np.int64))
    bounds = cuts(ends, limit)
    assert bounds == sorted(set(bounds)) and (bounds[-1] if bounds else 0) == len(lengths)
    start = 0
    for end in bounds:
        size = sum(lengths[start:end])
        assert size <= limit or end == start + 1, "over the limit with more than one row"
        if end < len(lengths):
            assert size + lengths[end] > limit, "the next row would have fitted"
        start = end


def jsonl(d: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    JsonLinesSink(out).write_deltas(
        d["query"], d["epoch"], d["variables"], d["columns"], d["diffs"], d["edges"], d["extra"]
    )
    return out.getvalue()


def encoded(d: dict[str, Any], limit: int, encoding: BatchEncoding) -> list[Batch]:
    """The batches of one query's deltas ``d`` (:func:`deltas`) under ``limit`` bytes."""
    return list(
        batches(
            d["query"],
            d["epoch"],
            d["variables"],
            d["columns"],
            d["diffs"],
            d["edges"],
            d["extra"],
            limit,
            encoding,
        )
    )


@settings(max_examples=200, deadline=None)
@given(deltas(), st.integers(50, 2000))
def test_batches_hold_the_json_lines_of_the_records_in_order(d: dict[str, Any], limit: int) -> None:
    got = encoded(d, limit, "jsonl")
    assert b"".join(b.value for b in got) == jsonl(d)
    assert [b.first for b in got] == list(np.cumsum([0] + [b.count for b in got])[:-1])
    assert sum(b.count for b in got) == d["diffs"].shape[0]
    for b in got:
        assert b.value.count(b"\n") == b.count and b.value.endswith(b"\n")
        assert len(b.value) <= limit or b.count == 1


def test_batch_headers_say_what_the_record_holds() -> None:
    headers = Batch(b"{}\n" * 3, first=5, count=3).headers("tri", 7, 8, b"1.2.3")
    assert dict(headers) == {
        "format": b"jsonl",
        "query": b"tri",
        "epoch": b"7",
        "count": b"3",
        "first": b"5",
        "total": b"8",
        "service-version": b"1.2.3",
    }
    info = batch_info(headers)
    assert info == BatchInfo("tri", 7, 3, 5, 8) and info.last
    assert not BatchInfo("tri", 7, 3, 0, 8).last
    assert batch_info(None) is None and batch_info([("epoch", b"7")]) is None
    with pytest.raises(ValueError, match="without the header"):
        batch_info([("format", JSONL), ("query", b"tri")])


class FakeMessage:
    """What a consumer hands over: a value and headers."""

    def __init__(self, value: bytes | None, headers: Any) -> None:
        self._value, self._headers = value, headers

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Any:
        return self._headers


def test_the_reader_gives_the_same_deltas_for_both_formats() -> None:
    rows = [
        {"query": "tri", "epoch": 3, "diff": 1, "match": {"a": 1, "b": "x\ny", "c": 3}},
        {"query": "tri", "epoch": 3, "diff": -1, "match": {"a": 4, "b": 5, "c": 6}},
    ]
    lines = b"".join(orjson.dumps(r) + b"\n" for r in rows)
    headers = Batch(lines, 0, 2).headers("tri", 3, 2, b"v")
    assert read_deltas(lines, headers) == rows
    assert read_message(FakeMessage(lines, dict(headers))) == rows
    assert [read_deltas(orjson.dumps(r)) for r in rows] == [[r] for r in rows]
    assert read_message(FakeMessage(orjson.dumps(rows[0]), None)) == [rows[0]]
    assert read_deltas(None) == [] and read_deltas(b"", headers) == []
    with pytest.raises(ValueError, match="batch format b'parquet'"):
        read_deltas(lines, [("format", "parquet")])
