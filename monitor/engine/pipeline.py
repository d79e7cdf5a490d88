"""Running a plan's stages over seed prefixes, depth first, within a prefix budget.

Prefixes are extended stage by stage. Before a stage, each prefix's smallest count bounds the
extensions it can produce, so the batch is cut into chunks whose counts add up to at most the
per-stage budget, and each chunk is carried to the end before the next one starts (the paper's
batching of B prefixes). At most ``max_prefixes`` prefixes are alive at once over all stages,
unless a single prefix alone proposes more than a stage's share of the budget.

Where a node's child has an alternative (:mod:`monitor.plan.alternatives`), both stages count
every prefix, and each prefix goes down the one expected to cost it less: the values its stage
counts for it, times what a value counted there has cost so far (the values counted there and
the prefixes extended there and below it, over the values counted: :meth:`Node.cost`), once
both have counted :data:`LEARNED` values; before, the one that counts fewer (the plan's own where
equal). A count says how many events a range holds, not how many pass the stage's join filters
or lead anywhere: ranging backward from a ring's last hop, the hop's amount bounds each earlier
one, forward from its origin nothing does yet (on ``bench.typologies``' ``round_trip``, 2M
events, the prefixes extended fall from 32.0M to 28.2M). Either way a prefix finds the same
bindings (both plans bind every variable under the same atoms and filters), so what it costs
decides only the time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.engine.extend import IndexReader, StageRunner
from monitor.engine.prefixes import Prefixes
from monitor.index.levels import I64
from monitor.plan.plan import DeltaQuery, Stage

#: Values a stage counts before its cost per value steers prefixes between alternatives.
LEARNED = 1 << 10

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
    #: Per child (its key), the key of its alternative: each prefix goes down the one of the
    #: two expected to cost it less (:mod:`monitor.plan.alternatives`; the module's docstring).
    alternatives: dict[Any, Any] = field(default_factory=dict)
    #: The values this stage counted for the prefixes sent down it, over the run's epochs,
    #: and those plus the prefixes extended here and below: what :meth:`cost` reads.
    counted: int = field(default=0, compare=False)
    spent: int = field(default=0, compare=False)

    def cost(self) -> float | None:
        """What a value this stage counts has cost so far (its own examination and the
        prefixes extended from it, here and below), once it counted :data:`LEARNED`; None
        before."""
        return self.spent / self.counted if self.counted >= LEARNED else None

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
        #: Prefixes extended so far by this pipeline (a subtree's share is what it adds).
        self.extended = 0
        #: How many prefixes went down an alternative (:mod:`monitor.plan.alternatives`).
        self.alternated = 0

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
        instead = set(node.alternatives.values())
        for key, child in node.children.items():
            if key in instead:
                continue  # (with the child it is the alternative of)
            runner = self._runner(child)
            winner, counts, keys = runner.counts(prefixes)
            other = node.alternatives.get(key)
            if other is None:
                self._extend(child, runner, prefixes, counts > 0, winner, counts, keys, emit, alive)
                continue
            child_b = node.children[other]
            runner_b = self._runner(child_b)
            winner_b, counts_b, keys_b = runner_b.counts(prefixes)
            cost, cost_b = child.cost(), child_b.cost()
            if cost is None or cost_b is None:
                fewer = counts_b < counts
            else:
                fewer = counts_b * cost_b < counts * cost
            self.alternated += int(np.count_nonzero(fewer & (counts_b > 0)))
            self._extend(
                child, runner, prefixes, ~fewer & (counts > 0), winner, counts, keys, emit, alive
            )
            self._extend(
                child_b,
                runner_b,
                prefixes,
                fewer & (counts_b > 0),
                winner_b,
                counts_b,
                keys_b,
                emit,
                alive,
            )

    def _runner(self, child: Node) -> StageRunner:
        assert child.stage is not None
        runner = self.runners.get(id(child))
        if runner is None:
            runner = self.runners[id(child)] = self.runner(child.stage, self.index)
        return runner

    def _extend(
        self,
        child: Node,
        runner: StageRunner,
        prefixes: Prefixes,
        going: npt.NDArray[np.bool_],
        winner: npt.NDArray[np.intp],
        counts: I64,
        keys: list[Any],
        emit: PlanEmit,
        alive: int,
    ) -> None:
        """Extend the prefixes ``going`` down ``child`` (``counts`` and ``keys``: its runner's
        of every prefix), chunk by chunk within the budget, and descend."""
        live = np.flatnonzero(going)  # rows, not a mask: each column is read once
        extending = prefixes
        if live.shape[0] < counts.shape[0]:
            extending, winner, counts = prefixes.take(live), winner[live], counts[live]
            keys = [k[live] for k in keys]
        total = np.cumsum(counts)
        for lo, hi in _chunks(total, self.budget):
            part = [k[lo:hi] for k in keys]
            extended = runner.extend(extending.slice(lo, hi), winner[lo:hi], part)
            before = self.extended
            self.extended += len(extended)
            if len(extended):
                self._descend(child, extended, emit, alive)
            counted = int(total[hi - 1] - (total[lo - 1] if lo else 0))
            child.counted += counted
            child.spent += counted + self.extended - before


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


def _chunks(total: I64, budget: int) -> list[tuple[int, int]]:
    """Consecutive ranges of rows whose counts (``total``: their running sum) sum to at most
    ``budget`` (at least one row each)."""
    n = int(total.shape[0])
    if n == 0:
        return []
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
