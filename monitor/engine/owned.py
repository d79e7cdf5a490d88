"""Consolidation across workers: each changed binding published once, by one worker.

Scale-out splits an epoch's changes between workers, and each worker sums the delta queries
over its own share. A binding two of whose tuples changed in shares of different workers gets
a contribution from each (``+1`` and ``-1``, say, where the single worker publishes nothing).

Every worker has the whole epoch staged, so it can compute, for any binding ``b`` of a query
with atoms ``R1 .. Rn``, both the binding's whole change ``NEW(b) - OLD(b)`` and each delta
query's contribution

    c_i(b) = (NEW_i(t_i) - OLD_i(t_i)) * prod_{l < i} NEW_l(t_l) * prod_{l > i} OLD_l(t_l)

(``t_l`` the tuple of atom ``l`` under ``b``). The contributions sum to the whole change. Let
``i*`` be the first atom with ``c_i(b) != 0``: the worker that owns ``t_{i*}``'s change found
``b`` through its own seeds (its delta query ``i*`` produced it), so it, and no other, publishes
``b`` with the whole change. Every other worker that found ``b`` drops it. Each worker thus
examines the bindings its seeds produced (before its own summing) and keeps those it decides.

No index lookup is needed for it: every binding a delta query produces has each atom's tuple
present in ``OLD`` or in ``NEW``, so a tuple the epoch did not change is present in both, and
one it changed is present only in ``NEW`` (diff ``+1``) or only in ``OLD`` (``-1``). The
epoch's table of changed tuples (:class:`ChangedTuples`, one sorted array per relation, built
once per epoch) answers everything: which tuples changed, how, and whose change it was.

A projection (the pairs atom beside an events atom, :mod:`monitor.plan.cut`) seeds no delta
query, and its presence at a version follows from its events atom's: the rule runs over the
other atoms. (With it, the first contributing atom could be a pair whose change a *different*
event of the pair decided, on another worker, and the binding would be lost.)

The rule needs the query's head to name every body variable (a projection sums over hidden
variables, so a binding is not one join row); the settings refuse it otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.engine.extend import IndexReader, last_key
from monitor.index.graph import Change
from monitor.index.levels import I8, I32, I64, pack
from monitor.plan.cut import projections
from monitor.query.ast import Query


def supports(query: Query) -> bool:
    """Whether bindings of ``query`` are join rows (its head names every body variable)."""
    body = {v for atom in query.atoms for v in atom.variables}
    return body <= set(query.head)


def tuple_ids(index: IndexReader, relation: str, columns: Sequence[I32]) -> I64:
    """One sortable ``int64`` per tuple of ``relation``: its key and last value packed, as the
    index stores it (tuples the index does not know of arity >= 3 share key 0)."""
    return pack(last_key(index, relation, columns), columns[-1])


#: Bits of the membership filter per changed tuple (a false positive costs a binary search).
FILTER_BITS_PER_TUPLE = 64
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: multiply, keep the top bits


def _hash(ids: I64, bits: int) -> npt.NDArray[np.uint64]:
    return (ids.view(np.uint64) * _GOLDEN) >> np.uint64(64 - bits)


@dataclass(frozen=True)
class Table:
    """One relation's changed tuples: sorted ids, their diffs and owners, and a one-hash
    filter over the ids that rules most unchanged tuples out before any binary search."""

    ids: I64
    diff: I8
    owned: npt.NDArray[np.bool_]
    filter: npt.NDArray[np.bool_]
    bits: int

    @classmethod
    def of(cls, ids: I64, diff: I8, owned: npt.NDArray[np.bool_]) -> Table:
        bits = max(10, int(ids.shape[0] * FILTER_BITS_PER_TUPLE).bit_length())
        filter_ = np.zeros(1 << bits, np.bool_)
        filter_[_hash(ids, bits)] = True
        return cls(ids, diff, owned, filter_, bits)


@dataclass(frozen=True)
class ChangedTuples:
    """The staged epoch's changed tuples: per relation, sorted tuple ids with their diff and
    whether this worker owns the change (the partition of the update that decided it)."""

    index: IndexReader
    tables: dict[str, Table]

    @classmethod
    def of(
        cls,
        index: IndexReader,
        changes: Mapping[str, Change],
        owned_seq: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.bool_]],
        owned_whole: Mapping[str, bool] | None = None,
    ) -> ChangedTuples:
        """The table of ``changes`` (all of the epoch's); ``owned_seq`` says of an update's
        sequence number whether its partition is this worker's; ``owned_whole``, of some
        relations, whether all their changes are (or none)."""
        tables: dict[str, Table] = {}
        whole = owned_whole or {}
        for name, change in changes.items():
            if change.seq is None or not len(change):
                continue
            ids = tuple_ids(index, name, change.columns)
            order = np.argsort(ids, kind="stable")
            if name in whole:
                owned = np.full(order.shape[0], whole[name], np.bool_)
            else:
                owned = owned_seq(change.seq[order])
            tables[name] = Table.of(ids[order], change.diff[order], owned)
        return cls(index, tables)

    def lookup(self, relation: str, columns: Sequence[I32]) -> tuple[I8, npt.NDArray[np.bool_]]:
        """Per row: the diff of the tuple's change (0 when unchanged), and whether it is ours."""
        n = columns[0].shape[0]
        diff, owned = np.zeros(n, np.int8), np.zeros(n, np.bool_)
        table = self.tables.get(relation)
        if table is None or not n:
            return diff, owned
        wanted = tuple_ids(self.index, relation, columns)
        maybe = np.flatnonzero(table.filter[_hash(wanted, table.bits)])
        at = np.minimum(np.searchsorted(table.ids, wanted[maybe]), table.ids.shape[0] - 1)
        hit = table.ids[at] == wanted[maybe]
        rows, at = maybe[hit], at[hit]
        diff[rows] = table.diff[at]
        owned[rows] = table.owned[at]
        return diff, owned


def decide(query: Query, bindings: Sequence[I32], changed: ChangedTuples) -> tuple[list[I32], I64]:
    """Of ``bindings`` (distinct, head order, dense ids, each produced by a delta query of this
    epoch), those this worker publishes, with their whole change (+1 or -1)."""
    n = bindings[0].shape[0] if bindings else 0
    if n == 0:
        return [b[:0] for b in bindings], np.empty(0, np.int64)
    position = {v: i for i, v in enumerate(query.head)}
    projected = projections(query)
    diffs, owned = [], []
    for atom in (a for i, a in enumerate(query.atoms) if i not in projected):
        d, o = changed.lookup(atom.relation, [bindings[position[v]] for v in atom.variables])
        diffs.append(d)
        owned.append(o)
    diff = np.stack(diffs)  # atoms x bindings
    new, old = diff >= 0, diff <= 0
    total: I64 = np.asarray(new.all(axis=0), np.int64) - np.asarray(old.all(axis=0), np.int64)
    # c_i != 0: atom i changed, every atom before it present at NEW, every one after at OLD.
    before = np.ones_like(new)
    before[1:] = np.logical_and.accumulate(new[:-1], axis=0)
    after = np.ones_like(old)
    after[:-1] = np.logical_and.accumulate(old[::-1], axis=0)[::-1][1:]
    contributes = (diff != 0) & before & after
    first = np.asarray(np.argmax(contributes, axis=0), np.intp)
    mine = np.stack(owned)[first, np.arange(n)]
    keep = mine & (total != 0)
    return [b[keep] for b in bindings], total[keep]
