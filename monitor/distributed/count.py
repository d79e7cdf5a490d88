"""The static count on the partitioned index: ``count --workers N``.

The updates are loaded into the shards (each pair to the shard of its key at each position, each
event to the shard of its id), then each query's static plan
(:func:`~monitor.plan.planner.static_plan`) runs through the single process's pipeline over a
:class:`~monitor.distributed.sharded.ShardedIndex`. What the partitioned engine cannot run yet
is refused before anything is loaded, by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from core.errors import InputError
from core.records import UpdateBatch
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.shard_calls import Shards
from monitor.distributed.sharded import ShardedIndex
from monitor.distributed.stages import ShardedStageRunner
from monitor.engine.static import count_matches
from monitor.plan.events import event_relations
from monitor.query.ast import Query
from monitor.service.settings import Settings


def unsupported(queries: Sequence[Query], state_dir: str | None) -> str | None:
    """What of a run the partitioned engine cannot do yet (None: nothing)."""
    events = event_relations(tuple(queries))
    if state_dir is not None and events:
        return (
            f"events ({', '.join(sorted(events))}) with --state-dir: their stores are not "
            "kept durable on shards yet; run without --state-dir, or without --workers"
        )
    return None


def refuse_unsupported(queries: Sequence[Query], state_dir: str | None = None) -> None:
    """Raise :class:`InputError` naming what the partitioned engine cannot run."""
    feature = unsupported(queries, state_dir)
    if feature is not None:
        raise InputError(f"the partitioned engine (--workers) does not run {feature}")


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
