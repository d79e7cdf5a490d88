"""The changelog's records, a whole epoch's changes at a time.

The changelog is a compacted topic that holds the current graph: one record per key, the last
one winning, a tombstone (no value) for what was deleted. Three kinds of record::

    key ["transfer",["A","B"]]          value {"epoch":7}                        a tuple
    key ["payment","tx-91"]             value {"epoch":7,"event":{"id":"tx-91",
                                              "src":"A","dst":"B","amount":1500.5}}  an event
    key ["#clock","payments:3"]         value {"epoch":7,"times":[...]}           a clock

A tuple's key holds its ids in column order; an event's value holds the fields it has (a field
it lacks is left out). Compaction needs one record per key, so each change stays one record, but
their keys and values are built from :mod:`connectors.json_rows` pieces, a few numpy operations
per batch rather than an ``orjson`` call per record; the bytes are what ``orjson.dumps`` writes
for the same lists and dicts (the tests compare the two). What is left per record is producing it.

Read back (:func:`live_batch`), the live records of a changelog are decoded the same way, a whole
changelog at a time: its keys in one ``orjson`` call, each relation's ids as columns.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from connectors.delta_json import key_pieces, object_pieces, vertex_ids
from connectors.events import EventRecord, FieldTypes, decode_event, event_updates
from connectors.json_rows import Piece, constant, encode_rows, values
from connectors.sinks import CHUNK_ROWS
from core.columns import Column
from core.errors import StateError
from core.records import EventUpdates, RelationUpdates, UpdateBatch, id_column

#: The first element of a changelog key holding an input partition's event clock.
CLOCK_KEY = "#clock"

Record = tuple[bytes, bytes | None]
"""A key and its value, ``None`` for a tombstone."""


def texts(pieces: Sequence[Piece], rows: int) -> list[bytes]:
    """Each row's text of ``pieces``."""
    data, ends = encode_rows(pieces, rows)
    text = data.tobytes()
    stops = ends.tolist()
    starts = [0, *stops[:-1]] if stops else []
    return [text[start:stop] for start, stop in zip(starts, stops, strict=True)]


def tuple_records(
    relation: str,
    epoch: int,
    columns: Sequence[npt.NDArray[np.generic]],
    diffs: npt.NDArray[np.integer],
    chunk_rows: int = CHUNK_ROWS,
) -> Iterator[Record]:
    """One record per changed tuple, in row order: key ``[relation,[ids]]``, value
    ``{"epoch":E}`` for an insert, a tombstone for a delete. ``columns[k][i]`` is the ``k``-th
    external id of row ``i`` (``int64``, or ``object`` holding ``int`` and ``str``)."""
    value = orjson.dumps({"epoch": int(epoch)})
    ids = [vertex_ids(c) for c in columns]
    for start in range(0, int(diffs.shape[0]), chunk_rows):
        part = slice(start, start + chunk_rows)
        signs = diffs[part].tolist()
        keys = texts(key_pieces(relation, [c[part] for c in ids]), len(signs))
        for key, sign in zip(keys, signs, strict=True):
            yield key, value if sign > 0 else None


def event_records(
    relation: str,
    epoch: int,
    events: Mapping[str, Column],
    diffs: npt.NDArray[np.integer],
    chunk_rows: int = CHUNK_ROWS,
) -> Iterator[Record]:
    """One record per changed event, in row order: key ``[relation,id]``, value
    ``{"epoch":E,"event":{...}}`` for an insert (``events``' columns as members, in their
    order, absent values left out), a tombstone for a delete."""
    head = constant(b"[" + orjson.dumps(relation) + b",")
    opening = constant(orjson.dumps({"epoch": int(epoch)})[:-1] + b',"event":')
    for start in range(0, int(diffs.shape[0]), chunk_rows):
        part = slice(start, start + chunk_rows)
        signs = diffs[part].tolist()
        keys = texts([head, values(events["id"][part]), constant(b"]")], len(signs))
        inserted = np.asarray(diffs[part] > 0)
        members = [(name, column[part][inserted]) for name, column in events.items()]
        bodies = iter(
            texts([opening, *object_pieces(members), constant(b"}")], int(inserted.sum()))
        )
        for key, sign in zip(keys, signs, strict=True):
            yield key, next(bodies) if sign > 0 else None


