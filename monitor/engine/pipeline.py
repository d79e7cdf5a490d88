"""Running a plan's stages over seed prefixes, depth first, within a prefix budget.

Prefixes are extended stage by stage. Before a stage, each prefix's smallest count bounds the
extensions it can produce, so the batch is cut into chunks whose counts add up to at most the
per-stage budget, and each chunk is carried to the end before the next one starts (the paper's
batching of B prefixes). At most ``max_prefixes`` prefixes are alive at once over all stages,
unless a single prefix alone proposes more than a stage's share of the budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.engine.extend import IndexReader, StageRunner
from monitor.engine.prefixes import Prefixes
from monitor.index.levels import I64
from monitor.plan.plan import DeltaQuery, Stage

Emit = Callable[[Prefixes], None]
#: A plan's bindings, in its head order, for the query it belongs to.
PlanEmit = Callable[[str, DeltaQuery, Prefixes], None]


@dataclass
class Node:
    """A stage (None at a root: the seeds), the plans whose stages end here, and the stages
    that follow: one plan's stages are a chain of nodes, several plans' that begin alike a trie
    (:mod:`monitor.engine.shared`)."""

    stage: Stage | None
    ends: list[tuple[str, DeltaQuery]] = field(default_factory=list)
    children: dict[Any, Node] = field(default_factory=dict)

    @property
    def depth(self) -> int:
        return 1 + max((c.depth for c in self.children.values()), default=0)


def chain(plan: DeltaQuery, query: str = "") -> Node:
    """``plan``'s stages as a chain of nodes from a root; the plan ends at the last."""
    root = node = Node(None)
    for stage in plan.stages:
        node = node.children.setdefault(len(node.children), Node(stage))
    node.ends.append((query, plan))
    return root


class Pipeline:
    """The stages below a root bound to an index, run over seed prefixes with a prefix budget.

    Each node's prefixes are extended once for every plan through it; each plan gets the
    bindings of the node its stages end at, in its head order. A class, not a closure calling
    itself: a closure's cycle would keep the stage runners, and the index versions they read,
    until the cyclic collector ran.
    """

    def __init__(
        self, root: Node, index: IndexReader, max_prefixes: int, runner: type[StageRunner]
    ) -> None:
        self.root, self.index, self.runner = root, index, runner
        self.budget = max(1, max_prefixes // root.depth)
        self.runners: dict[int, StageRunner] = {}  # (made as the run reaches them)
        self.peak_prefixes = 0

    def run(self, seeds: Prefixes, emit: PlanEmit) -> int:
        """Extend ``seeds`` through every stage, handing each plan its bindings; the peak
        number of prefixes alive at once."""
        n = len(seeds)
        for lo in range(0, n, self.budget):  # one seed proposes one prefix
            self._descend(self.root, seeds.slice(lo, min(lo + self.budget, n)), emit, 0)
        return self.peak_prefixes

    def _descend(self, node: Node, prefixes: Prefixes, emit: PlanEmit, alive: int) -> None:
        alive += len(prefixes)
        self.peak_prefixes = max(self.peak_prefixes, alive)
        for query, plan in node.ends:
            emit(
                query,
                plan,
                Prefixes(tuple(prefixes.columns[c] for c in plan.output), prefixes.diff),
            )
        for child in node.children.values():
            assert child.stage is not None
            runner = self.runners.get(id(child))
            if runner is None:
                runner = self.runners[id(child)] = self.runner(child.stage, self.index)
            winner, counts, keys = runner.counts(prefixes)
            live = np.flatnonzero(counts > 0)  # rows, not a mask: each column is read once
            extending = prefixes
            if live.shape[0] < counts.shape[0]:
                extending, winner, counts = prefixes.take(live), winner[live], counts[live]
                keys = [k[live] for k in keys]
            for lo, hi in _chunks(counts, self.budget):
                part = [k[lo:hi] for k in keys]
                extended = runner.extend(extending.slice(lo, hi), winner[lo:hi], part)
                if len(extended):
                    self._descend(child, extended, emit, alive)


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
    pipeline = Pipeline(chain(plan), index, max_prefixes, runner)
    return pipeline.run(seeds, lambda _query, _plan, p: emit(p))


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
