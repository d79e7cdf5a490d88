"""Event relations in the graph index: what their atoms read, kept up to date from the events.

An atom over an event relation reads it through one *selection* (its edge variable's tests;
none for an atom without predicates). For each selection the index keeps two ordinary
relations, derived from the events that pass it:

- ``pairs`` (binary): ``(src, dst)`` is present while at least one selected event joins them.
  The worst-case optimal extension counts, proposes and intersects over it, so a selective
  predicate shrinks the adjacency before any prefix touches it. The selection with no tests is
  the relation itself (``transfer``): what an atom without ``as`` reads (set semantics).
- ``events`` (ternary, ``(src, dst, eid)``, indexed by its pair only): the selected events of
  a pair, which expand an edge variable once both its vertices are bound. The ``events``
  relations of one event relation's selections share the keys of their pairs
  (:attr:`EventIndex.pair_keys`): a pair several selections hold is one key.

A selection some plan reads by time (a range step) keeps two more, ternary and indexed by
their first two positions: ``R{S}#by_src`` holds ``(src, bucket, eid)`` and ``R{S}#by_dst``
``(dst, bucket, eid)`` for each selected event with a time, its bucket ``floor(ts / width)``
(:attr:`EventIndex.time_orders`), so the events of a vertex in a range of time are those of a
few keys.

All of them are staged with the epoch, from the effective event changes, so delta queries are seeded
by changed events with the same cuts as any relation. Only the selections some atom reads are
kept (the plain one too only when read): the epoch's event changes themselves, which the store
and the changelog record, are :attr:`EventIndex.changed`, not a relation's change.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

import numpy as np

from core.fields import TIME_ORDERS, FieldTest, events_name, selection_name, time_order_name
from core.records import EventUpdates
from core.times import TIME_FIELD, bucket_of
from monitor.index.compaction import COMPACTION_MIN, compact_pool, compact_store, due, pool_due
from monitor.index.events import EventChanges, EventStore
from monitor.index.field_columns import StringPool
from monitor.index.graph import Change, GraphIndex
from monitor.index.keys import TupleKeys
from monitor.index.levels import I32, I64, pack, unpack
from monitor.index.window import ExpiryQueue, Tick
from monitor.plan.cut import Cut


@dataclass(frozen=True)
class Selection:
    """One selection of an event relation, and the two relations kept for it."""

    relation: str
    tests: tuple[FieldTest, ...] = ()

    @property
    def pairs(self) -> str:
        return selection_name(self.relation, self.tests)

    @property
    def events(self) -> str:
        return events_name(self.relation, self.tests)


@dataclass
class EventIndex:
    """The event stores of a graph index and the relations derived from them."""

    graph: GraphIndex
    selections: list[Selection] = field(default_factory=list)
    stores: dict[str, EventStore] = field(default_factory=dict)
    #: Effective event changes of the last staged epoch.
    staged_events: int = 0
    #: Ids of the last staged epoch deleted and inserted again (each a new event).
    replaced: int = 0
    #: Effective event changes of the last staged epoch, by event relation (those that changed).
    changed: dict[str, EventChanges] = field(default_factory=dict)
    #: Per event relation with a window, how long its events live after their ``ts`` (ms).
    retention: dict[str, float] = field(default_factory=dict)
    queues: dict[str, ExpiryQueue] = field(default_factory=dict)
    #: Of the last staged epoch: per relation the eids that expired (alive before the epoch),
    #: and the sequence numbers of the updates not applied for being late or without a time.
    expired: dict[str, I32] = field(default_factory=dict)
    late: dict[str, I64] = field(default_factory=dict)
    #: Of the last staged epoch: per relation the inserts refused as late (with a time).
    late_count: Counter[str] = field(default_factory=Counter)
    #: The watermark the last staged epoch expired events below (-inf: it expired none).
    expired_below: float = -math.inf
    #: Per event relation, the keys of its pairs, shared by the ``#events`` relations of all
    #: its selections (a pair two selections hold has one key, not two).
    pair_keys: dict[str, TupleKeys] = field(default_factory=dict)
    #: The time-ordered relations some plan reads (``R{S}#by_src``, ``R{S}#by_dst``), with the
    #: width of their time buckets (ms).
    time_orders: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.graph.event_stores = self.stores
        pool = StringPool()
        for selection in self.selections:
            self.stores.setdefault(selection.relation, EventStore(selection.relation, pool=pool))
            keys = self.pair_keys.setdefault(selection.relation, TupleKeys(2))
            self.graph.relation(selection.pairs, 2)
            self.graph.relation(selection.events, 3, indexed=(2,), shared_keys=keys)
            for name in self._ordered(selection).values():
                self.graph.relation(name, 3, indexed=(2,))
                self.graph.bucket_widths[name] = self.time_orders[name]
        self.graph.derived = self.derived
        self.retention = {r: ms for r, ms in self.retention.items() if math.isfinite(ms)}
        for relation in self.retention:
            if relation in self.stores:
                self.queues[relation] = ExpiryQueue()

    @property
    def relations(self) -> set[str]:
        """The event relations."""
        return set(self.stores)

    @property
    def derived(self) -> frozenset[str]:
        """The index relations kept from the events."""
        kept = {n for s in self.selections for n in (s.pairs, s.events)}
        return frozenset(kept | {n for s in self.selections for n in self._ordered(s).values()})

    def _ordered(self, selection: Selection) -> dict[str, str]:
        """The time-ordered relations kept for ``selection``: side -> name."""
        names = {
            side: time_order_name(selection.relation, selection.tests, side) for side in TIME_ORDERS
        }
        return {side: name for side, name in names.items() if name in self.time_orders}

    @property
    def nbytes(self) -> int:
        pools = {id(s.pool): s.pool.nbytes for s in self.stores.values()}
        return sum(s.nbytes for s in self.stores.values()) + sum(pools.values())

    @property
    def derived_nbytes(self) -> int:
        """Bytes of the relations kept from the events, with the pair keys they share."""
        relations = sum(self.graph.relations[n].nbytes for n in self.derived)
        return relations + sum(k.nbytes for k in self.pair_keys.values())

    def stored(self) -> dict[str, int]:
        """Live events per event relation."""
        return {name: len(store) for name, store in self.stores.items()}

    def field_bytes(self) -> dict[str, int]:
        """Bytes of the field columns per event relation (the shared string pool counted once,
        with the first relation)."""
        out = {}
        pools: set[int] = set()
        for name, store in sorted(self.stores.items()):
            out[name] = sum(column.nbytes for column in store.fields.values())
            if id(store.pool) not in pools:
                pools.add(id(store.pool))
                out[name] += store.pool.nbytes
        return out

    def breakdown(self) -> dict[str, int]:
        """Bytes held by component: the event stores' (summed over relations), the string
        pool, and per kind of derived relation its values, its offsets and its tuple keys."""
        out: Counter[str] = Counter()
        for store in self.stores.values():
            out.update(store.breakdown())
        out["string pool"] = sum({id(s.pool): s.pool.nbytes for s in self.stores.values()}.values())
        for selection in self.selections:
            kinds = [("pairs", selection.pairs), ("events", selection.events)]
            kinds += [("time-ordered", name) for name in self._ordered(selection).values()]
            for kind, name in kinds:
                rel = self.graph.relations[name]
                for _, adjacency in rel.adjacencies():
                    offsets = adjacency.offsets.nbytes
                    out[f"{kind} relations: offsets"] += offsets
                    out[f"{kind} relations: values"] += adjacency.nbytes - offsets
                keys = sum(k.nbytes for k in rel.tuple_keys if k not in (None, rel.shared_keys))
                if keys:
                    out[f"{kind} relations: tuple keys"] += keys
        for shared in self.pair_keys.values():
            out["events relations: tuple keys"] += shared.nbytes
        return dict(out)

    def stage(
        self, events: dict[str, EventUpdates], ignored: Counter[str], tick: Tick | None = None
    ) -> dict[str, Change]:
        """Stage an epoch's event updates, then (given a ``tick`` of event time) the expiry of
        the events the watermark passed; the changes of every derived relation."""
        changes: dict[str, Change] = {}
        self.staged_events = 0
        self.replaced = 0
        self.changed = {}
        self.expired = {}
        self.late = {}
        self.late_count = Counter()
        self.expired_below = -math.inf
        for relation in sorted(set(events) | (set(self.queues) if tick else set())):
            store = self.stores.get(relation)
            updates = events.get(relation)
            if store is None:
                ignored["not_an_event_relation"] += len(updates) if updates is not None else 0
                continue
            expired = 0
            if relation in self.queues and tick is not None:
                expired = self._expire(relation, store, tick)
            if updates is not None:
                updates = self._admitted(relation, updates, ignored, tick)
                changed = self._stage_updates(store, updates, ignored)
            else:
                changed = store.staged_changes
            self.staged_events += int(changed.eids.shape[0]) - expired
            if expired and updates is not None:
                _reborn_decide_expiry(store, changed, self.expired[relation])
            if relation in self.queues:
                self._enqueue(relation, store, changed)
            if changed.eids.shape[0]:
                self.changed[relation] = changed
            died, born = changed.eids[changed.diff < 0], changed.eids[changed.diff > 0]
            self.replaced += np.intersect1d(store.slot[died], store.slot[born]).shape[0]
            for selection in self.selections:
                if selection.relation == relation:
                    keep = store.select(changed.eids, selection.tests)
                    self._stage_selection(
                        selection,
                        store,
                        changed.eids[keep],
                        changed.diff[keep],
                        changed.seq[keep],
                        changes,
                    )
        return changes

    def _stage_updates(
        self, store: EventStore, updates: EventUpdates, ignored: Counter[str]
    ) -> EventChanges:
        anonymous = np.asarray(updates.ids == None, np.bool_)  # noqa: E711 (elementwise)
        if anonymous.any():
            ignored["delete_without_id"] += int(anonymous.sum())
            updates = updates.take(~anonymous)
        insert = updates.diff > 0
        src = self._vertices(updates.src, insert)
        dst = self._vertices(updates.dst, insert)
        return store.stage(updates.ids, insert, updates.seq, src, dst, updates.fields, ignored)

    def _admitted(
        self, relation: str, updates: EventUpdates, ignored: Counter[str], tick: Tick | None
    ) -> EventUpdates:
        """The updates without the inserts a window refuses: those without a time
        (``missing_time``) and those older than the watermark minus the retention (``late``);
        their sequence numbers go to :attr:`late`."""
        retention = self.retention.get(relation)
        if retention is None:
            return updates
        ts = updates.fields.get(TIME_FIELD)
        insert = updates.diff > 0
        if ts is None or ts.dtype != np.float64:
            missing = insert
            late = np.zeros(insert.shape[0], np.bool_)
        else:
            missing = insert & np.isnan(ts)
            before = -np.inf if tick is None else tick.before
            late = insert & (ts + retention < before)
        ignored["missing_time"] += int(missing.sum())
        ignored["late"] += int(late.sum())
        self.late_count[relation] += int(late.sum())
        refused = missing | late
        if not refused.any():
            return updates
        self.late[relation] = updates.seq[refused]
        return updates.take(~refused)

    def _expire(self, relation: str, store: EventStore, tick: Tick) -> int:
        """Stage, before the epoch's updates, the expiry of every event whose deadline the
        watermark the epoch begins with has passed; how many expired."""
        due = self.queues[relation].due(tick.before)
        expired = store.expire(due, tick.seq)
        if expired.shape[0]:
            self.expired[relation] = expired
        self.expired_below = tick.before
        return int(expired.shape[0])

    def _enqueue(self, relation: str, store: EventStore, changed: EventChanges) -> None:
        """The epoch's new events join the expiry queue, by deadline (ts + retention)."""
        born = changed.eids[changed.diff > 0]
        column = store.fields.get(TIME_FIELD)
        deadlines = column.get(born) if column is not None else np.empty(0)
        self.queues[relation].add(born[: deadlines.shape[0]], deadlines + self.retention[relation])

    def _vertices(self, column: np.ndarray, insert: np.ndarray) -> I32:
        out = np.zeros(column.shape[0], np.int32)
        if insert.any():
            out[insert] = self.graph.dictionary.encode(column[insert], add=True)
        self.graph.ensure_keys()
        return out

    def _stage_selection(
        self,
        selection: Selection,
        store: EventStore,
        eids: I32,
        diff: np.ndarray,
        seq: np.ndarray,
        changes: dict[str, Change],
    ) -> None:
        if not eids.shape[0]:
            return
        src, dst = store.src[eids], store.dst[eids]
        events = self.graph.relations[selection.events]
        # An event changes once per epoch (a new eid is born, a present one dies), so the
        # changes of the events relation are effective as they are: no netting, one key each.
        keys = events.keys(2, [src, dst], eids.shape[0], add=True)
        change = self.graph.stage_effective(events, [src, dst, eids], diff, seq, keys)
        changes[selection.events] = change
        self._stage_time_orders(selection, store, change, changes)
        # Selected events of each changed pair before the epoch, then after it.
        pairs, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        delta = np.bincount(inverse, weights=diff, minlength=pairs.shape[0]).astype(np.int64)
        before = events.primary.view(Cut.OLD).count(pairs)
        after = before + delta
        flips = np.flatnonzero((before > 0) != (after > 0))
        if flips.shape[0]:  # a pair appears or disappears: effective as well
            pair_seq = np.zeros(pairs.shape[0], np.int64)
            np.maximum.at(pair_seq, inverse, seq)
            appears = np.where(after[flips] > 0, np.int8(1), np.int8(-1)).astype(np.int8)
            rel = self.graph.relations[selection.pairs]
            changes[selection.pairs] = self.graph.stage_effective(
                rel, [src[first[flips]], dst[first[flips]]], appears, pair_seq[flips]
            )

    def _stage_time_orders(
        self, selection: Selection, store: EventStore, events: Change, changes: dict[str, Change]
    ) -> None:
        """The ``events`` changes of ``selection`` with a time, by end and time bucket, in its
        time-ordered relations (effective as the events' changes are)."""
        eids, diff, seq = events.columns[2], events.diff, events.seq
        assert seq is not None  # staged with the updates' sequence numbers
        for side, name in self._ordered(selection).items():
            timed, columns = self._time_ordered(store, eids, side, name)
            rel = self.graph.relations[name]
            changes[name] = self.graph.stage_effective(rel, columns, diff[timed], seq[timed])

    def _time_ordered(
        self, store: EventStore, eids: I32, side: str, name: str
    ) -> tuple[np.ndarray, list[I32]]:
        """Which of ``eids`` have a time, and their tuples ``(end, bucket, eid)`` in the
        time-ordered relation ``name``."""
        column = store.fields.get(TIME_FIELD)
        ts = column.get(eids) if column is not None else np.full(eids.shape[0], np.nan)
        timed = np.isfinite(ts)
        eids = eids[timed]
        ends = (store.src if side == "by_src" else store.dst)[eids]
        return timed, [ends, bucket_of(ts[timed], self.time_orders[name]), eids]

    def rebuild(self, relations: Collection[str] | None = None) -> None:
        """The derived relations of the selections of ``relations`` (all by default) from the
        stores' live events, and their expiry queues, as committed state (after the stores were
        loaded or compacted; nothing staged). What they held before is released."""
        for relation, queue in self.queues.items():
            if relations is not None and relation not in relations:
                continue
            store = self.stores[relation]
            live = np.flatnonzero(store.alive[: store.size]).astype(np.int32)
            column = store.fields.get(TIME_FIELD)
            ts = column.get(live) if column is not None else np.full(live.shape[0], np.nan)
            queue.rebuild(live, ts + self.retention[relation])
        for relation in self.pair_keys:  # the pairs of dead events go with their keys
            if relations is None or relation in relations:
                self.pair_keys[relation] = TupleKeys(2)
        for selection in self.selections:
            if relations is not None and selection.relation not in relations:
                continue
            store = self.stores[selection.relation]
            live = np.flatnonzero(store.alive[: store.size]).astype(np.int32)
            eids = live[store.select(live, selection.tests)]
            src, dst = store.src[eids], store.dst[eids]
            self.graph.clear_relation(selection.events, self.pair_keys[selection.relation])
            self.graph.load_relation(selection.events, 3, [src, dst, eids])
            keys, values = unpack(np.unique(pack(src, dst)))
            self.graph.clear_relation(selection.pairs)
            self.graph.load_relation(selection.pairs, 2, [keys.astype(np.int32), values])
            for side, name in self._ordered(selection).items():
                _, columns = self._time_ordered(store, eids, side, name)
                self.graph.clear_relation(name)
                self.graph.load_relation(name, 3, columns)

    def compact(self, minimum: int = COMPACTION_MIN) -> list[str]:
        """After :meth:`commit`: compact the event stores that are due and the string pool if
        it is (:mod:`monitor.index.compaction`), and rebuild the relations derived from the
        compacted stores (they hold eids). Returns the relations compacted."""
        compacted = [name for name, store in sorted(self.stores.items()) if due(store, minimum)]
        for name in compacted:
            compact_store(self.stores[name])
        for pool in {id(s.pool): s.pool for s in self.stores.values()}.values():
            if pool_due(pool, minimum):
                compact_pool(pool, self.stores.values())
        if compacted:
            self.rebuild(compacted)
        return compacted

    def commit(self) -> None:
        """Keep the staged epoch (its expiries leave the queues)."""
        for store in self.stores.values():
            store.commit()
        for queue in self.queues.values():
            queue.commit(self.expired_below)

    def abort(self) -> None:
        for store in self.stores.values():
            store.abort()
        for queue in self.queues.values():
            queue.abort()


def _reborn_decide_expiry(store: EventStore, changed: EventChanges, expired: I32) -> None:
    """An id that expired as the epoch began and was inserted again in it: its expiry takes
    the sequence number of the insert, so that in scale-out the worker that owns the insert's
    partition decides both halves of the replacement (they cancel by identity)."""
    gone = np.flatnonzero((changed.diff < 0) & np.isin(changed.eids, expired))
    born = np.flatnonzero(changed.diff > 0)
    if not gone.shape[0] or not born.shape[0]:
        return
    slots = store.slot[changed.eids[born]]
    order = np.argsort(slots)
    at = np.searchsorted(slots[order], store.slot[changed.eids[gone]])
    at = np.minimum(at, order.shape[0] - 1)
    match = slots[order][at] == store.slot[changed.eids[gone]]
    changed.seq[gone[match]] = changed.seq[born[order[at[match]]]]


def selections_of(found: Iterable[Selection]) -> list[Selection]:
    """Unique selections, in first-seen order (those the atoms read, nothing else)."""
    return list(dict.fromkeys(found))
