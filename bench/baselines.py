"""The baselines every figure is printed beside (STYLE rule 9), run on the same stream as ours.

*Binary join* (edge-at-a-time delta plans): the same delta queries with the same attribute
orders, cuts, checks and filters, but each stage's values always come from ONE fixed extender,
the first of the stage: a binary join with that atom that materializes all its extensions, the
stage's other atoms applied afterwards as semijoin filters. There is no count minimization, so a
prefix whose first atom is a hub proposes the whole hub neighbourhood even when another atom has
two values. This is what a delta-join built from binary hash joins does (the paper's comparison
with edge-at-a-time dataflows).

*Recompute*: after each epoch is applied, every current match is counted from scratch with the
static evaluator (BiGJoin, :func:`monitor.engine.static.count_matches`). Counting is cheaper than
what a real recomputing system must do (enumerate both results and diff them), so this baseline
is flattered. It is slow on large graphs, so it is measured over a few epochs only and the
report says so.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from core.records import UpdateBatch
from monitor.engine.delta import DeltaEvaluator
from monitor.engine.extend import IndexReader, Keys, StageRunner
from monitor.engine.prefixes import Prefixes
from monitor.engine.static import count_matches
from monitor.index.levels import I64
from monitor.plan.plan import Stage
from monitor.query.ast import Query
from monitor.service.epochs import EpochProcessor


class BinaryJoinStageRunner(StageRunner):
    """A stage that always proposes from its first extender and intersects with the others."""

    def __init__(self, stage: Stage, index: IndexReader) -> None:
        super().__init__(stage, index)
        alone = replace(stage, extenders=stage.extenders[:1], checks=(), comparisons=())
        self._first = StageRunner(alone, index)

    def counts(self, prefixes: Prefixes) -> tuple[npt.NDArray[np.intp], I64, Keys]:
        """Extender 0 for every prefix, with its count (which only sizes the pipeline's chunks),
        and every extender's keys (the others intersect).

        A prefix with no value in the first atom cannot extend, so dropping it is still exact.
        """
        winner, counts, first = self._first.counts(prefixes)
        others = [s.probe(prefixes) for s in self.sources[1:]]
        return winner, counts, [*first, *others]


class BinaryJoinEvaluator(DeltaEvaluator):
    """:class:`~monitor.engine.delta.DeltaEvaluator` whose stages run as binary joins.

    Only the stage runner differs: seeds, consolidation and statistics are the engine's own.
    """

    runner = BinaryJoinStageRunner


def use_binary_join(processor: EpochProcessor, queries: Sequence[Query]) -> None:
    """Make ``processor`` evaluate ``queries`` with binary-join delta plans from now on."""
    processor.evaluator = BinaryJoinEvaluator(queries, processor.settings.max_prefixes)


@dataclass(frozen=True)
class Recount:
    """One recompute epoch: seconds to apply the updates, seconds to recount, and the count."""

    apply_seconds: float
    count_seconds: float
    count: int


def recount(processor: EpochProcessor, query: Query) -> tuple[int, float]:
    """Every current match of ``query`` counted from scratch, and the seconds it took."""
    started = time.perf_counter()
    total = count_matches(query, processor.index, max_prefixes=processor.settings.max_prefixes)
    return total, time.perf_counter() - started


def recompute_epoch(processor: EpochProcessor, query: Query, batch: UpdateBatch) -> Recount:
    """Apply one epoch's updates without delta evaluation, then recount ``query`` from scratch."""
    started = time.perf_counter()
    processor.preload(batch)
    applied = time.perf_counter() - started
    total, seconds = recount(processor, query)
    return Recount(applied, seconds, total)
