"""Events in the durable store: an epoch's event changes and an event store's live events as bytes.

What is stored of an event relation is what it *is*, its live events, never the relations the
index derives from them (the pairs and ``#events`` relations of each selection, rebuilt on load
by :meth:`~monitor.index.event_relations.EventIndex.rebuild`). Eids and slots are stored as
they are, so a restarted run numbers events as the run it continues did (the order of output
rows within an epoch follows them): the store's id dictionary is kept like the vertex
dictionary, appended per epoch. One *record* holds one relation's events in order, whole
columns at a time (little-endian)::

    rel:u16 size:u32 n:u32 diff:int8[n] eid:int32[n] slot:int32[n] src:int32[n] dst:int32[n]
    fields:u16, per field: name_length:u16 name:utf8 kind:u8 column

``size`` is the store's eid count after the record; ``src``/``dst`` are dense vertex ids. A
string column holds *values*: kind:u8[n] (0 int, 1 string, 2 absent), int64[n], the strings'
lengths in characters u32[s], the text's length in bytes u32, then the UTF-8 text. A number
column is float64[n] (NaN absent), a bool column int8[n] (-1 absent). An eid is born once and
dies at most once, so replaying records in order gives the live events back.

Per relation, its records are its snapshot blocks (``F``), then its log records by epoch (``G``,
keyed by relation, then epoch), and its ids are ``I`` blobs (:mod:`monitor.index.store` has
the key layout). A compaction renumbers a relation's eids and slots, so the epoch that
compacts writes the relation anew, whole (:func:`put_relation`): every older key of it goes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from core.fields import KINDS, absent_column, column_kind
from monitor.index.events import EventChanges, EventStore
from monitor.index.field_columns import StringPool
from monitor.index.levels import I32

if TYPE_CHECKING:
    from monitor.index.graph import GraphIndex

#: Key prefixes of the events in the state store (:mod:`monitor.index.store`): snapshot blocks,
#: log records, ids.
SNAPSHOT, LOG, IDS = b"F", b"G", b"I"

_VALUE_INT, _VALUE_STRING, _VALUE_ABSENT = 0, 1, 2


def pack_values(values: npt.NDArray[np.generic]) -> bytes:
    """A column of ints, strings and ``None`` as bytes (whole-column work; the strings are
    joined into one text, so no Python call per value)."""
    n = values.shape[0]
    if values.dtype == np.int64:
        kinds = np.zeros(n, np.uint8)
        ints = values.astype("<i8")
        strings: list[str] = []
    else:
        is_int = np.fromiter(map(_is_int, values), np.bool_, n)
        is_string = np.fromiter(map(_is_str, values), np.bool_, n)
        kinds = np.full(n, _VALUE_ABSENT, np.uint8)
        kinds[is_int] = _VALUE_INT
        kinds[is_string] = _VALUE_STRING
        ints = np.zeros(n, "<i8")
        ints[is_int] = values[is_int].astype(np.int64)
        strings = values[is_string].tolist()
    lengths = np.fromiter(map(len, strings), "<u4", len(strings))
    text = "".join(strings).encode()
    head = [kinds.tobytes(), ints.tobytes(), lengths.tobytes(), struct.pack("<I", len(text))]
    return b"".join([*head, text])


def unpack_values(blob: bytes, n: int, at: int) -> tuple[npt.NDArray[np.generic], int]:
    """The column :func:`pack_values` wrote at ``at`` (``int64`` if all ints, else ``object``)
    and where the next part starts."""
    kinds = np.frombuffer(blob, np.uint8, n, at)
    ints = np.frombuffer(blob, "<i8", n, at + n).astype(np.int64)
    at += 9 * n
    count = int((kinds == _VALUE_STRING).sum())
    lengths = np.frombuffer(blob, "<u4", count, at).astype(np.int64)
    (used,) = struct.unpack_from("<I", blob, at + 4 * count)
    at += 4 * count + 4
    if count == 0 and (kinds == _VALUE_INT).all():
        return ints, at
    text = blob[at : at + used].decode()
    if len(text) != int(lengths.sum()):
        raise ValueError(f"a text of {int(lengths.sum())} characters holds {len(text)}")
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]] if count else []
    out = np.empty(n, dtype=object)
    out[kinds == _VALUE_INT] = ints[kinds == _VALUE_INT].tolist()
    strings = np.empty(count, dtype=object)
    strings[:] = [text[a:b] for a, b in zip(starts, ends, strict=True)]
    out[kinds == _VALUE_STRING] = strings
    return out, at + used


@dataclass(frozen=True)
class EventRecord:
    """One relation's events: eids with their +1/-1, slots, dense pairs and field columns
    (:func:`core.fields.to_column` kinds), and the store's eid count after them."""

    rel_id: int
    size: int
    eids: I32
    diff: npt.NDArray[np.int8]
    slots: I32
    src: I32
    dst: I32
    fields: dict[str, npt.NDArray[np.generic]]


