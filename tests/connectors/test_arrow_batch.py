"""The columnar batch encoding (Arrow IPC streams): the same deltas as the JSON Lines batches, by
the package's reader and by plain pyarrow, values under the size limit, typed columns."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.arrow_batch import ARROW, JSON_TEXT
from connectors.batches import Batch, batch_info, batches, read_deltas
from core.columns import Coded, python_values
from tests.connectors.test_batches import encoded
from tests.connectors.test_json_rows import deltas


def typed(value: Any) -> Any:
    """``value`` with the type of every scalar in it (``1500`` and ``1500.0`` differ)."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    return (type(value), value)


def read(got: list[Batch], d: dict[str, Any]) -> list[dict[str, Any]]:
    total = int(d["diffs"].shape[0])
    return [
        r for b in got for r in read_deltas(b.value, b.headers(d["query"], d["epoch"], total, b"v"))
    ]


@settings(max_examples=200, deadline=None)
@given(deltas(), st.sampled_from([3_000, 6_000, 1_000_000]))
def test_arrow_batches_hold_the_deltas_of_the_json_lines(d: dict[str, Any], limit: int) -> None:
    """Read back, every row is the dict its JSON line parses to, in the same order, and types
    too (ints stay ints, absent members are left out); values are cut at whole rows under the
    limit."""
    got = encoded(d, limit, "arrow")
    want = read(encoded(d, 10**9, "jsonl"), d)
    rows = read(got, d)
    assert rows == want
    assert [typed(r) for r in rows] == [typed(r) for r in want]
    assert [b.first for b in got] == list(np.cumsum([0] + [b.count for b in got])[:-1])
    assert sum(b.count for b in got) == d["diffs"].shape[0]
    for b in got:
        assert b.format == ARROW and (len(b.value) <= limit or b.count == 1)
        info = batch_info(b.headers(d["query"], d["epoch"], len(want), b"v"))
        assert info is not None and info.count == b.count


def test_a_plain_arrow_reader_sees_typed_columns() -> None:
    """What a consumer with any Arrow library gets: ids as int64 or utf8, diffs as int8, event
    fields with their types and nulls, dictionary-coded strings; a column of ids of both kinds
    as their JSON texts, marked in its field's metadata."""
    ids = np.array([7, -3, 2**40])
    names = np.empty(3, object)
    names[:] = ["acct-1", "é\u0000", "x"]
    mixed = np.empty(3, object)
    mixed[:] = [1, "1", "b"]
    notes = np.empty(3, object)
    notes[:] = [True, None, "x"]
    edges = {
        "t1": {
            "id": names,
            "src": ids,
            "dst": mixed,
            "amount": np.array([1500.0, np.nan, 0.5]),
            "channel": Coded(np.array([1, -1, 0], np.int32), ["wire", "card"]),
            "note": notes,
            "code": np.array([b"ab", b"", b"c"], "S2"),
        }
    }
    extra = {
        "cause": Coded(np.array([-1, 0, -1]), ["expired"]),
        "match_id": np.array([b"00ff", b"0a0b", b"1234"], "S4"),
    }
    diffs = np.array([1, -1, 1], np.int8)
    (batch,) = batches("ring", 4, ["a", "b"], [ids, names], diffs, edges, extra, 10**6, "arrow")
    table = pa.ipc.open_stream(batch.value).read_all()
    assert table.schema.metadata == {b"query": b"ring", b"epoch": b"4"}
    assert table.column("diff").type == pa.int8() and table.column("diff").to_pylist() == [1, -1, 1]
    match = table.column("match").combine_chunks()
    assert match.field("a").type == pa.int64() and match.field("a").to_pylist() == ids.tolist()
    assert match.field("b").type == pa.utf8() and match.field("b").to_pylist() == list(names)
    event = table.column("edges").combine_chunks().field("t1")
    assert event.field("amount").to_pylist() == [1500.0, None, 0.5]
    assert event.field("channel").type == pa.dictionary(pa.int32(), pa.utf8())
    assert event.field("channel").to_pylist() == ["card", None, "wire"]
    dst = event.type.field("dst")
    assert dst.metadata == JSON_TEXT and event.field("dst").to_pylist() == ["1", '"1"', '"b"']
    assert event.field("note").to_pylist() == ["true", None, '"x"']
    assert event.field("code").to_pylist() == ["ab", None, "c"]
    assert table.column("cause").to_pylist() == [None, "expired", None]
    assert table.column("match_id").to_pylist() == ["00ff", "0a0b", "1234"]
    (row,) = [r for r in read_deltas(batch.value, [("format", ARROW)]) if r["diff"] < 0]
    assert row["edges"]["t1"] == {"id": "é\u0000", "src": -3, "dst": "1"}
    first = first_row(batch)["edges"]["t1"]
    assert typed(first["amount"]) == (int, 1500) and first["note"] is True
    assert (
        row["cause"] == "expired"
        and "cause" not in read_deltas(batch.value, [("format", ARROW)])[0]
    )


def first_row(batch: Batch) -> dict[str, Any]:
    return read_deltas(batch.value, [("format", ARROW)])[0]


def test_a_large_epoch_goes_out_in_records_under_the_limit() -> None:
    rows = 100_000
    columns = [np.arange(rows, dtype=np.int64) * k for k in (1, 2, 3)]
    diffs = np.where(np.arange(rows) % 3 == 0, -1, 1).astype(np.int8)
    got = list(batches("tri", 1, ["a", "b", "c"], columns, diffs, None, None, 200_000, "arrow"))
    assert len(got) > 10 and all(len(b.value) <= 200_000 for b in got)
    assert sum(b.count for b in got) == rows
    back = [r for b in got for r in read_deltas(b.value, [("format", ARROW)])]
    assert [r["match"]["c"] for r in back] == python_values(columns[2])
    assert [r["diff"] for r in back] == diffs.tolist()
