"""The static count on the partitioned index: ``count --workers N``.

The updates are loaded into the shards (each pair to the shard of its key at each position, each
event to the shard of its id), then each query's static plan
(:func:`~monitor.plan.planner.static_plan`) runs through the single process's pipeline over a
:class:`~monitor.distributed.sharded.ShardedIndex`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from core.records import UpdateBatch
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.shard_calls import Shards
from monitor.distributed.sharded import ShardedIndex
from monitor.distributed.stages import ShardedStageRunner
from monitor.engine.static import count_matches
from monitor.query.ast import Query
from monitor.service.settings import Settings


def count_all(
    queries: Sequence[Query],
    shards: Shards,
    batches: Iterable[UpdateBatch],
    max_prefixes: int,
    settings: Settings | None = None,
) -> tuple[dict[str, int], ShardedIndex]:
    """Each query's number of current matches over the loaded batches, and the index."""
    epochs = ShardedEpochs(queries, shards, max_prefixes, settings=settings)
    for batch in batches:
        epochs.preload(batch)
    counts = {
        q.name: count_matches(q, epochs.index, max_prefixes=max_prefixes, runner=ShardedStageRunner)
        for q in epochs.internal
    }
    return counts, epochs.index
