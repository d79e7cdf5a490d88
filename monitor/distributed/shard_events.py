"""One shard's events: the events whose ids it owns, their windows, and the time orders of the
vertices it owns.

An event belongs to the shard its id's stable hash names
(:func:`~monitor.distributed.vertices.owners`), so every update of one id reaches one shard, in
stream order, and that shard's :class:`~monitor.index.events.EventStore` (the single process's)
applies it with the same set semantics: an id deleted and inserted again is a new event. The
engine's eid is ``local * S + shard``: its fields and ends are read at ``eid % S`` under
``eid // S``. A relation with a window has its :class:`~monitor.index.window.ExpiryQueue` here,
so each event expires where it lives; the driver keeps only the clock and sends each epoch's tick.

The time orders read by vertex live where the vertex is (:mod:`monitor.distributed.time_orders`).

Everything here follows the epoch protocol of the shard: staged, then committed or aborted.
A store is compacted after a commit by the single process's rule (:meth:`ShardEvents.compact`);
the driver renumbers its events in the derived relations of every shard. Global eids are int32,
as the single process's: a shard numbers at most ``2**31 / S`` events of a relation between two
compactions, and one more is refused with that said.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from core.columns import Coded, Column
from core.errors import MonitorError
from core.fields import FieldTest
from core.times import TIME_FIELD
from monitor.index import id_columns
from monitor.index.compaction import compact_pool, compact_store, due, pool_due
from monitor.index.event_relations import reborn_decide_expiry
from monitor.index.event_state import (
    changes_record,
    load_records,
    snapshot_records,
    unpack_records,
)
from monitor.index.events import EventStore
from monitor.index.field_columns import StringPool
from monitor.index.levels import I8, I32, I64
from monitor.index.time_kernels import F64
from monitor.index.unique import first_appearances, shared_count
from monitor.index.window import ExpiryQueue

#: Events a snapshot record holds at most.
EVENT_BLOCK = 1 << 16


@dataclass(frozen=True)
class EventRequest:
    """One epoch's updates of one event relation that a shard owns (ends as global vertex ids,
    inserts only), and the epoch's tick: the watermark it begins with and its last ``seq``
    (None: no event time)."""

    relation: str
    ids: npt.NDArray[Any]
    insert: npt.NDArray[np.bool_]
    seq: I64
    src: I32
    dst: I32
    fields: dict[str, npt.NDArray[Any]]
    tick: tuple[float, int] | None


@dataclass(frozen=True)
class EventLog:
    """What a shard writes of one event relation: its id in the shard's directory, records
    (:func:`~monitor.index.event_state.pack_record` s) and the ids numbered (first slot and
    blob; None: none)."""

    rel_id: int
    records: list[bytes]
    ids: tuple[int, bytes] | None
    #: Whether ``records`` are the relation's live events whole and ``ids`` its whole id
    #: dictionary (after a compaction renumbered them), not an epoch's changes.
    whole: bool = False


@dataclass(frozen=True)
class StagedEvents:
    """A shard's effective changes of one event relation in an epoch: global eids, +1/-1, the
    deciding ``seq``, the events' ends and times (NaN: none), per selection whether each
    passes it; the eids that expired, and how many ids were deleted and inserted again."""

    eids: I32
    diff: I8
    seq: I64
    src: I32
    dst: I32
    ts: F64
    selected: list[npt.NDArray[np.bool_]]
    expired: I32
    replaced: int


@dataclass(frozen=True)
class Renumbered:
    """The events of a compacted relation whose eid changed: old and new global eids, ends,
    times and selections."""

    relation: str
    old: I32
    new: I32
    src: I32
    dst: I32
    ts: F64
    selected: list[npt.NDArray[np.bool_]]


#: The largest global eid (int32, as the single process's).
EID_MAX = np.iinfo(np.int32).max


class EventCapacityError(MonitorError):
    """A shard would number an event past the int32 global eids."""


class ShardEvents:
    """Shard ``shard`` of ``shards``'s event stores and windows."""

    def __init__(self, shard: int, shards: int) -> None:
        self.shard = shard
        self.shards = shards
        self.pool = StringPool()
        self.stores: dict[str, EventStore] = {}
        #: Per event relation: its selections' tests, and its retention (ms; absent: none).
        self.selections: dict[str, list[tuple[FieldTest, ...]]] = {}
        self.retention: dict[str, float] = {}
        self.queues: dict[str, ExpiryQueue] = {}
        self._expired_below = -math.inf
        self._configured: tuple[dict[str, Any], dict[str, float], list[str]] | None = None
        #: The relations compacted since the last epoch written (:meth:`logged`).
        self._compacted: set[str] = set()
        #: Per event relation, the ids written so far (:meth:`logged`).
        self._exported: dict[str, int] = {}

    def configure(
        self,
        selections: Mapping[str, list[tuple[FieldTest, ...]]],
        retention: Mapping[str, float],
        tables: Sequence[str] = (),
    ) -> None:
        """The event relations, each with its selections' tests, the finite retentions, and
        the tables (whose stores replace a present id's event)."""
        self._configured = (dict(selections), dict(retention), list(tables))
        for relation, tests in selections.items():
            upsert = relation in tables
            self.stores.setdefault(relation, EventStore(relation, pool=self.pool, upsert=upsert))
            self.selections[relation] = list(tests)
        for relation, ms in retention.items():
            if math.isfinite(ms) and relation in self.stores:
                self.retention[relation] = ms
                self.queues.setdefault(relation, ExpiryQueue())

    def emptied(self) -> ShardEvents:
        """A new, empty shard of events configured as this one."""
        fresh = ShardEvents(self.shard, self.shards)
        if self._configured is not None:
            fresh.configure(*self._configured)
        return fresh

    def _global(self, eids: I32) -> I32:
        wide = eids.astype(np.int64) * self.shards + self.shard
        if wide.shape[0] and int(wide.max()) > EID_MAX:
            raise EventCapacityError(
                f"shard {self.shard} of {self.shards} has numbered {int(eids.max()) + 1:,} "
                f"events of one relation since its last compaction: global event ids are "
                f"int32, so at most {EID_MAX // self.shards:,} a shard; compact more often "
                f"(SGM_EVENT_COMPACTION_MIN) or keep fewer events (a shorter window)"
            )
        return wide.astype(np.int32)

    def _local(self, eids: npt.NDArray[np.integer]) -> I32:
        return (eids.astype(np.int64) // self.shards).astype(np.int32)

    def stage(self, request: EventRequest, ignored: Counter[str]) -> StagedEvents:
        """Expire the events due at the tick's watermark, then apply the updates, as the single
        process's :class:`~monitor.index.event_relations.EventIndex` does for the relation."""
        relation = request.relation
        store = self.stores[relation]
        expired = np.empty(0, np.int32)
        queue = self.queues.get(relation)
        if queue is not None and request.tick is not None:
            before, seq = request.tick
            expired = store.expire(queue.due(before), seq)
            self._expired_below = before
        if request.ids.shape[0]:
            changed = store.stage(
                request.ids,
                request.insert,
                request.seq,
                request.src,
                request.dst,
                request.fields,
                ignored,
            )
            if expired.shape[0]:
                reborn_decide_expiry(store, changed, expired)
        else:
            changed = store.staged_changes
        eids = changed.eids
        born, died = eids[changed.diff > 0], eids[changed.diff < 0]
        column = store.fields.get(TIME_FIELD)
        ts = column.get(eids) if column is not None else np.full(eids.shape[0], np.nan)
        if queue is not None:
            deadlines = ts[changed.diff > 0] + self.retention[relation]
            queue.add(born[: deadlines.shape[0]], deadlines)
        return StagedEvents(
            self._global(eids),
            changed.diff,
            changed.seq,
            store.src[eids],
            store.dst[eids],
            np.asarray(ts, np.float64),
            [store.select(eids, tests) for tests in self.selections[relation]],
            self._global(expired),
            shared_count(store.slot[died], store.slot[born]),
        )

    def commit(self) -> None:
        for store in self.stores.values():
            store.commit()
        for queue in self.queues.values():
            queue.commit(self._expired_below)

    def abort(self) -> None:
        for store in self.stores.values():
            store.abort()
        for queue in self.queues.values():
            queue.abort()

    # Durability (:mod:`monitor.distributed.shard_store`): records in the single process's
    # formats (:mod:`monitor.index.event_state`), the id dictionaries appended as they grow.

    def _new_ids(self, relation: str) -> tuple[int, bytes] | None:
        """The ids numbered since the last call (their first slot and blob), or None."""
        ids = self.stores[relation].ids
        start = self._exported.get(relation, 0)
        if len(ids) == start:
            return None
        self._exported[relation] = len(ids)
        return start, ids.export(start)

    def logged(self) -> dict[str, EventLog]:
        """Per event relation, the staged epoch's changes as a record (None: none) and the
        ids it numbered (None: none); a relation compacted since the last epoch written, its
        live events and ids whole (:meth:`snapshot`'s, with the epoch)."""
        out = {}
        whole = self.snapshot(self._compacted)
        self._compacted = set()
        for rel_id, (relation, store) in enumerate(sorted(self.stores.items())):
            if relation in whole:
                out[relation] = whole[relation]
                continue
            changes = store.staged_changes
            record = None
            if changes.eids.shape[0]:
                record = changes_record(rel_id, store, changes.eids, changes.diff)
            out[relation] = EventLog(
                rel_id, [] if record is None else [record], self._new_ids(relation)
            )
        return out

    def snapshot(self, relations: set[str] | None = None) -> dict[str, EventLog]:
        """Per event relation (of ``relations``; default: all), its live events as records
        and its whole id dictionary."""
        out = {}
        for rel_id, (relation, store) in enumerate(sorted(self.stores.items())):
            if relations is None or relation in relations:
                self._exported[relation] = len(store.ids)
                records = list(snapshot_records(rel_id, store, EVENT_BLOCK))
                out[relation] = EventLog(rel_id, records, (0, store.ids.export(0)), whole=True)
        return out

    def compact(self, minimum: int) -> list[Renumbered]:
        """After a commit: compact the stores that are due (and the string pool), the windows'
        queues renumbered with them; per relation compacted, the events whose eid changed, to
        be renumbered where the relations derived from them live. The store is written whole
        with the next epoch (:meth:`logged`)."""
        out = []
        for relation, store in sorted(self.stores.items()):
            if not due(store, minimum):
                continue
            old_of_new = compact_store(store)
            self._compacted.add(relation)
            if relation in self.queues:
                self.queues[relation].renumber(old_of_new)
            moved = np.flatnonzero(old_of_new != np.arange(old_of_new.shape[0])).astype(np.int32)
            column = store.fields.get(TIME_FIELD)
            ts = column.get(moved) if column is not None else np.full(moved.shape[0], np.nan)
            out.append(
                Renumbered(
                    relation,
                    self._global(old_of_new[moved]),
                    self._global(moved),
                    store.src[moved],
                    store.dst[moved],
                    np.asarray(ts, np.float64),
                    [store.select(moved, tests) for tests in self.selections[relation]],
                )
            )
        if pool_due(self.pool, minimum):
            compact_pool(self.pool, self.stores.values())
        return out

    def restore(self, ids: dict[int, list[bytes]], records: dict[int, list[bytes]]) -> None:
        """Load the stores (configured, empty) from their id blobs and records, then the
        windows' queues from the live events."""
        for rel_id, (relation, store) in enumerate(sorted(self.stores.items())):
            for blob in ids.get(rel_id, []):
                store.ids.restore(blob)
            self._exported[relation] = len(store.ids)
            found = [r for blob in records.get(rel_id, []) for r in unpack_records(blob)]
            load_records(store, found)
            queue = self.queues.get(relation)
            if queue is not None:
                live = np.flatnonzero(store.alive[: store.size]).astype(np.int32)
                column = store.fields.get(TIME_FIELD)
                ts = column.get(live) if column is not None else np.full(live.shape[0], np.nan)
                queue.rebuild(live, ts + self.retention[relation])

    def time_entries(self, orders: list[tuple[str, int, str]]) -> list[tuple[I32, F64, I32]]:
        """Per ``(relation, selection number, side)`` of a time order: the entries of this
        shard's live selected events with a time (ends, times, global eids), which the driver
        loads where their ends live (after a restore)."""
        out = []
        for relation, k, side in orders:
            store = self.stores[relation]
            live = np.flatnonzero(store.alive[: store.size]).astype(np.int32)
            live = live[store.select(live, self.selections[relation][k])]
            column = store.fields.get(TIME_FIELD)
            ts = column.get(live) if column is not None else np.full(live.shape[0], np.nan)
            timed = np.isfinite(ts)
            live, ts = live[timed], np.asarray(ts[timed], np.float64)
            ends = store.src[live] if side == "by_src" else store.dst[live]
            out.append((ends, ts, self._global(live)))
        return out

    def next_deadline(self) -> float:
        """The earliest committed deadline of an event in a window here (inf: none)."""
        return min((q.next_deadline() for q in self.queues.values()), default=math.inf)

    def field_values(self, relation: str, name: str, eids: I32) -> tuple[str, Any]:
        """The field ``name`` of the events at global ``eids`` (this shard's) in a form every
        shard's answers compare in: ``("number", float64)``, ``("bool", int8)``, ``("id",
        global slots)``, ``("vertex", global ids)``, ``("string", object)`` with None where
        absent, or ``("absent", None)`` when no event here has the field."""
        store = self.stores[relation]
        local = self._local(eids)
        if name in ("src", "dst"):
            return "vertex", store.column(name, local)
        if name == "id":
            return "id", self._global(store.slot[local])
        column = store.fields.get(name)
        if column is None:
            return "absent", None
        if column.kind == "string":
            codes = column.get(local)
            table = np.array([*self.pool.strings, None], dtype=object)
            return "string", table[codes]
        return column.kind, column.get(local)

    def endpoints(self, relation: str, position: int, eids: I32) -> I32:
        store = self.stores[relation]
        local = self._local(eids)
        return store.src[local] if position == 0 else store.dst[local]

    def matched(
        self, relation: str, eids: I32, fields: Sequence[str] | None
    ) -> tuple[dict[str, Any], npt.NDArray[np.uint64], I32, I32]:
        """The distinct events at ``eids`` as output columns (``id`` and the fields, strings
        and booleans coded against only the values they use), their id hashes, and their ends
        (global vertex ids, which the driver decodes)."""
        store = self.stores[relation]
        local = self._local(eids)
        ids, hashes = id_columns.column_and_hashes(store.ids, store.slot[local])
        columns: dict[str, Any] = {"id": ids}
        for name, column in store.fields.items():
            if fields is None or name in fields:
                columns[name] = _compact(column.values_of(local))
        return columns, hashes, store.src[local], store.dst[local]

    def slots(self, relation: str, eids: I32) -> I32:
        """The global slot of each event's id (an id's events share it)."""
        return self._global(self.stores[relation].slot[self._local(eids)])

    def stats(self) -> dict[str, int]:
        return {
            "events": sum(len(s) for s in self.stores.values()),
            "event_bytes": sum(s.nbytes for s in self.stores.values())
            + self.pool.nbytes
            + sum(q.nbytes for q in self.queues.values()),
        }


def _compact(column: Column) -> Column:
    """A coded column with only the values it uses (what crosses to the driver)."""
    if not isinstance(column, Coded):
        return column
    used, inverse = first_appearances(np.where(column.codes < 0, -1, column.codes))
    table = [column.values[int(c)] for c in used.tolist() if c >= 0]
    present = used >= 0
    remap = np.cumsum(present) - 1
    remap[~present] = -1
    return Coded(remap[inverse].astype(np.int32), tuple(table))
