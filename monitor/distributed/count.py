"""The static count on the partitioned index: ``count --workers N``.

The updates are loaded into the shards (each pair to the shard of its key at each position),
then each query's static plan (:func:`~monitor.plan.planner.static_plan`) runs through the
single process's pipeline over a :class:`~monitor.distributed.sharded.ShardedIndex`. What the
partitioned engine cannot run yet is refused before anything is loaded, by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from core.errors import InputError
from core.records import UpdateBatch
from monitor.distributed.shard_calls import Shards
from monitor.distributed.sharded import ShardedIndex
from monitor.distributed.stages import ShardedStageRunner
from monitor.engine.static import count_matches
from monitor.query.ast import Query


def unsupported(query: Query) -> str | None:
    """The first feature of ``query`` the partitioned engine cannot run yet (None: none)."""
    if query.predicates or query.within is not None or any(a.edge for a in query.atoms):
        return "events (fields, predicates, `as`, `within`)"
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


def refuse_events(batch: UpdateBatch) -> None:
    """Raise :class:`InputError` when ``batch`` holds events (the partitioned engine takes
    tuples only, so far)."""
    if batch.events:
        raise InputError("the partitioned engine (--workers) does not take events yet")


def load(index: ShardedIndex, batches: Iterable[UpdateBatch]) -> int:
    """Load every batch's tuples into the shards; the number of updates."""
    total = 0
    for batch in batches:
        refuse_events(batch)
        index.load(batch)
        total += sum(len(part) for part in batch.parts.values())
    return total


def count_all(
    queries: Sequence[Query], shards: Shards, batches: Iterable[UpdateBatch], max_prefixes: int
) -> tuple[dict[str, int], ShardedIndex]:
    """Each query's number of current matches over the loaded batches, and the index."""
    refuse_unsupported(queries)
    index = ShardedIndex(shards)
    for query in queries:
        index.arity.update(query.relations)
    load(index, batches)
    counts = {
        q.name: count_matches(q, index, max_prefixes=max_prefixes, runner=ShardedStageRunner)
        for q in queries
    }
    return counts, index
