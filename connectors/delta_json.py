"""The JSON of match deltas, a whole batch of rows at a time.

One record per delta, the same text everywhere it is written (JSON Lines files, Kafka values)::

    {"query":"big_ring","epoch":7,"diff":1,"match":{"a":"A","b":"B","c":"C"},
     "edges":{"t1":{"id":"tx-91","src":"A","dst":"B","amount":1500.5}, ...},
     "cause":"expired","match_id":"52cf9190d9925002"}

``match`` keys in variable order, ids keeping their type; ``edges`` only for a query with edge
variables, each event with the fields it has (a field an event lacks is left out); then the
``extra`` members (``cause`` on a ``-1`` of a windowed run, ``match_id``), left out where a row
has none. The Kafka key is ``[query, [vertex ids]]``, with ``[event ids]`` appended for a query
with edge variables.

Everything is built from :mod:`connectors.json_rows` pieces, so a batch of a million deltas is a
few dozen numpy operations, never a dict per delta; the text is byte for byte what ``orjson``
writes for the same records as dicts (the tests compare the two).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import orjson

from connectors import json_place
from connectors.json_rows import Piece, constant, encode_rows, present, values, where
from core.columns import Column, EventRows, Member, Members

EdgeColumns = Mapping[str, Mapping[str, Column]]
"""Per edge variable, per field (``id``, ``src``, ``dst``, then the others), a column."""

Memo = dict[int, Piece]
"""The text of columns already encoded, by ``id`` of the column array (alive for the call)."""


def vertex_ids(column: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
    """A column of vertex ids fit to encode: integers, or ``object`` holding ``int`` and
    ``str`` (numpy integers in it become ``int``); ``TypeError`` for anything else."""
    if column.dtype.kind in "iu":
        return column
    if column.dtype != object:
        raise TypeError(f"id columns must be integer or object arrays, got dtype {column.dtype}")
    items = column.tolist()
    if set(map(type, items)) <= {int, str}:
        return column
    out = np.empty(len(items), object)
    out[:] = [_id(item) for item in items]
    return out


def _id(item: object) -> int | str:
    """One id of an ``object`` column as a plain ``int`` or ``str``."""
    if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
        return int(item)
    if isinstance(item, str):
        return str(item)
    raise TypeError(f"vertex ids are int or str, got {type(item).__name__} {item!r}")


@dataclass(frozen=True)
class DeltaRows:
    """Some rows of one query's deltas: vertex id columns, diffs, events, extra members."""

    columns: list[npt.NDArray[np.generic]]
    diffs: npt.NDArray[np.integer]
    edges: dict[str, Mapping[str, Column]]
    extra: dict[str, Member]

    @property
    def rows(self) -> int:
        return int(self.diffs.shape[0])


def chunks(
    columns: Sequence[npt.NDArray[np.generic]],
    diffs: npt.NDArray[np.integer],
    edges: EdgeColumns | None,
    extra: Mapping[str, Member] | None,
    size: int,
) -> Iterator[DeltaRows]:
    """The deltas ``size`` rows at a time (bounding the memory their text needs on its way
    out), vertex ids checked once (:func:`vertex_ids`)."""
    columns = [vertex_ids(c) for c in columns]
    for start in range(0, int(diffs.shape[0]), size):
        part = slice(start, start + size)
        yield DeltaRows(
            [c[part] for c in columns],
            diffs[part],
            {v: _rows_of(e, part) for v, e in (edges or {}).items()},
            {k: c[part] for k, c in (extra or {}).items()},
        )


def _rows_of(events: Mapping[str, Column], part: slice) -> Mapping[str, Column]:
    """``part``'s rows of an edge variable's columns (its distinct events kept apart)."""
    if isinstance(events, EventRows):
        return events.take(part)
    return {f: c[part] for f, c in events.items()}


def value_pieces(
    query: str,
    epoch: int,
    variables: Sequence[str],
    columns: Sequence[npt.NDArray[np.generic]],
    diffs: npt.NDArray[np.integer],
    edges: EdgeColumns | None = None,
    extra: Mapping[str, Member] | None = None,
    *,
    memo: Memo | None = None,
) -> list[Piece]:
    """The pieces of each row's record, from ``{`` to the closing ``}``."""
    head = orjson.dumps({"query": query, "epoch": int(epoch)})[:-1]
    pieces = [constant(head + b',"diff":'), signs(diffs), constant(b',"match":')]
    pieces += object_pieces(list(zip(variables, columns, strict=True)), memo=memo)
    if edges:
        pieces.append(constant(b',"edges":{'))
        for k, (name, fields) in enumerate(edges.items()):
            pieces.append(constant(b"," * (k > 0) + orjson.dumps(name) + b":"))
            if isinstance(fields, EventRows) and json_place.COMPILED:
                pieces.append(event_objects(fields))
            else:
                pieces += object_pieces(list(fields.items()), memo=memo)
        pieces.append(constant(b"}"))
    for name, column in (extra or {}).items():
        if isinstance(column, Members):
            pieces.append(constant(b"," + orjson.dumps(name) + b":"))
            pieces += object_pieces(list(column.columns.items()), memo=memo)
            continue
        has = present(column)
        if has.any():
            member = constant(b"," + orjson.dumps(name) + b":")
            pieces += [where(member, has), texts(column, memo)]
    pieces.append(constant(b"}"))
    return pieces


