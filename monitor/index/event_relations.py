"""Event relations in the graph index: their stores, their windows, and the relations the
atoms read, kept up to date from the events.

Each event relation has an :class:`~monitor.index.events.EventStore` (ids, ends and fields of
its events) and, with a window, an expiry queue. An epoch's event updates are admitted (late
and untimed inserts refused), the due events expire, the store stages the rest, and each
selection some atom reads has its relations staged from the effective changes
(:mod:`monitor.index.selections`). The epoch's event changes themselves, which the store and
the changelog record, are :attr:`EventIndex.changed`, not a relation's change.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from core.records import EventUpdates
from core.times import TIME_FIELD
from monitor.index.compaction import COMPACTION_MIN, compact_pool, compact_store, due, pool_due
from monitor.index.events import EventChanges, EventStore
from monitor.index.field_columns import StringPool
from monitor.index.graph import Change, GraphIndex
from monitor.index.keys import TupleKeys
from monitor.index.levels import I32, I64
from monitor.index.selections import Selection, SelectionRelations
from monitor.index.unique import shared_count
from monitor.index.window import ExpiryQueue, Tick, first_live


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
    #: The time orders some plan reads (``R{S}#by_src``, ``R{S}#by_dst``).
    time_orders: frozenset[str] = frozenset()
    #: Derived relations no delta query reads: not maintained (:mod:`monitor.index.selections`).
    unread: frozenset[str] = frozenset()
    kept: list[SelectionRelations] = field(default_factory=list)
    #: The event relations that are tables of vertex attributes (latest record per key wins).
    tables: frozenset[str] = frozenset()
    #: How deep :meth:`complete` is entered (a static evaluation inside another loads nothing).
    _completing: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self.graph.event_stores = self.stores
        pool = StringPool()
        for selection in self.selections:
            upsert = selection.relation in self.tables
            self.stores.setdefault(
                selection.relation, EventStore(selection.relation, pool=pool, upsert=upsert)
            )
            keys = self.pair_keys.setdefault(selection.relation, TupleKeys(2))
            relations = SelectionRelations(
                self.graph, selection, keys, self.time_orders, self.unread
            )
            self.kept.append(relations)
        self.graph.derived = self.derived
        self.retention = {r: ms for r, ms in self.retention.items() if math.isfinite(ms)}
        for relation in self.retention:
            if relation in self.stores:
                self.queues[relation] = ExpiryQueue()

    @property
    def relations(self) -> set[str]:
        """The event relations."""
        return set(self.stores)

    def changed_ends(self, relation: str) -> tuple[I32, I32]:
        """The ends of the events of ``relation``'s effective changes in the staged epoch."""
        store, eids = self.stores[relation], self.changed[relation].eids
        return store.src[eids], store.dst[eids]

    def expired_pairs(self, relation: str) -> list[I32]:
        """The ends of the events of ``relation`` that expired in the staged epoch."""
        store = self.stores[relation]
        expired = self.expired.get(relation, np.empty(0, np.int32))
        return [store.src[expired], store.dst[expired]]

    @property
    def derived(self) -> frozenset[str]:
        """The index relations kept from the events."""
        return frozenset(name for relations in self.kept for name in relations.names)

    @contextmanager
    def complete(self) -> Iterator[None]:
        """Every derived relation loaded, the unread ones too, for a static evaluation
        (between epochs: nothing staged); the unread ones are emptied again after it. Entered
        again inside, as the events of ``--initial``'s group rows are found, it does nothing."""
        loaded = [r for r in self.kept if r.unread] if not self._completing else []
        self._completing += 1
        for relations in loaded:
            relation = relations.selection.relation
            relations.load(self.stores[relation], self.pair_keys[relation], relations.unread)
        try:
            yield
        finally:
            self._completing -= 1
            for relations in loaded:
                relations.release(self.pair_keys[relations.selection.relation])

    @property
    def nbytes(self) -> int:
        pools = {id(s.pool): s.pool.nbytes for s in self.stores.values()}
        return sum(s.nbytes for s in self.stores.values()) + sum(pools.values())

    @property
    def derived_nbytes(self) -> int:
        """Bytes of the relations kept from the events, with the pair keys they share."""
        relations = sum(self.graph.nbytes_of(n) for n in self.derived)
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
        for relations in self.kept:
            relations.breakdown(out)
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
                updates = admitted(
                    relation, updates, self.retention, tick, ignored, self.late, self.late_count
                )
                changed = self._stage_updates(store, updates, ignored)
            else:
                changed = store.staged_changes
            self.staged_events += int(changed.eids.shape[0]) - expired
            if expired and updates is not None:
                reborn_decide_expiry(store, changed, self.expired[relation])
            if relation in self.queues:
                self._enqueue(relation, store, changed)
            if changed.eids.shape[0]:
                self.changed[relation] = changed
            died, born = changed.eids[changed.diff < 0], changed.eids[changed.diff > 0]
            self.replaced += shared_count(store.slot[died], store.slot[born])
            horizon = -math.inf  # the earliest time alive after the epoch
            if relation in self.queues and tick is not None:
                horizon = first_live(tick.before, self.retention[relation])
            for relations in self.kept:
                if relations.selection.relation == relation:
                    keep = store.select(changed.eids, relations.selection.tests)
                    eids, diff, seq = changed.eids[keep], changed.diff[keep], changed.seq[keep]
                    relations.stage(store, eids, diff, seq, changes, horizon)
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

    def rebuild(
        self, relations: Collection[str] | None = None, renumbered: dict[str, I32] | None = None
    ) -> None:
        """The derived relations of the selections of ``relations`` (all by default) from the
        stores' live events, and their expiry queues, as committed state (after the stores were
        loaded or compacted; nothing staged). What they held before is released. After a
        compaction, ``renumbered`` has per relation the old eid of each event: the time orders
        are renumbered, not sorted again."""
        for relation, queue in self.queues.items():
            if relations is not None and relation not in relations:
                continue
            if renumbered is not None and relation in renumbered:
                queue.renumber(renumbered[relation])
                continue
            store = self.stores[relation]
            live = np.flatnonzero(store.alive[: store.size]).astype(np.int32)
            column = store.fields.get(TIME_FIELD)
            ts = column.get(live) if column is not None else np.full(live.shape[0], np.nan)
            queue.rebuild(live, ts + self.retention[relation])
        for relation in self.pair_keys:  # the pairs of dead events go with their keys
            if relations is None or relation in relations:
                self.pair_keys[relation] = TupleKeys(2)
        for kept in self.kept:
            relation = kept.selection.relation
            if relations is None or relation in relations:
                old = None if renumbered is None else renumbered.get(relation)
                kept.load(self.stores[relation], self.pair_keys[relation], renumbered=old)

    def compact(self, minimum: int = COMPACTION_MIN) -> dict[str, I32]:
        """After :meth:`commit`: compact the event stores that are due and the string pool if
        it is (:mod:`monitor.index.compaction`), and rebuild the relations derived from the
        compacted stores (they hold eids). Returns, per relation compacted, the old eid of each
        new one (ascending)."""
        compacted = [name for name, store in sorted(self.stores.items()) if due(store, minimum)]
        renumbered = {name: compact_store(self.stores[name]) for name in compacted}
        for pool in {id(s.pool): s.pool for s in self.stores.values()}.values():
            if pool_due(pool, minimum):
                compact_pool(pool, self.stores.values())
        if compacted:
            self.rebuild(compacted, renumbered)
        return renumbered

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


