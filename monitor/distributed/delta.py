"""Epochs on the partitioned index: each query's change per epoch, as the single process has it.

An epoch's updates are staged on the shards (each relation's pairs netted where their keys
live), every query's delta queries run through the single process's evaluator
(:class:`~monitor.engine.delta.DeltaEvaluator`: the OLD and NEW cuts, the prefix budget,
consolidation) over the :class:`~monitor.distributed.sharded.ShardedIndex`, and the shards then
commit. The match deltas come with global vertex ids, which for integer ids are the ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from core.records import UpdateBatch
from monitor.distributed.count import refuse_unsupported, vertex_ids
from monitor.distributed.sharded import ShardedIndex, Shards
from monitor.distributed.stages import ShardedStageRunner
from monitor.engine.delta import DeltaEvaluator, MatchDeltas
from monitor.engine.static import enumerate_matches
from monitor.index.graph import Change
from monitor.index.levels import I32
from monitor.plan.cut import Cut
from monitor.query.ast import Query


class ShardedEpochs:
    """The queries' delta evaluation, epoch after epoch, over shards."""

    def __init__(self, queries: Sequence[Query], shards: Shards, max_prefixes: int) -> None:
        refuse_unsupported(queries)
        self.queries = tuple(queries)
        self.max_prefixes = max_prefixes
        self.index = ShardedIndex(shards)
        self.evaluator = DeltaEvaluator(queries, max_prefixes)
        self.evaluator.runner = ShardedStageRunner  # (a stage in three rounds of calls)
        self.epochs = 0

    def process(self, batch: UpdateBatch) -> list[MatchDeltas]:
        """Stage ``batch``, evaluate every query's change, commit; the changes."""
        deltas = self.evaluate(batch)
        self.commit()
        return deltas

    def evaluate(self, batch: UpdateBatch) -> list[MatchDeltas]:
        """Stage ``batch`` and evaluate every query's change (aborted on failure); the changes.
        Then :meth:`commit` it (with a state directory, after the shards prepared it)."""
        changes: dict[str, Change] = {}
        for name, part in sorted(batch.parts.items()):
            columns = [vertex_ids(name, c, len(part.columns)) for c in part.columns]
            change = self.index.stage(name, columns, part.diff, part.seq)
            if len(change):
                changes[name] = change
        try:
            deltas = self.evaluator.evaluate(self.index, changes)
        except BaseException:
            self.index.abort()
            raise
        return deltas

    def preload(self, batch: UpdateBatch) -> None:
        """Load ``batch`` into the shards without evaluating (epoch 0)."""
        for name, part in sorted(batch.parts.items()):
            columns = [vertex_ids(name, c, len(part.columns)) for c in part.columns]
            self.index.stage(name, columns, part.diff, part.seq)
            self.index.commit()

    def initial(self, emit: Callable[[MatchDeltas], None]) -> None:
        """Every current match of every query, as +1 deltas in batches."""
        for query in self.queries:

            def send(columns: list[I32], query: Query = query) -> None:
                diff = np.ones(columns[0].shape[0], np.int64)
                emit(MatchDeltas(query.name, query.head, columns, diff))

            enumerate_matches(
                query,
                self.index,
                send,
                max_prefixes=self.max_prefixes,
                cut=Cut.NEW,
                runner=ShardedStageRunner,
            )

    def commit(self) -> None:
        """Fold the evaluated epoch into the shards."""
        self.index.commit()
        self.epochs += 1