def clock_record(epoch: int, partition: str, times: Sequence[float]) -> Record:
    """The event clock of one input partition (its largest event times): key
    ``["#clock",partition]``, value ``{"epoch":E,"times":[...]}``. A handful per epoch."""
    value = orjson.dumps({"epoch": int(epoch), "times": list(times)})
    return orjson.dumps([CLOCK_KEY, partition]), value


def loads_all(texts: Sequence[bytes]) -> list[Any]:
    """Many JSON texts decoded in one call."""
    decoded: list[Any] = orjson.loads(b"[" + b",".join(texts) + b"]")
    return decoded


def live_batch(
    keys: Sequence[bytes], records: Sequence[bytes], types: FieldTypes | None
) -> tuple[UpdateBatch, dict[str, list[float]]]:
    """The live tuples and events of a changelog's last records (``keys[i]`` with value
    ``records[i]``, no tombstones), as one batch of inserts numbered in that order, and per input
    partition the event times of its clock record."""
    decoded = loads_all(keys)
    tuples: dict[str, list[int]] = {}
    events: list[int] = []
    clocks: list[int] = []
    for i, (relation, what) in enumerate(decoded):
        if relation == CLOCK_KEY:
            clocks.append(i)
        elif type(what) is list:
            tuples.setdefault(relation, []).append(i)
        else:
            events.append(i)
    not_clock = np.ones(len(decoded), np.bool_)
    not_clock[clocks] = False
    seq = np.cumsum(not_clock, dtype=np.int64) - 1
    batch = UpdateBatch(first_seq=0, count=len(decoded) - len(clocks))
    for relation, rows in tuples.items():
        batch.parts[relation] = _tuples(relation, [decoded[i][1] for i in rows], seq[rows])
    if events:
        batch.events = _events(decoded, keys, records, events, seq, types)
    times = loads_all([records[i] for i in clocks])
    clock = {
        str(decoded[i][1]): [float(t) for t in value["times"]]
        for i, value in zip(clocks, times, strict=True)
    }
    return batch, clock


def _tuples(relation: str, rows: list[list[Any]], seq: npt.NDArray[np.int64]) -> RelationUpdates:
    """Inserts of the tuples ``rows`` (lists of ids) of one relation."""
    arity = len(rows[0])
    if any(len(row) != arity for row in rows):
        raise StateError(
            f"the changelog holds tuples of {relation!r} of different arities; it was written "
            f"by something else: give this deployment a new changelog topic"
        )
    columns = [id_column(column) for column in zip(*rows, strict=True)]
    return RelationUpdates(columns, np.ones(len(rows), np.int8), seq)


def _events(
    decoded: list[Any],
    keys: Sequence[bytes],
    records: Sequence[bytes],
    at: list[int],
    seq: npt.NDArray[np.int64],
    types: FieldTypes | None,
) -> dict[str, EventUpdates]:
    """Inserts of the events whose keys are ``decoded[i]`` for ``i`` in ``at``."""
    relations = {str(decoded[i][0]) for i in at}
    unknown = sorted(relations - (types.relations if types is not None else set()))
    if types is None or unknown:
        raise StateError(
            f"the changelog holds events of {', '.join(map(repr, unknown))}, which this run's "
            f"queries do not read as events; deploy the queries that wrote it, or a new changelog"
        )
    found: dict[str, list[tuple[int, EventRecord]]] = {}
    # (a table's record is kept as the event it became: id, src and dst its key)
    stored = replace(types, tables=set())
    for i, value in zip(at, loads_all([records[i] for i in at]), strict=True):
        relation = str(decoded[i][0])
        position = f"changelog {keys[i].decode(errors='replace')}"
        event = decode_event(value["event"], relation, 1, position, stored)
        found.setdefault(relation, []).append((i, event))
    return {
        relation: event_updates(events, seq, types.types.get(relation, {}))
        for relation, events in found.items()
    }
