"""The columnar batch encoding: a query's deltas of an epoch as Apache Arrow record batches.

With ``SGM_OUTPUT_FORMAT=batches`` and ``SGM_BATCH_ENCODING=arrow`` each batch value is an
Arrow IPC stream (a schema, then one record batch) instead of JSON Lines. Its columns are the
members of the JSON record, nested the same way, so that a row read with ``to_pylist()`` is the
JSON record without ``query`` and ``epoch`` (which the schema's metadata and the headers hold):

- ``diff``: ``int8``, ``1`` or ``-1``;
- ``match``: a struct with one child per variable, in order: ``int64`` ids, ``utf8`` ids;
- ``edges`` (a query with edge variables only): a struct with one struct per edge variable,
  its fields ``id``, ``src``, ``dst`` and the others; null where an event lacks the field;
- the extra members (``cause``, ``match_id``) where some row has them, null in the others.

A column whose values have no one Arrow type (a column of ids of both kinds, ``int`` and
``str``) holds the JSON text of each value, its field's metadata ``{"json": "true"}``;
:func:`read_arrow` parses it back. Numbers of a float field come as ``double`` (``1500.0``
where the JSON text has ``1500``). Schema metadata: ``query``, ``epoch``.

Everything is built from the columns as they are (numbers without a copy, text from its bytes)
and written once per record: 6-12 ms for 400,000 triangle deltas, 25 bytes each, where their
JSON Lines take 60-110 ms and 76 bytes each (bench/NOTES.md). ``pyarrow`` is imported on first
use, so a service that writes JSON never loads it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from connectors.delta_json import EdgeColumns
from connectors.json_rows import encode_rows, present, values
from core.columns import EXACT, Coded, Column, Member, Members

#: The ``format`` header of a batch whose value is an Arrow IPC stream.
ARROW = b"arrow"

#: The field metadata of a column that holds JSON texts.
JSON_TEXT = {b"json": b"true"}


def arrow() -> Any:
    """The ``pyarrow`` module, imported on first use (a clear error where it is missing)."""
    try:
        import pyarrow
        import pyarrow.ipc  # the submodule is not loaded by the package
    except ImportError as exc:  # pragma: no cover - the image and dev installs have it
        raise RuntimeError(
            "SGM_BATCH_ENCODING=arrow needs pyarrow: pip install 'subgraph-monitor[arrow]'"
        ) from exc
    return pyarrow


def arrow_batches(table: Any, max_bytes: int) -> Iterator[tuple[bytes, int, int]]:
    """The rows of ``table`` (a :func:`record_batch`) as Arrow IPC streams of at most
    ``max_bytes`` (one row alone may exceed it): per value its bytes, its first row and its row
    count."""
    pa = arrow()
    rows = table.num_rows
    if rows == 0:
        return
    per_row = max(1.0, stream_size(pa, table) / rows)
    step = max(1, int(0.9 * max_bytes / per_row))
    first = 0
    while first < rows:
        count = min(step, rows - first)
        value = stream_bytes(pa, table.slice(first, count))
        while len(value) > max_bytes and count > 1:
            count = max(1, count // 2)
            value = stream_bytes(pa, table.slice(first, count))
        yield value, first, count
        first += count


def record_batch(
    pa: Any,
    query: str,
    epoch: int,
    variables: Sequence[str],
    columns: Sequence[npt.NDArray[np.generic]],
    diffs: npt.NDArray[np.integer],
    edges: EdgeColumns | None,
    extra: Mapping[str, Member] | None,
) -> Any:
    """The deltas as one ``pyarrow.RecordBatch`` (the module docstring's columns)."""
    match = struct(pa, variables, columns)
    arrays = [pa.array(np.where(diffs < 0, -1, 1).astype(np.int8)), match]
    fields = [pa.field("diff", pa.int8()), pa.field("match", match.type)]
    if edges:
        events = [struct(pa, list(e), list(e.values())) for e in edges.values()]
        arrays.append(pa.StructArray.from_arrays(events, names=list(edges)))
        fields.append(pa.field("edges", arrays[-1].type))
    for name, column in (extra or {}).items():
        if isinstance(column, Members):
            arrays.append(struct(pa, list(column.columns), list(column.columns.values())))
            fields.append(pa.field(name, arrays[-1].type))
        elif present(column).any():
            array, json = column_array(pa, column)
            arrays.append(array)
            fields.append(pa.field(name, array.type, metadata=JSON_TEXT if json else None))
    schema = pa.schema(fields, metadata={"query": query, "epoch": str(int(epoch))})
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def struct(pa: Any, names: Sequence[str], columns: Sequence[Column]) -> Any:
    """A struct array of ``columns`` as children named ``names``."""
    children = [column_array(pa, c) for c in columns]
    fields = [
        pa.field(name, array.type, metadata=JSON_TEXT if json else None)
        for name, (array, json) in zip(names, children, strict=True)
    ]
    return pa.StructArray.from_arrays([array for array, _ in children], fields=fields)


def column_array(pa: Any, column: Column) -> tuple[Any, bool]:
    """An Arrow array of ``column``'s values (null where absent), and whether it holds their
    JSON texts instead (values of no one Arrow type)."""
    if isinstance(column, Coded):
        try:
            dictionary = pa.array(list(column.values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            return json_texts(pa, column), True
        codes = np.asarray(column.codes, np.int32)
        return pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0), dictionary), False
    kind = column.dtype.kind
    if kind in "iub":
        return pa.array(column), False
    if kind == "f":
        return pa.array(column, mask=np.isnan(column)), False
    if kind == "S":
        return ascii_texts(pa, column), False
    if kind == "O":
        try:
            return pa.array(column.tolist()), False
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            return json_texts(pa, column), True
    raise TypeError(f"no Arrow encoding for columns of dtype {column.dtype}")


def ascii_texts(pa: Any, column: npt.NDArray[np.generic]) -> Any:
    """``utf8`` from fixed-width ASCII (no NUL inside a value: text that needs no escaping),
    null where empty: the bytes of each value, one after another, and their offsets. Values
    that all fill the width (match ids) are the column's bytes as they are."""
    rows, width = int(column.shape[0]), column.dtype.itemsize
    cells = np.ascontiguousarray(column).view(np.uint8).reshape(rows, width)
    if width and bool(cells[:, -1].all()):
        full = np.full(rows, width, np.int64)
        return strings(pa, rows, full, cells.reshape(-1), np.ones(rows, np.bool_))
    lengths = np.count_nonzero(cells, axis=1).astype(np.int64)
    return strings(pa, rows, lengths, cells[cells != 0], lengths > 0)


def json_texts(pa: Any, column: Column) -> Any:
    """``utf8`` holding the JSON text of each value, null where absent."""
    rows = int(column.shape[0])
    text, ends = encode_rows([values(column)], rows)
    lengths = np.diff(ends, prepend=0)
    return strings(pa, rows, lengths, text, present(column))


def strings(
    pa: Any,
    rows: int,
    lengths: npt.NDArray[np.int64],
    data: npt.NDArray[np.uint8],
    valid: npt.NDArray[np.bool_],
) -> Any:
    """A ``utf8`` (``large_utf8`` past 2 GiB) array from the values' bytes one after another."""
    offsets = np.zeros(rows + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    large = offsets[-1] >= 2**31
    kind = pa.large_utf8() if large else pa.utf8()
    offsets = offsets if large else offsets.astype(np.int32)
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = rows - int(valid.sum())
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))]
    return pa.Array.from_buffers(kind, rows, buffers, null_count=nulls)


