"""Epochs on the partitioned index: each query's change per epoch, as the single process has it.

An epoch's updates are staged on the shards (each relation's pairs netted where their keys
live), every query's delta queries run through the single process's evaluator
(:class:`~monitor.engine.delta.DeltaEvaluator`: the OLD and NEW cuts, the prefix budget,
consolidation) over the :class:`~monitor.distributed.sharded.ShardedIndex`, and the shards then
commit. The match deltas come with global vertex ids; :meth:`ShardedEpochs.external` decodes
them (each distinct id once, at the shard that numbered it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from core.records import UpdateBatch
from monitor.distributed.count import refuse_events, refuse_unsupported
from monitor.distributed.rounds import SharedRoundsEvaluator
from monitor.distributed.shard_calls import Shards
from monitor.distributed.sharded import ShardedIndex
from monitor.distributed.stages import ShardedStageRunner
from monitor.distributed.vertices import External
from monitor.engine.delta import MatchDeltas
from monitor.engine.static import enumerate_matches
from monitor.index.levels import I32
from monitor.plan.cut import Cut
from monitor.query.ast import Query


class ShardedEpochs:
    """The queries' delta evaluation, epoch after epoch, over shards."""

    def __init__(
        self,
        queries: Sequence[Query],
        shards: Shards,
        max_prefixes: int,
        shared_rounds: bool | None = None,
    ) -> None:
        """``shared_rounds``: whether a query's delta queries share their rounds of calls
        (:mod:`monitor.distributed.rounds`; None: when the shards are not in this process)."""
        refuse_unsupported(queries)
        self.queries = tuple(queries)
        self.max_prefixes = max_prefixes
        self.index = ShardedIndex(shards)
        for query in queries:
            self.index.arity.update(query.relations)
        self.evaluator = SharedRoundsEvaluator(queries, max_prefixes, shared_rounds)
        self.evaluator.runner = ShardedStageRunner  # (a stage in three rounds of calls)
        self.epochs = 0

    def process(self, batch: UpdateBatch) -> list[MatchDeltas]:
        """Stage ``batch``, evaluate every query's change, commit; the changes (external
        ids)."""
        deltas = self.evaluate(batch)
        self.commit()
        return self.decoded(deltas)

    def evaluate(self, batch: UpdateBatch) -> list[MatchDeltas]:
        """Stage ``batch`` and evaluate every query's change (aborted on failure); the changes
        in global ids (:meth:`external` gives their external ids). Then :meth:`commit` it (with
        a state directory, after the shards prepared it)."""
        refuse_events(batch)
        try:
            changes = self.index.stage_batch(batch)
            return self.evaluator.evaluate(self.index, changes)
        except BaseException:
            self.index.abort()
            raise

    def external(self, deltas: Sequence[MatchDeltas]) -> list[list[External]]:
        """The external ids of every delta's columns, in one round."""
        columns = [c for d in deltas for c in d.columns]
        decoded = self.index.vertices.decode(columns)
        out, at = [], 0
        for d in deltas:
            out.append(decoded[at : at + len(d.columns)])
            at += len(d.columns)
        return out

    def decoded(self, deltas: Sequence[MatchDeltas]) -> list[MatchDeltas]:
        """``deltas`` with the external ids in their columns."""
        return [
            replace(d, columns=columns)
            for d, columns in zip(deltas, self.external(deltas), strict=True)
        ]

    def preload(self, batch: UpdateBatch) -> None:
        """Load ``batch`` into the shards without evaluating (epoch 0)."""
        refuse_events(batch)
        self.index.load(batch)

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
