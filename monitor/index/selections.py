"""The relations the index keeps for one selection of an event relation.

An atom over an event relation reads it through one *selection* (its edge variable's tests;
none for an atom without predicates). For each selection the index keeps ordinary relations,
derived from the events that pass it:

- ``pairs`` (binary): ``(src, dst)`` is present while at least one selected event joins them.
  The worst-case optimal extension counts, proposes and intersects over it, so a selective
  predicate shrinks the adjacency before any prefix touches it. The selection with no tests is
  the relation itself (``transfer``): what an atom without ``as`` reads (set semantics).
- ``events`` (ternary, ``(src, dst, eid)``, indexed by its pair only): the selected events of
  a pair, which expand an edge variable once both its vertices are bound. The ``events``
  relations of one event relation's selections share the keys of their pairs: a pair several
  selections hold is one key.
- ``by_src`` and ``by_dst``, for a selection some plan reads by time (a range step): the
  selected events with a time, by source (destination) in time order, a
  :class:`~monitor.index.time_index.TimeIndex` each, so that the events of a vertex in a range
  of time are found by binary search.

All are staged with the epoch from the effective event changes, so delta queries are seeded
by changed events with the same cuts as any relation (a time order seeds nothing: it is an
access path of its edge variable's events). A relation no delta query reads is
*unread*: it is not maintained (its changes still seed), and a static evaluation has it
loaded for its duration (:meth:`SelectionRelations.load`). ``pass_through`` reads only its
time orders: its pairs and events cost nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from core.fields import (
    TIME_ORDERS,
    FieldTest,
    degree_name,
    events_name,
    selection_name,
    time_order_name,
)
from core.times import TIME_FIELD
from monitor.index.events import EventStore
from monitor.index.graph import Change, GraphIndex
from monitor.index.keys import TupleKeys
from monitor.index.levels import I8, I32, I64, pack, unpack
from monitor.index.time_kernels import F64, time_ranks
from monitor.index.unique import first_rows, sorted_distinct
from monitor.plan.cut import Cut


@dataclass(frozen=True)
class Selection:
    """One selection of an event relation: the relation and its edge variable's tests."""

    relation: str
    tests: tuple[FieldTest, ...] = ()
    #: (side, least) of each degree bound read of its pairs (:mod:`monitor.plan.degrees`).
    degrees: tuple[tuple[str, int], ...] = ()

    @property
    def pairs(self) -> str:
        return selection_name(self.relation, self.tests)

    @property
    def degree_names(self) -> dict[str, tuple[str, int]]:
        """The relation of each degree bound: its vertices with enough neighbours."""
        return {degree_name(self.relation, self.tests, s, k): (s, k) for s, k in self.degrees}

    @property
    def events(self) -> str:
        return events_name(self.relation, self.tests)

    def time_order(self, side: str) -> str:
        return time_order_name(self.relation, self.tests, side)


@dataclass(frozen=True)
class TimedEntries:
    """A batch of events with a time, as entries of the time orders: their times, eids and
    ranks by ``(time, eid)``, and per time order the end each is kept by."""

    ts: F64
    eids: I32
    ranks: I64
    ends: dict[str, I32]