def admitted(
    relation: str,
    updates: EventUpdates,
    retention: Mapping[str, float],
    tick: Tick | None,
    ignored: Counter[str],
    late: dict[str, I64],
    late_count: Counter[str],
) -> EventUpdates:
    """The updates of ``relation`` its window (``retention``; none: all) admits: not the
    inserts without a time (``missing_time``) nor those older than the watermark the epoch
    begins with minus the retention (``late``, counted in ``late_count``); the refused updates'
    sequence numbers go to ``late``."""
    window = retention.get(relation)
    if window is None:
        return updates
    ts = updates.fields.get(TIME_FIELD)
    insert = updates.diff > 0
    if ts is None or ts.dtype != np.float64:
        missing, old = insert, np.zeros(insert.shape[0], np.bool_)
    else:
        before = -np.inf if tick is None else tick.before
        missing, old = insert & np.isnan(ts), insert & (ts + window < before)
    ignored["missing_time"] += int(missing.sum())
    ignored["late"] += int(old.sum())
    late_count[relation] += int(old.sum())
    refused = missing | old
    if not refused.any():
        return updates
    late[relation] = updates.seq[refused]
    return updates.take(~refused)


def reborn_decide_expiry(store: EventStore, changed: EventChanges, expired: I32) -> None:
    """An id that expired as the epoch began and was inserted again in it: its expiry takes
    the sequence number of the insert, so that in scale-out the worker that owns the insert's
    partition decides both halves of the replacement (they cancel by identity)."""
    born = np.flatnonzero(changed.diff > 0)
    if not born.shape[0] or not expired.shape[0]:
        return
    if int(store.slot[changed.eids[born]].min()) > int(store.slot[expired].max()):
        return  # every insert has an id newer than every expired one's (a counter): none again
    gone = np.flatnonzero((changed.diff < 0) & np.isin(changed.eids, expired))
    if not gone.shape[0]:
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
