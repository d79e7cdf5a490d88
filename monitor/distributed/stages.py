"""A stage over the shards in rounds: count, extend, and the intersections left.

The single process's :class:`~monitor.engine.extend.StageRunner` asks each extender in turn, and
over shards every question is a round of calls (one per shard). Here a stage asks all of its
extenders at once. One round counts every prefix's key at every extender's shard. One round has
each prefix's winning extender propose at its shard, which intersects the proposals at every
other extender whose key it holds too (all of them on one shard). The proposals left visit the
other extenders' shards, one round for each, the survivors of one going on to the next (as the
paper's dataflow and the single process intersect). A stage of ``k`` extenders costs at most
``k + 1`` rounds (two on one shard) instead of about ``k * (k + 1)``. The answers, and so the
prefixes, are the single process's; checks and comparisons run as there."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from monitor.distributed.routing import Request, exchange, proposals, scattered
from monitor.distributed.sharded import ShardedIndex, ShardedView
from monitor.engine.extend import AdjacencySource, Keys, StageRunner, fewest
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
        self.paired = False  # (its rounds count per prefix)

    def counts(self, prefixes: Prefixes) -> tuple[npt.NDArray[np.intp], I64, Keys]:
        if not self.adjacent:
            return super().counts(prefixes)
        keys = [s.probe(prefixes) for s in self.sources]
        n = len(prefixes)
        requests: list[Request] = [
            (view.head, probe.keys, ()) for view, probe in zip(self.views, keys, strict=True)
        ]
        answers = exchange(self.shards, "count", requests)
        return (*fewest([scattered(a, n, np.int64) for a in answers]), keys)

    def extend(self, prefixes: Prefixes, winner: npt.NDArray[np.intp], keys: Keys) -> Prefixes:
        if not self.adjacent:
            return super().extend(prefixes, winner, keys)
        several = len(self.sources) > 1
        won = [
            np.flatnonzero(winner == e) if several else np.arange(len(prefixes))
            for e in range(len(self.sources))
        ]
        proposing = [e for e, rows in enumerate(won) if rows.shape[0]]
        # Each prefix proposes at its winning extender's shard, which intersects the proposals
        # at every other extender whose key it holds as well. The stage's comparisons (which
        # read the prefixes, here) come after, unlike the single process's: comparing first
        # sent every proposal back and out again, and measured slower (R-MAT 2M, `a < b, b < c`
        # triangles: 82,560 against 119,090 updates/s on one shard, 7x the bytes).
        requests: list[Request] = []
        for e in proposing:
            others = [f for f in range(len(self.views)) if f != e]
            head = (*self.views[e].head, tuple(self.views[f].head for f in others))
            extra = tuple(keys[f].keys[won[e]].astype(np.int32) for f in others)
            requests.append((head, keys[e].keys[won[e]], extra))
        candidates: list[tuple[int, npt.NDArray[np.int64], I32]] = []
        for e, answers in zip(proposing, exchange(self.shards, "extend", requests), strict=True):
            owner, values = proposals(answers, won[e].shape[0])
            rows = won[e][owner]
            if self.comparisons.comparisons:
                keep = self.comparisons.compare(Candidates(prefixes, rows, values))
                rows, values = rows[keep], values[keep]
            if rows.shape[0]:
                candidates.append((e, rows, values))
        if not candidates:
            return Prefixes.empty(prefixes.width + 1)
        # The rest visit the other extenders' shards in turn, as the single process intersects:
        # a round per other extender, each with the survivors of the last.
        count = self.shards.count
        shard = [k.keys % count for k in keys] if count > 1 else []  # (each prefix's key's)
        for step in range(len(self.views) - 1 if count > 1 else 0):
            asked: list[tuple[int, npt.NDArray[np.intp]]] = []
            intersect: list[Request] = []
            for i, (e, rows, values) in enumerate(candidates):
                f = step + (step >= e)  # (the step-th extender other than e)
                away = np.flatnonzero((shard[f] != shard[e])[rows])
                if away.shape[0]:
                    key = keys[f].keys[rows[away]]
                    asked.append((i, away))
                    intersect.append((self.views[f].head, key, (values[away],)))
            if not intersect:
                continue
            replies = exchange(self.shards, "contains", intersect)
            for (i, away), answer in zip(asked, replies, strict=True):
                e, rows, values = candidates[i]
                keep = np.ones(rows.shape[0], np.bool_)
                keep[away] = scattered(answer, away.shape[0], np.bool_)
                candidates[i] = (e, rows[keep], values[keep])
        rows = np.concatenate([rows for _, rows, _ in candidates])
        values = np.concatenate([values for _, _, values in candidates])
        extended = Candidates(prefixes, rows, values)
        if self.checks.active:
            extended = extended.take(self.checks.passing(extended))
        return extended.extended()