class SelectionRelations:
    """The relations of one selection in a graph index, staged and loaded together."""

    def __init__(
        self,
        graph: GraphIndex,
        selection: Selection,
        pair_keys: TupleKeys,
        time_orders: Collection[str],
        unread: Collection[str] = (),
    ) -> None:
        self.graph = graph
        self.selection = selection
        #: side -> name of the time orders some plan reads.
        self.ordered = {
            side: selection.time_order(side)
            for side in TIME_ORDERS
            if selection.time_order(side) in time_orders
        }
        #: name -> (side, least) of each degree bound, kept from the pairs (which it needs).
        self.degrees = selection.degree_names
        self.unread = frozenset(unread) & {selection.pairs, selection.events}
        if self.degrees:
            self.unread = frozenset()
        graph.relation(selection.pairs, 2)
        graph.relation(selection.events, 3, indexed=(2,), shared_keys=pair_keys)
        for name in self.ordered.values():
            graph.time_index(name)
        for name in self.degrees:
            graph.relation(name, 1)

    @property
    def names(self) -> list[str]:
        """Every relation kept for the selection (maintained or not)."""
        selection = self.selection
        return [selection.pairs, selection.events, *self.ordered.values(), *self.degrees]

    def kinds(self) -> list[tuple[str, str]]:
        """(kind, name) of each relation, for the memory breakdown."""
        kinds = [("pairs", self.selection.pairs), ("events", self.selection.events)]
        kinds += [("degree", name) for name in self.degrees]
        return kinds + [("time-ordered", name) for name in self.ordered.values()]

    def stage(
        self,
        store: EventStore,
        eids: I32,
        diff: I8,
        seq: I64,
        changes: dict[str, Change],
        horizon: float = -math.inf,
    ) -> None:
        """Stage the effective changes ``eids`` (selected already) in every maintained
        relation; their changes (of the unread ones too) into ``changes``. ``horizon``: the
        earliest time alive after the epoch (the time orders leave the events below it
        where they are, :mod:`monitor.index.time_index`)."""
        if not eids.shape[0]:
            return
        selection = self.selection
        src, dst = store.src[eids], store.dst[eids]
        # An event changes once per epoch (a new eid is born, a present one dies), so the
        # changes of the events relation are effective as they are: no netting, one key each.
        if selection.events in self.unread:
            changes[selection.events] = Change([src, dst, eids], diff, seq)
        else:
            events = self.graph.relations[selection.events]
            keys = events.keys(2, [src, dst], eids.shape[0], add=True)
            change = self.graph.stage_effective(events, [src, dst, eids], diff, seq, keys)
            changes[selection.events] = change
            self._stage_pairs(src, dst, keys, diff, seq, changes)
        if self.ordered:
            kept, e = self._time_ordered(store, eids, diff, horizon)
            left = int(np.count_nonzero(diff[~kept] < 0))  # below the horizon (or untimed)
            for name, ends in e.ends.items():
                index = self.graph.time_indexes[name]
                index.stage(ends, e.ts, e.eids, diff[kept], e.ranks, horizon, left)

    def _stage_pairs(
        self, src: I32, dst: I32, keys: I64, diff: I8, seq: I64, changes: dict[str, Change]
    ) -> None:
        """The pairs that appear or disappear: selected events of each changed pair before
        the epoch, then after it (an unread pairs relation's change seeds all the same)."""
        events = self.graph.relations[self.selection.events]
        first, inverse = first_rows(keys)  # (hashed: the pairs in any order)
        pairs = keys[first]
        delta = np.bincount(inverse, weights=diff, minlength=pairs.shape[0]).astype(np.int64)
        before = events.primary.view(Cut.OLD).count(pairs)
        after = before + delta
        flips = np.flatnonzero((before > 0) != (after > 0))
        if not flips.shape[0]:
            return
        pair_seq = np.zeros(pairs.shape[0], np.int64)
        np.maximum.at(pair_seq, inverse, seq)
        appears = np.where(after[flips] > 0, np.int8(1), np.int8(-1)).astype(np.int8)
        columns = [src[first[flips]], dst[first[flips]]]
        name = self.selection.pairs
        if name in self.unread:
            changes[name] = Change(columns, appears, pair_seq[flips])
        else:
            rel = self.graph.relations[name]
            changes[name] = self.graph.stage_effective(rel, columns, appears, pair_seq[flips])
        self._stage_degrees(columns, appears, pair_seq[flips], changes)

    def _stage_degrees(
        self, pairs: list[I32], appears: I8, seq: I64, changes: dict[str, Change]
    ) -> None:
        """The vertices that reach a degree bound or fall below it, from the pairs that
        appear or disappear (their degree before the epoch, then after it)."""
        rel = self.graph.relations[self.selection.pairs]
        for name, (side, least) in self.degrees.items():
            ends, adjacency = (pairs[0], rel.forward) if side == "out" else (pairs[1], rel.reverse)
            assert adjacency is not None
            first, inverse = first_rows(ends)
            vertices = ends[first]
            delta = np.bincount(inverse, weights=appears, minlength=vertices.shape[0])
            before = adjacency.view(Cut.OLD).count(vertices.astype(np.int64))
            after = before + delta.astype(np.int64)
            flips = np.flatnonzero((before >= least) != (after >= least))
            if not flips.shape[0]:
                continue
            last = np.zeros(vertices.shape[0], np.int64)
            np.maximum.at(last, inverse, seq)
            diff = np.where(after[flips] >= least, np.int8(1), np.int8(-1)).astype(np.int8)
            column = vertices[flips].astype(np.int32)
            unary = self.graph.relations[name]
            changes[name] = self.graph.stage_effective(unary, [column], diff, last[flips])

    def _time_ordered(
        self, store: EventStore, eids: I32, diff: I8 | None = None, horizon: float = -math.inf
    ) -> tuple[npt.NDArray[np.bool_], TimedEntries]:
        """Which of ``eids`` are entries of the time orders, and those entries: their times,
        eids and ranks (read and sorted once for both sides), and per time order the ends.
        Events without a time are none, nor removals below ``horizon``
        (:mod:`monitor.index.time_index`)."""
        column = store.fields.get(TIME_FIELD)
        ts = column.get(eids) if column is not None else np.full(eids.shape[0], np.nan)
        kept = np.isfinite(ts)
        if diff is not None and horizon > -math.inf:
            kept &= (diff > 0) | (ts >= horizon)
        eids, ts = eids[kept], ts[kept]
        ends = {
            name: (store.src if side == "by_src" else store.dst)[eids]
            for side, name in self.ordered.items()
        }
        return kept, TimedEntries(ts, eids, time_ranks(ts, eids), ends)

    def load(
        self,
        store: EventStore,
        pair_keys: TupleKeys,
        which: Collection[str] | None = None,
        renumbered: I32 | None = None,
    ) -> None:
        """Replace the relations ``which`` (default: every maintained one, and the unread ones
        emptied) by those of the store's live events, as committed state; nothing may be
        staged. The events relation takes ``pair_keys`` as its shared keys. ``renumbered``
        (the old eid of each event after the store's compaction) renumbers the time orders
        in place instead: their order stays."""
        selection = self.selection
        if which is None:
            for name in self.unread:
                self._clear(name, pair_keys)
            which = [name for name in self.names if name not in self.unread]
        live = np.flatnonzero(store.alive[: store.size]).astype(np.int32)
        eids = live[store.select(live, selection.tests)]
        src, dst = store.src[eids], store.dst[eids]
        ordered = [name for name in which if name in self.graph.time_indexes]
        if ordered and renumbered is not None:
            for name in ordered:
                self.graph.time_indexes[name].renumber(renumbered)
        elif ordered:
            e = self._time_ordered(store, eids)[1]
            for name in ordered:
                self.graph.time_indexes[name].load(e.ends[name], e.ts, e.eids, e.ranks)
        pairs: tuple[I64, I32] | None = None  # (the distinct pairs, found once for all)
        for name in which:
            if name in ordered:
                continue
            self._clear(name, pair_keys)
            if name == selection.events:
                self.graph.load_relation(name, 3, [src, dst, eids])
                continue
            if pairs is None:
                pairs = unpack(sorted_distinct(pack(src, dst)))
            keys, values = pairs
            if name == selection.pairs:
                self.graph.load_relation(name, 2, [keys.astype(np.int32), values])
            elif name in self.degrees:
                side, least = self.degrees[name]
                ends = keys if side == "out" else values
                counts = np.bincount(ends.astype(np.int64))
                vertices = np.flatnonzero(counts >= least).astype(np.int32)
                self.graph.load_relation(name, 1, [vertices])

    def release(self, pair_keys: TupleKeys) -> None:
        """Empty the unread relations again after a static evaluation had them loaded."""
        for name in self.unread:
            self._clear(name, pair_keys)

    def _clear(self, name: str, pair_keys: TupleKeys) -> None:
        shared = pair_keys if name == self.selection.events else None
        self.graph.clear_relation(name, shared)

    def breakdown(self, out: Counter[str]) -> None:
        """Add the relations' bytes by kind: values, offsets and their own tuple keys (a time
        order's values are its times and eids, with its level of changes)."""
        for kind, name in self.kinds():
            time_index = self.graph.time_indexes.get(name)
            if time_index is not None:  # sorted entries, nothing per vertex
                out[f"{kind} relations: values"] += time_index.nbytes
                continue
            rel = self.graph.relations[name]
            for _, adjacency in rel.adjacencies():
                offsets = adjacency.offsets.nbytes
                out[f"{kind} relations: offsets"] += offsets
                out[f"{kind} relations: values"] += adjacency.nbytes - offsets
            keys = sum(k.nbytes for k in rel.tuple_keys if k not in (None, rel.shared_keys))
            if keys:
                out[f"{kind} relations: tuple keys"] += keys