def pack_record(record: EventRecord) -> bytes:
    n = record.eids.shape[0]
    parts = [
        struct.pack("<HII", record.rel_id, record.size, n),
        record.diff.astype(np.int8).tobytes(),
        *(c.astype("<i4").tobytes() for c in (record.eids, record.slots, record.src, record.dst)),
        struct.pack("<H", len(record.fields)),
    ]
    for name, column in record.fields.items():
        encoded = name.encode()
        kind = _kind(column)
        parts.append(struct.pack("<H", len(encoded)) + encoded + struct.pack("<B", kind))
        if column.dtype == object:
            parts.append(pack_values(column))
        else:
            parts.append(column.astype("<f8" if column.dtype == np.float64 else "<i1").tobytes())
    return b"".join(parts)


def unpack_records(blob: bytes) -> Iterator[EventRecord]:
    """The records of a blob, in order."""
    at = 0
    while at < len(blob):
        rel_id, size, n = struct.unpack_from("<HII", blob, at)
        at += 10
        diff = np.frombuffer(blob, np.int8, n, at).copy()
        at += n
        eids, slots, src, dst = (
            np.frombuffer(blob, "<i4", n, at + 4 * n * k).astype(np.int32) for k in range(4)
        )
        at += 16 * n
        (count,) = struct.unpack_from("<H", blob, at)
        at += 2
        fields: dict[str, npt.NDArray[np.generic]] = {}
        for _ in range(count):
            (length,) = struct.unpack_from("<H", blob, at)
            name = blob[at + 2 : at + 2 + length].decode()
            (kind,) = struct.unpack_from("<B", blob, at + 2 + length)
            at += 3 + length
            if KINDS[kind] == "string":
                fields[name], at = unpack_values(blob, n, at)
            elif KINDS[kind] == "number":
                fields[name] = np.frombuffer(blob, "<f8", n, at).astype(np.float64)
                at += 8 * n
            else:
                fields[name] = np.frombuffer(blob, np.int8, n, at).copy()
                at += n
        yield EventRecord(rel_id, size, eids, diff, slots, src, dst, fields)
    if at != len(blob):
        raise ValueError(f"event record of {len(blob)} bytes has {at - len(blob)} bytes missing")


def changes_record(rel_id: int, store: EventStore, eids: I32, diff: npt.NDArray[np.int8]) -> bytes:
    """An epoch's committed changes of ``store`` (eids and their +1/-1) as a record; only
    inserted events carry their pair and fields."""
    return pack_record(_record(rel_id, store, eids, diff.astype(np.int8)))


def event_log(
    stores: dict[str, EventStore],
    changes: Mapping[str, EventChanges],
    relations: Mapping[str, tuple[int, int]],
) -> dict[str, bytes]:
    """The epoch's event changes (:attr:`EventIndex.changed
    <monitor.index.event_relations.EventIndex.changed>`): a record per event relation that
    changed."""
    out = {}
    for name, store in sorted(stores.items()):
        change = changes.get(name)
        if change is not None and change.eids.shape[0]:
            out[name] = changes_record(relations[name][0], store, change.eids, change.diff)
    return out


def snapshot_records(rel_id: int, store: EventStore, block: int) -> Iterator[bytes]:
    """The live events of ``store`` as records of at most ``block`` events (at least one, so
    the eid count is stored even when no event is live)."""
    live = np.flatnonzero(store.alive[: store.size]).astype(np.int32)
    for lo in range(0, max(live.shape[0], 1), block):
        eids = live[lo : lo + block]
        yield pack_record(_record(rel_id, store, eids, np.ones(eids.shape[0], np.int8)))


