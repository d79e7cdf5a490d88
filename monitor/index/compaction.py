"""Compaction of event stores: memory proportional to the live events, not to every event seen.

An :class:`~monitor.index.events.EventStore` numbers its events (eids) and their ids (slots)
densely in arrival order, so with deletions and expiry its per-eid and per-slot arrays, its id
map and the shared string pool grow with every event ever seen. *Compaction* brings them back
to the live events:

- the live eids are renumbered ``0 .. live-1`` in their existing order (the order of output
  rows within an epoch follows eids, and it is kept), each per-eid array copied to a capacity
  proportional to the live events;
- the id map is rebuilt with the ids of the live events only, their slots renumbered in their
  existing order, and ``current`` (eid by slot) with it;
- whatever else holds eids is rebuilt by the caller
  (:meth:`EventIndex.compact <monitor.index.event_relations.EventIndex.compact>`: the relations
  derived from the store's events), and the durable store writes the compacted store as a new
  snapshot of its relation (:mod:`monitor.index.store`, told by :attr:`EventStore.compactions`).

**When.** At the commit of an epoch, never with an epoch staged (an abort must find the eids it
staged): a store is :func:`due` when its dead eids outnumber the live ones and are at least
``minimum`` (so that a small store is not compacted every epoch). Both counts are the committed
state's, so the point is deterministic: a run restarted from its stored state, and every worker
of a cluster (each applies every epoch whole), compacts at the same epochs as an uninterrupted
single run and numbers events alike.

**Cost.** Compacting a store is linear in its eids, ``live + dead <= 2 dead``, and leaves no
dead eid: amortized O(1) per event that died.

**The string pool** is shared by the string fields of every store of an index, so it is
compacted on its own rule, :func:`pool_due`: once it holds at least as many strings again as it
kept at its last compaction (and ``minimum`` more), :func:`compact_pool` drops the strings no live
event of any store uses and renumbers every store's codes. Codes are internal (output decodes
them; selections and join filters look literals up when they run), so a run that restarts with
another numbering of strings computes the same output.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from monitor.index.events import EventStore, grown
from monitor.index.field_columns import StringPool
from monitor.index.levels import I32, resized

#: Dead events a store needs before it is compacted (and new strings before the pool is).
COMPACTION_MIN = 65_536


def due(store: EventStore, minimum: int = COMPACTION_MIN) -> bool:
    """Whether ``store`` is compacted at this commit: its dead eids outnumber its live ones and
    are at least ``minimum``."""
    dead = store.size - store.live
    return dead > store.live and dead >= minimum


def compact_store(store: EventStore) -> I32:
    """Renumber ``store``'s live events and ids densely, in order, into arrays sized for them;
    returns the old eid of each new one (the caller rebuilds what holds eids)."""
    if store.staged:
        raise ValueError(
            f"event store {store.relation!r} has a staged epoch: it is compacted at commits only"
        )
    live = np.flatnonzero(store.alive[: store.size]).astype(np.int32)
    n = live.shape[0]
    if n != store.live:
        raise AssertionError(f"event store {store.relation!r} counts {store.live} live, has {n}")
    capacity = grown(n)
    slots = store.slot[live]
    if n < 2 or bool((slots[1:] > slots[:-1]).all()):  # ids as old as their events: no sort
        kept, renumbered = slots, np.arange(n, dtype=np.int32)
    else:
        kept = np.sort(slots)  # the live events' ids, in slot order
        renumbered = np.searchsorted(kept, slots).astype(np.int32)
    store.ids = store.ids.subset(kept)
    store.slot = resized(renumbered, capacity, 0)
    store.src = resized(store.src[live], capacity, 0)
    store.dst = resized(store.dst[live], capacity, 0)
    for column in store.fields.values():
        column.values = resized(column.values[live], capacity, column.absent)
    store.alive = resized(np.ones(n, np.bool_), capacity, False)
    store.current = np.full(grown(n), -1, np.int32)
    store.current[renumbered] = np.arange(n, dtype=np.int32)
    store.size = n
    store.compactions += 1
    return live


def pool_due(pool: StringPool, minimum: int = COMPACTION_MIN) -> bool:
    """Whether ``pool`` is compacted at this commit: it has grown by as many strings as it kept
    at its last compaction, and by at least ``minimum``."""
    added = len(pool.strings) - pool.kept
    return added >= max(pool.kept, minimum, 1)


def compact_pool(pool: StringPool, stores: Iterable[EventStore]) -> int:
    """Drop the strings of ``pool`` that no live event of ``stores`` (every store sharing it)
    uses, renumbering the codes of every string field in order; returns the strings dropped.
    Dead events' codes of dropped strings become absent."""
    columns = []
    for store in stores:
        if store.staged:
            raise ValueError(
                f"event store {store.relation!r} has a staged epoch: the string pool is "
                f"compacted at commits only"
            )
        if store.pool is pool:
            columns += [(store, c) for c in store.fields.values() if c.kind == "string"]
    used = np.zeros(len(pool.strings) + 1, np.bool_)  # the last entry: code -1, absent
    for store, column in columns:
        used[column.values[: store.size][store.alive[: store.size]]] = True
    used[-1] = False
    kept = np.flatnonzero(used)
    codes: npt.NDArray[np.int32] = np.full(len(pool.strings) + 1, -1, np.int32)
    codes[kept] = np.arange(kept.shape[0], dtype=np.int32)
    for store, column in columns:
        column.values[: store.size] = codes[column.values[: store.size]]
    dropped = len(pool.strings) - kept.shape[0]
    pool.strings = [pool.strings[i] for i in kept.tolist()]
    pool.codes = {s: i for i, s in enumerate(pool.strings)}
    pool.kept = len(pool.strings)
    return dropped