def stream_size(pa: Any, batch: Any) -> int:
    """The bytes of ``batch`` as an IPC stream, counted without writing them."""
    sink = pa.MockOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return int(sink.size())


def stream_bytes(pa: Any, batch: Any) -> bytes:
    """``batch`` as an IPC stream (its schema, then the batch)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def read_arrow(value: bytes) -> list[dict[str, Any]]:
    """The deltas of an Arrow batch as the dicts its JSON Lines would parse to: ``query`` and
    ``epoch`` from the metadata, members without a value left out, JSON texts parsed, integral
    numbers of float fields as ``int`` (as the JSON text writes them)."""
    pa = arrow()
    table = pa.ipc.open_stream(value).read_all()
    meta = table.schema.metadata or {}
    head = {"query": meta[b"query"].decode(), "epoch": int(meta[b"epoch"])}
    kinds = {f.name: f.type for f in table.schema}
    top, match = special(table.schema), special(kinds["match"])
    events = {e.name: special(e.type) for e in kinds.get("edges", [])}

    out = []
    for row in table.to_pylist():
        delta: dict[str, Any] = {**head, "diff": row.pop("diff")}
        delta["match"] = as_json(row.pop("match"), match)
        if "edges" in row:
            delta["edges"] = {n: as_json(e, events[n]) for n, e in row.pop("edges").items()}
        delta.update(as_json(row, top))
        out.append(delta)
    return out


Special = tuple[set[str], set[str]]
"""Of some fields, those holding JSON texts and those holding floats."""


def special(fields: Any) -> Special:
    """Which of ``fields`` (a schema or a struct type) hold JSON texts, and which floats."""
    import pyarrow.types as types

    json = {f.name for f in fields if f.metadata == JSON_TEXT}
    floats = {f.name for f in fields if types.is_floating(f.type)}
    return json, floats


def as_json(members: dict[str, Any], kinds: Special) -> dict[str, Any]:
    """``members`` as their JSON text would parse: without the absent ones, texts parsed,
    integral floats as ``int``."""
    json, floats = kinds
    out = {}
    for name, value in members.items():
        if value is None:
            continue
        if name in json:
            value = orjson.loads(value)
        elif name in floats and value.is_integer() and abs(value) < EXACT:
            value = int(value)
        out[name] = value
    return out
