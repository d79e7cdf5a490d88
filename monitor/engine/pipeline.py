"""Running a plan's stages over seed prefixes, depth first, within a prefix budget.

Prefixes are extended stage by stage. Before a stage, each prefix's smallest count bounds the
extensions it can produce, so the batch is cut into chunks whose counts add up to at most the
per-stage budget, and each chunk is carried to the end before the next one starts (the paper's
batching of B prefixes). At most ``max_prefixes`` prefixes are alive at once over all stages,
unless a single prefix alone proposes more than a stage's share of the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from monitor.engine.extend import IndexReader, StageRunner
from monitor.engine.prefixes import Prefixes
from monitor.index.levels import I64
from monitor.plan.plan import DeltaQuery

Emit = Callable[[Prefixes], None]


class Pipeline:
    """The stages of one plan, bound to an index, with a prefix budget."""

    def __init__(self, runners: Sequence[StageRunner], max_prefixes: int) -> None:
        self.runners = list(runners)
        self.budget = max(1, max_prefixes // (len(self.runners) + 1))
        self.peak_prefixes = 0

    def run(self, seeds: Prefixes, emit: Emit) -> None:
        """Extend ``seeds`` through every stage and pass each batch of full bindings to ``emit``."""
        n = len(seeds)
        for lo in range(0, n, self.budget):  # one seed proposes one prefix
            self._descend(0, seeds.slice(lo, min(lo + self.budget, n)), emit, 0)

    def _descend(self, level: int, prefixes: Prefixes, emit: Emit, alive: int) -> None:
        alive += len(prefixes)
        self.peak_prefixes = max(self.peak_prefixes, alive)
        if level == len(self.runners):
            emit(prefixes)
            return
        runner = self.runners[level]
        winner, counts, keys = runner.counts(prefixes)
        live = np.flatnonzero(counts > 0)  # rows, not a mask: each column is read once
        if live.shape[0] < counts.shape[0]:
            prefixes, winner, counts = prefixes.take(live), winner[live], counts[live]
            keys = [k[live] for k in keys]
        for lo, hi in _chunks(counts, self.budget):
            part = [k[lo:hi] for k in keys]
            extended = runner.extend(prefixes.slice(lo, hi), winner[lo:hi], part)
            if len(extended):
                self._descend(level + 1, extended, emit, alive)


def run_plan(
    plan: DeltaQuery,
    index: IndexReader,
    seeds: Prefixes,
    max_prefixes: int,
    emit: Emit,
    runner: type[StageRunner] = StageRunner,
) -> int:
    """Run ``plan``'s stages over ``seeds``, emitting bindings in head order; the peak prefixes.

    ``runner`` is the stage implementation (the benchmark's binary-join baseline swaps it).
    """
    pipeline = Pipeline([runner(s, index) for s in plan.stages], max_prefixes)

    def in_head_order(p: Prefixes) -> None:
        emit(Prefixes(tuple(p.columns[c] for c in plan.output), p.diff))

    pipeline.run(seeds, in_head_order)
    return pipeline.peak_prefixes


def _chunks(counts: I64, budget: int) -> list[tuple[int, int]]:
    """Consecutive ranges of rows whose counts sum to at most ``budget`` (at least one row each)."""
    n = int(counts.shape[0])
    if n == 0:
        return []
    total = np.cumsum(counts)
    if int(total[-1]) <= budget:
        return [(0, n)]
    bounds = []
    lo = 0
    while lo < n:
        base = int(total[lo - 1]) if lo else 0
        hi = int(np.searchsorted(total, base + budget, side="right"))
        hi = max(hi, lo + 1)
        bounds.append((lo, hi))
        lo = hi
    return bounds
