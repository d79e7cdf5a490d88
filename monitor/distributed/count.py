"""The static count on the partitioned index: ``count --workers N``.

The updates are loaded into the shards (each pair to the shard of its key at each position),
then each query's static plan (:func:`~monitor.plan.planner.static_plan`) runs through the
single process's pipeline over a :class:`~monitor.distributed.sharded.ShardedIndex`. What the
partitioned engine cannot run yet is refused before anything is loaded, by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from core.errors import InputError
from core.records import UpdateBatch
from monitor.distributed.sharded import ShardedIndex, Shards
from monitor.distributed.stages import ShardedStageRunner
from monitor.engine.static import count_matches
from monitor.query.ast import Query

#: Vertex ids the partitioned index takes as they are (its dense ids): integers in this range.
MAX_VERTEX = 2**31 - 1


def unsupported(query: Query) -> str | None:
    """The first feature of ``query`` the partitioned engine cannot run yet (None: none)."""
    if query.predicates or query.within is not None or any(a.edge for a in query.atoms):
        return "events (fields, predicates, `as`, `within`)"
    for atom in query.atoms:
        if len(atom.variables) != 2:
            return f"relations of {len(atom.variables)} ids ({atom.relation})"
    return None


def refuse_unsupported(queries: Sequence[Query]) -> None:
    """Raise :class:`InputError` naming the first query and feature the partitioned engine
    cannot run."""
    for query in queries:
        feature = unsupported(query)
        if feature is not None:
            raise InputError(
                f"query {query.name}: the partitioned engine (--workers) does not run "
                f"{feature} yet; run it without --workers"
            )


def load(index: ShardedIndex, batches: Iterable[UpdateBatch]) -> int:
    """Load every batch's tuples into the shards; the number of updates."""
    total = 0
    for batch in batches:
        if batch.events:
            raise InputError("the partitioned engine (--workers) does not take events yet")
        for name, part in sorted(batch.parts.items()):
            columns = [vertex_ids(name, c, len(part.columns)) for c in part.columns]
            index.load(name, columns, part.diff)
            total += len(part)
    return total


def vertex_ids(relation: str, column: np.ndarray, arity: int) -> np.ndarray:
    """A column of a relation's updates as the partitioned index takes it (integer ids of a
    binary relation, from 0 to :data:`MAX_VERTEX`), or :class:`InputError` saying why not."""
    if arity != 2:
        raise InputError(
            f"relation {relation}: the partitioned engine (--workers) takes relations of "
            f"two ids, got {arity}"
        )
    if column.dtype != np.int64:
        raise InputError(
            f"relation {relation}: the partitioned engine (--workers) takes integer vertex ids "
            "for now; this input has strings"
        )
    if column.shape[0] and (int(column.min()) < 0 or int(column.max()) > MAX_VERTEX):
        raise InputError(
            f"relation {relation}: the partitioned engine (--workers) takes vertex ids from 0 "
            f"to {MAX_VERTEX}"
        )
    return column


def count_all(
    queries: Sequence[Query], shards: Shards, batches: Iterable[UpdateBatch], max_prefixes: int
) -> tuple[dict[str, int], ShardedIndex]:
    """Each query's number of current matches over the loaded batches, and the index."""
    refuse_unsupported(queries)
    index = ShardedIndex(shards)
    load(index, batches)
    counts = {
        q.name: count_matches(q, index, max_prefixes=max_prefixes, runner=ShardedStageRunner)
        for q in queries
    }
    return counts, index
