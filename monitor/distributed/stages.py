"""A stage over the shards in three rounds: count, propose, intersect.

The single process's :class:`~monitor.engine.extend.StageRunner` asks each extender in turn, and
over shards every question is a round of calls (one per shard). Here a stage asks all of its
extenders at once: one round counts every prefix's key at every extender's shard; one round has
each prefix's winning extender propose at its shard; one round intersects every proposal at
every other extender's shard. A stage of ``k`` extenders costs three rounds instead of about
``k * (k + 1)``. The answers, and so the prefixes, are the single process's; checks and
comparisons run as there.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from monitor.distributed.routing import Request, exchange, proposals, scattered
from monitor.distributed.sharded import ShardedIndex, ShardedView
from monitor.engine.extend import AdjacencySource, Keys, StageRunner
from monitor.engine.prefixes import Candidates, Prefixes
from monitor.index.levels import I32, I64
from monitor.plan.plan import Stage


class ShardedStageRunner(StageRunner):
    """A stage whose extenders all read sharded adjacencies, in three rounds."""

    def __init__(self, stage: Stage, index: ShardedIndex) -> None:
        super().__init__(stage, index)
        self.shards = index.shards
        self.views: list[ShardedView] = []
        for source in self.sources:
            if isinstance(source, AdjacencySource) and isinstance(source.view, ShardedView):
                self.views.append(source.view)
        #: A stage of a range step (its time order, or its event's far end) reads events: its
        #: one extender asks a round a question, as the single process asks it.
        self.adjacent = len(self.views) == len(self.sources)

    def counts(self, prefixes: Prefixes) -> tuple[npt.NDArray[np.intp], I64, Keys]:
        if not self.adjacent:
            return super().counts(prefixes)
        keys = [s.probe(prefixes) for s in self.sources]
        n = len(prefixes)
        requests: list[Request] = [
            (view.head, probe.keys, ()) for view, probe in zip(self.views, keys, strict=True)
        ]
        answers = exchange(self.shards, "count", requests)
        counts = np.stack([scattered(a, n, np.int64) for a in answers])
        if len(self.sources) == 1:
            return np.zeros(n, np.intp), counts[0], keys
        winner = np.argmin(counts, axis=0)
        return winner, counts[winner, np.arange(n)], keys

    def extend(self, prefixes: Prefixes, winner: npt.NDArray[np.intp], keys: Keys) -> Prefixes:
        if not self.adjacent:
            return super().extend(prefixes, winner, keys)
        several = len(self.sources) > 1
        won = [
            np.flatnonzero(winner == e) if several else np.arange(len(prefixes))
            for e in range(len(self.sources))
        ]
        proposing = [e for e, rows in enumerate(won) if rows.shape[0]]
        requests: list[Request] = [
            (self.views[e].head, keys[e].keys[won[e]], ()) for e in proposing
        ]
        candidates: list[tuple[int, npt.NDArray[np.int64], I32]] = []
        for e, answers in zip(proposing, exchange(self.shards, "propose", requests), strict=True):
            owner, values = proposals(answers, won[e].shape[0])
            rows = won[e][owner]
            if self.comparisons.comparisons:
                keep = self.comparisons.compare(Candidates(prefixes, rows, values))
                rows, values = rows[keep], values[keep]
            if rows.shape[0]:
                candidates.append((e, rows, values))
        if not candidates:
            return Prefixes.empty(prefixes.width + 1)
        # Every proposal at every other extender's shard, in one round.
        checks: list[tuple[int, int]] = []
        intersect: list[Request] = []
        for i, (e, rows, values) in enumerate(candidates):
            for f, view in enumerate(self.views):
                if f != e:
                    checks.append((i, f))
                    intersect.append((view.head, keys[f].keys[rows], (values,)))
        kept = [np.ones(rows.shape[0], np.bool_) for _, rows, _ in candidates]
        if intersect:
            for (i, _), answers in zip(
                checks, exchange(self.shards, "contains", intersect), strict=True
            ):
                kept[i] &= scattered(answers, kept[i].shape[0], np.bool_)
        rows = np.concatenate([c[1][k] for c, k in zip(candidates, kept, strict=True)])
        values = np.concatenate([c[2][k] for c, k in zip(candidates, kept, strict=True)])
        found = Candidates(prefixes, rows, values)
        if self.checks.active:
            found = found.take(self.checks.passing(found))
        return found.extended()
