"""The events of one relation: identity, pair, typed fields, by column.

An event is one record of a relation with its own identity (its ``id``, or its source position
when the record has none), its pair ``(src, dst)`` and typed fields. An identity has a *slot*
(dense, from :class:`~monitor.index.idmap.IdMap`) and each insert of it that takes effect a new
dense event id (``eid``, ``int32``, in arrival order): an id deleted and inserted again is a
new event, even within one epoch. Numbers are not reused until the store is compacted
(:mod:`monitor.index.compaction`), which renumbers the live events and ids, in order.
Every field is a column indexed by eid (:mod:`monitor.index.field_columns`: numbers as scaled
``int32`` or ``float64``, strings as codes into the field's dictionary, booleans as ``int8``),
never a Python object per event.
``alive`` says which events are present, ``current`` which eid a slot holds (-1: none).

An id is deleted by id; inserting an id that is present is a duplicate and changes nothing.
The store follows the epoch protocol of the index: :meth:`stage` applies an epoch's effective
changes, :meth:`commit` keeps them, :meth:`abort` undoes them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from core.columns import Column, EventRows
from core.errors import InputError
from core.fields import FieldTest, affine, column_kind, compare
from monitor.index import id_columns
from monitor.index.field_columns import FieldColumn, StringPool
from monitor.index.idmap import IdMap
from monitor.index.levels import I8, I32, I64, grow
from monitor.index.netting import net
from monitor.index.unique import first_appearances, sorted_distinct

#: Fields every event has, from its identity and pair (not stored as columns).
BUILT_IN_FIELDS = ("id", "src", "dst")


def grown(capacity: int) -> int:
    """The next capacity of a column: an eighth more (at most 12.5% slack; each value is
    copied about eight times in all, a memcpy: nothing beside an epoch's work)."""
    return max(capacity + capacity // 8, 1024)


@dataclass(frozen=True)
class EventChanges:
    """An epoch's effective event changes: eids, +1/-1, the deciding update's ``seq``."""

    eids: I32
    diff: I8
    seq: I64


class EventStore:
    """The events of one relation."""

    def __init__(
        self,
        relation: str,
        kinds: Mapping[str, str] | None = None,
        pool: StringPool | None = None,
        upsert: bool = False,
    ) -> None:
        self.relation = relation
        #: A table's store: an insert of a present id replaces its event (:func:`upserted`).
        self.upsert = upsert
        self.pool = pool if pool is not None else StringPool()
        self.ids = IdMap()
        self.current: I32 = np.empty(0, np.int32)
        self.size = 0
        self.slot: I32 = np.empty(0, np.int32)
        self.src: I32 = np.empty(0, np.int32)
        self.dst: I32 = np.empty(0, np.int32)
        self.alive: npt.NDArray[np.bool_] = np.empty(0, np.bool_)
        self.fields = {k: FieldColumn(v, self.pool) for k, v in (kinds or {}).items()}
        #: Live events as committed (:meth:`__len__` counts the staged epoch's too).
        self.live = 0
        #: Times the store was compacted (:mod:`monitor.index.compaction`): its eids renumbered.
        self.compactions = 0
        self._undo: tuple[EventChanges, I32, I32] | None = None

    def __len__(self) -> int:
        """Live events, with the staged epoch's changes."""
        return self.live + (int(self._undo[0].diff.sum()) if self._undo is not None else 0)

    @property
    def staged(self) -> bool:
        """Whether an epoch is staged (neither committed nor aborted yet)."""
        return self._undo is not None

    @property
    def nbytes(self) -> int:
        return sum(self.breakdown().values())

    def breakdown(self) -> dict[str, int]:
        """Bytes held by component (arrays at their capacity; string field values are in the
        shared :class:`StringPool`, not here)."""
        arrays = {"src": self.src, "dst": self.dst, "slot": self.slot, "alive": self.alive}
        out = {name: int(a.nbytes) for name, a in arrays.items()}
        out["current (per id)"] = int(self.current.nbytes)
        out.update({f"id {k}": v for k, v in self.ids.breakdown().items()})
        out.update({f"field {k}": v.nbytes for k, v in self.fields.items()})
        return out

    def _grow_slots(self, n: int) -> None:
        if n > self.current.shape[0]:
            grow(self, "current", max(n, grown(self.current.shape[0])), -1)

    def _allocate(self, n: int) -> I32:
        """``n`` new eids (dead until staged alive)."""
        start, self.size = self.size, self.size + n
        if self.size > self.alive.shape[0]:
            capacity = max(self.size, grown(self.alive.shape[0]))
            for name in ("src", "dst", "slot", "alive"):
                grow(self, name, capacity)
            for column in self.fields.values():
                column.grow(capacity)
        return np.arange(start, self.size, dtype=np.int32)

    def kind(self, name: str) -> str | None:
        column = self.fields.get(name)
        return column.kind if column is not None else None

    def stage(
        self,
        ids: npt.NDArray[np.generic],
        insert: npt.NDArray[np.bool_],
        seq: I64,
        src: I32,
        dst: I32,
        fields: Mapping[str, npt.NDArray[Any]],
        ignored: Counter[str],
    ) -> EventChanges:
        """Apply an epoch's updates (in stream order per id, set semantics) as uncommitted.

        ``src``/``dst`` (dense vertex ids) and ``fields`` (one column per field) matter for
        inserts only. A field column of another kind than the field's is an
        :class:`InputError` (checked before anything changes); a field seen for the first time
        takes its column's kind.
        """
        self._check_kinds(fields)
        replacements = 0
        if self.upsert:
            ids, insert, seq, src, dst, fields, replacements = upserted(
                self, ids, insert, seq, src, dst, fields, ignored
            )
        slots = self.ids.encode(ids, add=True)
        self._grow_slots(len(self.ids))
        current = self.current
        netted = net(slots.astype(np.int64), insert, seq, lambda k: current[k] >= 0, ignored)
        ignored["netted"] -= 2 * replacements  # (a replaced record is an update, not netting)
        changed = netted.keys.astype(np.int32)
        born = netted.diff > 0
        reborn = netted.reborn.astype(np.int32)
        dying_slots = np.concatenate([changed[~born], reborn])
        dead = self.current[dying_slots]
        birth_slots = np.concatenate([changed[born], reborn])
        rows = np.concatenate([netted.rows[born], netted.reborn_rows])
        birth_seq = np.concatenate([netted.seq[born], seq[netted.reborn_rows]])
        # New eids in arrival order (of the deciding inserts), whatever the ids' slots: slots
        # of ids seen before depend on which ids a compaction forgot, arrival does not.
        arrival = np.argsort(rows, kind="stable")
        birth_slots, rows, birth_seq = birth_slots[arrival], rows[arrival], birth_seq[arrival]
        new = self._allocate(birth_slots.shape[0])
        self.slot[new] = birth_slots
        self.src[new] = src[rows]
        self.dst[new] = dst[rows]
        for name, column in fields.items():
            self.fields[name].store(new, column[rows])
        previous = self.current[np.concatenate([dying_slots, birth_slots])]
        self.alive[dead] = False
        self.current[dying_slots] = -1
        self.alive[new] = True
        self.current[birth_slots] = new
        out = EventChanges(
            np.concatenate([dead, new]),
            np.concatenate([np.full(dead.shape[0], -1, np.int8), np.ones(new.shape[0], np.int8)]),
            np.concatenate([netted.seq[~born], seq[netted.reborn_rows], birth_seq]).astype(
                np.int64
            ),
        )
        return self._record(out, np.concatenate([dying_slots, birth_slots]), previous)

    def _check_kinds(self, fields: Mapping[str, npt.NDArray[Any]]) -> None:
        for name, column in fields.items():
            if name in BUILT_IN_FIELDS:
                raise InputError(f"field {name!r} of {self.relation!r} is the event's own")
            found = column_kind(column)
            known = self.kind(name)
            if known is None:
                self.fields[name] = FieldColumn(found, self.pool)
                self.fields[name].grow(self.alive.shape[0])
            elif known != found:
                raise InputError(
                    f"field {name!r} of relation {self.relation!r} is a {known}, got {found}s"
                )

    def commit(self) -> None:
        """Keep the staged epoch: every eid of its changes was born (+1) or died (-1) in it."""
        if self._undo is not None:
            self.live += int(self._undo[0].diff.sum())
        self._undo = None

    def abort(self) -> None:
        """Undo the staged epoch's changes (the eids it allocated stay dead)."""
        if self._undo is not None:
            changes, slots, previous = self._undo
            self.alive[changes.eids] = changes.diff < 0
            self.current[slots[::-1]] = previous[::-1]
            self._undo = None

    def restore(
        self,
        size: int,
        eids: I32,
        slots: I32,
        src: I32,
        dst: I32,
        fields: Mapping[str, npt.NDArray[Any]],
        dead: I32,
    ) -> None:
        """Load committed events as stored (:mod:`monitor.index.event_state`): the eid count,
        the events inserted with their slots, pairs and fields, and the eids that died since;
        the id dictionary must be loaded first."""
        self._check_kinds(fields)
        self._allocate(size - self.size)
        self.slot[eids], self.src[eids], self.dst[eids] = slots, src, dst
        for name, column in fields.items():
            self.fields[name].store(eids, column)
        self.alive[eids] = True
        self.alive[dead] = False
        self._grow_slots(len(self.ids))
        live = np.flatnonzero(self.alive[: self.size]).astype(np.int32)
        self.current[self.slot[live]] = live
        self.live = live.shape[0]

    def expire(self, eids: I32, seq: int) -> I32:
        """Stage, before the epoch's updates, the expiry of those of ``eids`` still alive (the
        queue holds eids that were deleted since); returns the eids that expired.
        :meth:`abort` undoes it with the updates."""
        eids = sorted_distinct(eids[self.alive[eids]]).astype(np.int32)
        if eids.shape[0]:
            touched = self.slot[eids]
            dead = np.full(eids.shape[0], -1, np.int8)
            self._record(
                EventChanges(eids, dead, np.full(eids.shape[0], seq, np.int64)), touched, eids
            )
            self.alive[eids] = False
            self.current[touched] = -1
        return eids

    @property
    def staged_changes(self) -> EventChanges:
        """The staged epoch's changes so far (expiries, then updates)."""
        if self._undo is not None:
            return self._undo[0]
        empty = np.empty(0, np.int32)
        return EventChanges(empty, np.empty(0, np.int8), np.empty(0, np.int64))

    def _record(self, changes: EventChanges, slots: I32, previous: I32) -> EventChanges:
        """Add staged changes (and the slots they touched, with what ``current`` held there) to
        the epoch's, in order; returns the epoch's changes so far."""
        if self._undo is not None:
            before, earlier_slots, earlier = self._undo
            changes = EventChanges(
                np.concatenate([before.eids, changes.eids]),
                np.concatenate([before.diff, changes.diff]),
                np.concatenate([before.seq, changes.seq]),
            )
            slots = np.concatenate([earlier_slots, slots])
            previous = np.concatenate([earlier, previous])
        self._undo = (changes, slots, previous)
        return changes

    def select(self, eids: I32, tests: Sequence[FieldTest]) -> npt.NDArray[np.bool_]:
        """Which of ``eids`` pass every test (a selection: the tests of one edge variable)."""
        keep = np.ones(eids.shape[0], np.bool_)
        for test in tests:
            keep &= self.test(eids, test)
        return keep

    def test(self, eids: I32, test: FieldTest) -> npt.NDArray[np.bool_]:
        left = self.column(test.field, eids)
        if left is None:
            return np.zeros(eids.shape[0], np.bool_)
        if test.other_field is not None:
            right = self.column(test.other_field, eids)
            if right is None:
                return np.zeros(eids.shape[0], np.bool_)
            return compare(left, test.op, affine(right, test.factor, test.offset))
        return compare(left, test.op, self._literal(test.field, test.literal))

    def _literal(self, name: str, literal: object) -> Any:
        if name in ("src", "dst", "id"):
            raise InputError(f"field {name!r} is compared with = and != between events only")
        return self.fields[name].code(literal)

    def column(self, name: str, eids: I32) -> npt.NDArray[Any] | None:
        """The values of field ``name`` at ``eids`` (None: no event has it)."""
        if name == "src":
            return self.src[eids]
        if name == "dst":
            return self.dst[eids]
        if name == "id":
            return self.slot[eids]
        column = self.fields.get(name)
        return None if column is None else column.get(eids)

    def id_hashes(self, eids: I32) -> npt.NDArray[np.uint64]:
        """The stable hash of each event's id (:func:`~monitor.index.id_columns.id_hashes`)."""
        return id_columns.id_hashes(self.ids, self.slot[eids])

    def matched(
        self, eids: I32, decode_vertex: Any, fields: Sequence[str] | None = None
    ) -> tuple[EventRows, npt.NDArray[np.uint64]]:
        """The events at ``eids`` as output columns (:meth:`columns`) and their id hashes
        (:meth:`id_hashes`), each distinct event decoded once and kept once (a hub's transfer
        is in many matches of an epoch: about 4.6 rows an event in ``bench.payments``, ten in
        ``bench.typologies``' six-hop rings)."""
        unique, inverse = first_appearances(eids)
        ids, hashes = id_columns.column_and_hashes(self.ids, self.slot[unique])
        columns = self.columns(unique, decode_vertex, fields, ids)
        return EventRows(columns, inverse), hashes[inverse]

    def columns(
        self,
        eids: I32,
        decode_vertex: Any,
        fields: Sequence[str] | None = None,
        ids: npt.NDArray[Any] | None = None,
    ) -> dict[str, Column]:
        """The events at ``eids`` as output columns (:mod:`core.columns`), whole arrays at a
        time: ``id`` (``ids`` if given), ``src``, ``dst``, then every field (or those in
        ``fields``), absent where an event lacks it."""
        out: dict[str, Column] = {
            "id": id_columns.column(self.ids, self.slot[eids]) if ids is None else ids,
            "src": decode_vertex(self.src[eids]),
            "dst": decode_vertex(self.dst[eids]),
        }
        for name, column in self.fields.items():
            if fields is None or name in fields:
                out[name] = column.values_of(eids)
        return out


def upserted(
    store: EventStore,
    ids: npt.NDArray[np.generic],
    insert: npt.NDArray[np.bool_],
    seq: I64,
    src: I32,
    dst: I32,
    fields: Mapping[str, npt.NDArray[Any]],
    ignored: Counter[str],
) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.bool_], I64, I32, I32, dict[str, Any], int]:
    """A table's updates as the event updates that have its meaning, the latest record of a
    key winning: each key's last update of the epoch only (the earlier ones count as
    ``netted``), and before an insert of a key present before the epoch, a delete of it (its
    event is replaced: a new eid with the new fields, which the engines see as the old event's
    ``-1`` and the new one's ``+1``, cancelling by identity where no match changes)."""
    n = ids.shape[0]
    if n == 0:
        return ids, insert, seq, src, dst, dict(fields), 0
    slots = store.ids.encode(ids, add=True)
    store._grow_slots(len(store.ids))
    backwards = np.argsort(seq, kind="stable")[::-1]
    _, at = np.unique(slots[backwards], return_index=True)
    last = backwards[at]
    last = last[np.argsort(seq[last], kind="stable")]
    ignored["netted"] += n - last.shape[0]
    replaced = insert[last] & (store.current[slots[last]] >= 0)
    copies = 1 + replaced.astype(np.intp)
    rows = np.repeat(last, copies)
    deleting = np.zeros(rows.shape[0], np.bool_)
    deleting[(np.cumsum(copies) - copies)[replaced]] = True
    return (
        ids[rows],
        insert[rows] & ~deleting,
        seq[rows],
        src[rows],
        dst[rows],
        {name: column[rows] for name, column in fields.items()},
        int(replaced.sum()),
    )