def key_pieces(
    query: str,
    columns: Sequence[npt.NDArray[np.generic]],
    edge_ids: Sequence[Column] = (),
    *,
    memo: Memo | None = None,
) -> list[Piece]:
    """The pieces of each row's Kafka key: ``[query,[ids...]]`` or ``[query,[ids],[event
    ids]]``."""
    pieces = [constant(b"[" + orjson.dumps(query) + b",")]
    pieces += array_pieces(columns, memo=memo)
    if edge_ids:
        pieces += [constant(b","), *array_pieces(edge_ids, memo=memo)]
    pieces.append(constant(b"]"))
    return pieces


NEWLINE = constant(b"\n")


def record_pieces(query: str, epoch: int, variables: Sequence[str], part: DeltaRows) -> list[Piece]:
    """Per row its Kafka key, a newline, its value and a newline: the keys and values of
    many deltas as one text, in which each column's values are written once for both."""
    memo: Memo = {}
    edge_ids = [fields["id"] for fields in part.edges.values()]
    key = key_pieces(query, part.columns, edge_ids, memo=memo)
    value = value_pieces(
        query, epoch, variables, part.columns, part.diffs, part.edges, part.extra, memo=memo
    )
    return [*key, NEWLINE, *value, NEWLINE]


def keys_and_values(
    query: str, epoch: int, variables: Sequence[str], part: DeltaRows
) -> tuple[list[bytes], list[bytes]]:
    """The Kafka key and value of every row, as ``bytes`` each (what ``produce`` takes): one
    encoding (:func:`record_pieces`) and one C-level split of its text at the newlines. JSON
    text never holds a raw newline (``orjson`` escapes control characters in strings)."""
    text, _ = encode_rows(record_pieces(query, epoch, variables, part), part.rows)
    items = text.tobytes().split(b"\n")
    if len(items) != 2 * part.rows + 1:
        raise ValueError(f"{part.rows} records split into {len(items)} texts: a raw newline")
    return items[0:-1:2], items[1::2]


def texts(column: Column, memo: Memo | None) -> Piece:
    """:func:`~connectors.json_rows.values` of ``column``, once per column with a memo."""
    if memo is None:
        return values(column)
    found = memo.get(id(column))
    if found is None:
        found = memo[id(column)] = values(column)
    return found


def array_pieces(columns: Sequence[Column], *, memo: Memo | None = None) -> list[Piece]:
    """``[v1,v2,...]`` per row, one value of each column (none absent)."""
    pieces = [constant(b"[")]
    for k, column in enumerate(columns):
        if k:
            pieces.append(constant(b","))
        pieces.append(texts(column, memo))
    pieces.append(constant(b"]"))
    return pieces


def event_objects(events: EventRows) -> Piece:
    """``{"id":...,"src":...}`` per row: the object of each distinct event written once
    (:func:`object_pieces` over the table), then placed in every row that holds it."""
    text, ends = encode_rows(object_pieces(list(events.table.items())), events.distinct)
    lengths = np.diff(ends, prepend=0)
    codes = events.codes
    return Piece(text.reshape(1, -1), None, lengths[codes], (ends - lengths)[codes])


def object_pieces(
    members: Sequence[tuple[str, Column]], *, memo: Memo | None = None
) -> list[Piece]:
    """``{"k":v,...}`` per row, leaving out the members a row has no value for."""
    pieces = [constant(b"{")]
    rows = members[0][1].shape[0] if members else 0
    seen = np.zeros(rows, np.bool_)
    for name, column in members:
        has = present(column)
        if seen.all():
            comma = constant(b",")
        elif seen.any():
            comma = where(constant(b","), seen)
        else:
            comma = None
        if comma is not None:
            pieces.append(comma if has.all() else where(comma, has))
        pieces += [where(constant(orjson.dumps(name) + b":"), has), texts(column, memo)]
        seen = seen | has  # not in place: a piece above may hold a view of it
    pieces.append(constant(b"}"))
    return pieces


_SIGN_CELLS = np.frombuffer(b"-1", np.uint8)


def signs(diffs: npt.NDArray[np.integer]) -> Piece:
    """``1`` or ``-1`` per row."""
    negative = np.asarray(diffs < 0)
    if not negative.any():
        return constant(b"1")
    cells = np.broadcast_to(_SIGN_CELLS, (negative.shape[0], 2))
    return Piece(cells, None, (1 + negative).astype(np.int64), (1 - negative).astype(np.int64))
