"""Consolidation across workers: each changed binding published once, by one worker.

Scale-out splits an epoch's changes between workers, and each worker sums the delta queries
over its own share. A binding two of whose tuples changed in shares of different workers gets
a contribution from each (``+1`` and ``-1``, say, where the single worker publishes nothing).

Every worker has the whole index and the whole epoch staged, so it can compute, for any
binding ``b`` of a query with atoms ``R1 .. Rn``, both the binding's whole change
``NEW(b) - OLD(b)`` and each delta query's contribution

    c_i(b) = (NEW_i(t_i) - OLD_i(t_i)) * prod_{l < i} NEW_l(t_l) * prod_{l > i} OLD_l(t_l)

(``t_l`` the tuple of atom ``l`` under ``b``). The contributions sum to the whole change. Let
``i*`` be the first atom with ``c_i(b) != 0``: the worker that owns ``t_{i*}``'s change found
``b`` through its own seeds (its delta query ``i*`` produced it), so it, and no other, publishes
``b`` with the whole change. Every other worker that found ``b`` drops it. Each worker thus
examines the bindings its seeds produced (before its own summing) and keeps those it decides.

The rule needs the query's head to name every body variable (a projection sums over hidden
variables, so a binding is not one join row); the settings refuse it otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from monitor.engine.extend import IndexReader, last_key
from monitor.index.graph import Change
from monitor.index.levels import I32, I64, pack
from monitor.plan.cut import Cut
from monitor.query.ast import Query

#: ``owner(relation, tuple columns)``: per row, whether this worker owns that tuple's change.
Owns = Callable[[str, Sequence[I32]], npt.NDArray[np.bool_]]


def supports(query: Query) -> bool:
    """Whether bindings of ``query`` are join rows (its head names every body variable)."""
    body = {v for atom in query.atoms for v in atom.variables}
    return body <= set(query.head)


def contains(
    index: IndexReader, relation: str, columns: Sequence[I32], cut: Cut
) -> npt.NDArray[np.bool_]:
    """Whether each row's tuple of ``relation`` is present at ``cut``."""
    view = index.view(relation, len(columns) - 1, cut)
    return np.asarray(view.contains(last_key(index, relation, columns), columns[-1]), np.bool_)


def decide(
    query: Query, index: IndexReader, bindings: Sequence[I32], owns: Owns
) -> tuple[list[I32], I64]:
    """Of ``bindings`` (distinct, head order, dense ids), those this worker publishes, with
    their whole change (+1 or -1)."""
    n = bindings[0].shape[0] if bindings else 0
    if n == 0:
        return [b[:0] for b in bindings], np.empty(0, np.int64)
    position = {v: i for i, v in enumerate(query.head)}
    tuples = [[bindings[position[v]] for v in atom.variables] for atom in query.atoms]
    new = [
        contains(index, a.relation, t, Cut.NEW) for a, t in zip(query.atoms, tuples, strict=True)
    ]
    old = [
        contains(index, a.relation, t, Cut.OLD) for a, t in zip(query.atoms, tuples, strict=True)
    ]
    total = np.logical_and.reduce(new).astype(np.int64) - np.logical_and.reduce(old).astype(
        np.int64
    )
    first = np.full(n, -1, np.int64)
    for i in range(len(query.atoms)):
        c = new[i] != old[i]
        for k in range(i):
            c &= new[k]
        for k in range(i + 1, len(query.atoms)):
            c &= old[k]
        first[(first < 0) & c] = i
    mine = np.zeros(n, np.bool_)
    for i, (atom, cols) in enumerate(zip(query.atoms, tuples, strict=True)):
        rows = np.flatnonzero(first == i)
        if rows.size:
            mine[rows] = owns(atom.relation, [c[rows] for c in cols])
    keep = mine & (total != 0)
    return [b[keep] for b in bindings], total[keep]


def tuple_ids(index: IndexReader, relation: str, columns: Sequence[I32]) -> I64:
    """One sortable ``int64`` per tuple of ``relation``: its key and last value packed, as the
    index stores it (tuples the index does not know of arity >= 3 share key 0)."""
    return pack(last_key(index, relation, columns), columns[-1])


def change_owner(
    index: IndexReader,
    changes: Mapping[str, Change],
    owned_seq: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.bool_]],
) -> Owns:
    """``owns`` for an epoch's staged ``changes``: a tuple's change is this worker's when
    ``owned_seq`` says so of the sequence number of the update that decided it."""
    tables: dict[str, tuple[I64, npt.NDArray[np.bool_]]] = {}
    for name, change in changes.items():
        if change.seq is None or not len(change):
            continue
        ids = tuple_ids(index, name, change.columns)
        order = np.argsort(ids, kind="stable")
        tables[name] = (ids[order], owned_seq(change.seq[order]))

    def owns(relation: str, columns: Sequence[I32]) -> npt.NDArray[np.bool_]:
        out = np.zeros(columns[0].shape[0], np.bool_)
        table = tables.get(relation)
        if table is None or not out.size:
            return out
        ids, owned = table
        wanted = tuple_ids(index, relation, columns)
        at = np.minimum(np.searchsorted(ids, wanted), ids.shape[0] - 1)
        found = ids[at] == wanted
        out[found] = owned[at[found]]
        return out

    return owns