def _record(rel_id: int, store: EventStore, eids: I32, diff: npt.NDArray[np.int8]) -> EventRecord:
    inserted = diff > 0
    fields: dict[str, npt.NDArray[np.generic]] = {}
    for name, column in store.fields.items():
        raw = column.get(eids)
        if column.kind == "string":
            strings = np.empty(len(column.pool.strings) + 1, dtype=object)
            strings[:-1] = column.pool.strings
            strings[-1] = None  # code -1 (absent) indexes the last entry
            raw = strings[np.where(inserted, raw, -1)]
        fields[name] = raw
    pairs = (store.src[eids], store.dst[eids])
    return EventRecord(rel_id, store.size, eids, diff, store.slot[eids], *pairs, fields)


def log_key(rel_id: int, epoch: int) -> bytes:
    """The key of an epoch's event log record of one relation."""
    return LOG + struct.pack(">HQ", rel_id, epoch)


def ids_key(rel_id: int, first: int) -> bytes:
    """The key of one relation's event ids from slot ``first``."""
    return IDS + struct.pack(">HI", rel_id, first)


def put_relation(batch: Any, rel_id: int, records: Iterable[bytes], ids: bytes) -> int:
    """Into the write ``batch``: everything stored of one event relation replaced by its
    snapshot ``records`` (:func:`snapshot_records`) and its whole id dictionary ``ids``;
    returns the bytes written."""
    for prefix in (SNAPSHOT, LOG, IDS):
        start = prefix + struct.pack(">H", rel_id)
        batch.delete_range(start, start + b"\xff" * 9)  # past every key of the relation
    written = 0
    for block, blob in enumerate(records):
        batch.put(SNAPSHOT + struct.pack(">HI", rel_id, block), blob)
        written += len(blob)
    batch.put(ids_key(rel_id, 0), ids)
    return written + len(ids)


def load_events(
    index: GraphIndex,
    names: Mapping[int, str],
    scan: Callable[[bytes], Iterable[tuple[bytes, bytes]]],
) -> None:
    """Fill the event stores of ``index`` (created where missing, sharing one string pool) of
    the relations ``names`` (by relation id) from the keys ``scan`` finds under a prefix."""
    records: dict[int, list[EventRecord]] = {rel_id: [] for rel_id in names}
    for prefix in (SNAPSHOT, LOG):  # per relation, its snapshot blocks, then its epochs
        for _, blob in scan(prefix):
            for record in unpack_records(blob):
                records[record.rel_id].append(record)
    pool = next((s.pool for s in index.event_stores.values()), StringPool())
    stores = {}
    for rel_id, name in names.items():
        stores[rel_id] = index.event_stores.setdefault(name, EventStore(name, pool=pool))
        if stores[rel_id].size:
            raise ValueError(f"event store {name} is not empty before loading")
    for key, blob in scan(IDS):
        rel_id, first = struct.unpack(">HI", key[1:7])
        if first != len(stores[rel_id].ids):
            raise ValueError(f"event ids from {first}, expected {len(stores[rel_id].ids)}")
        stores[rel_id].ids.restore(blob)
    for rel_id in sorted(names):
        load_records(stores[rel_id], records[rel_id])


def load_records(store: EventStore, records: list[EventRecord]) -> int:
    """Replay ``records`` (one relation's, in stored order) into ``store``, whose id
    dictionary is loaded and which holds no event yet; returns the number of live events."""
    if not records:
        return 0
    eids = np.concatenate([r.eids for r in records])
    diff = np.concatenate([r.diff for r in records])
    inserted = diff > 0
    rows = [r.eids.shape[0] for r in records]
    fields = _concat_fields(records, rows)
    store.restore(
        records[-1].size,
        eids[inserted],
        np.concatenate([r.slots for r in records])[inserted],
        np.concatenate([r.src for r in records])[inserted],
        np.concatenate([r.dst for r in records])[inserted],
        {name: column[inserted] for name, column in fields.items()},
        eids[~inserted],
    )
    return len(store)


def _concat_fields(
    records: list[EventRecord], rows: list[int]
) -> dict[str, npt.NDArray[np.generic]]:
    kinds: dict[str, str] = {}
    for record in records:
        for name, column in record.fields.items():
            kinds.setdefault(name, column_kind(column))
    return {
        name: np.concatenate(
            [r.fields.get(name, absent_column(kind, n)) for r, n in zip(records, rows, strict=True)]
        )
        for name, kind in kinds.items()
    }


def _kind(column: npt.NDArray[np.generic]) -> int:
    if column.dtype == object:
        return KINDS.index("string")
    return KINDS.index("number" if column.dtype == np.float64 else "bool")


def _is_int(value: object) -> bool:
    return type(value) is int or isinstance(value, np.integer)


def _is_str(value: object) -> bool:
    return isinstance(value, str)
