"""Delta queries that begin alike, run once up to where they part: a trie of plans.

A path of 2 to 6 hops is five queries, one per length (:mod:`monitor.query.paths`), and the delta
queries their last hops seed begin with the same stages: each ranges back over the hops before
its seed, under the same filters, until the hop that closes its ring. Run one by one, the
lengths 5 and 6 of ``bench.typologies``' ``round_trip`` both extend the same 13M prefixes
through their first four stages (of 250M extended in all, on 800k events).

:class:`PlanTrie` puts the delta queries of every query in a trie keyed by what the engine runs:
the seed (its relation, columns and sign of changes, its checks, filters and guards) and then
each stage (its extenders' relations, keys and cuts, its checks and filters), not the atom
numbers or the variable names, which only print. :func:`run_trie` extends each node's prefixes
once, depth first within the prefix budget as :class:`~monitor.engine.pipeline.Pipeline`
does, and hands every plan the bindings of the node its stages end at: each plan gets what it
would alone, the stages two plans share run once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from monitor.engine.extend import IndexReader, StageRunner
from monitor.engine.pipeline import _chunks
from monitor.engine.prefixes import Prefixes
from monitor.plan.plan import Check, DeltaQuery, Extender, Stage

P = TypeVar("P", Extender, Check)
#: A plan's bindings, in its head order, for the query it belongs to.
PlanEmit = Callable[[str, DeltaQuery, Prefixes], None]


@dataclass
class Node:
    """A stage shared by every plan through it (None at a root: the seeds), the plans whose
    stages end here, and the stages that follow."""

    stage: Stage | None
    ends: list[tuple[str, DeltaQuery]] = field(default_factory=list)
    children: dict[Any, Node] = field(default_factory=dict)

    @property
    def depth(self) -> int:
        return 1 + max((c.depth for c in self.children.values()), default=0)


class PlanTrie:
    """The delta queries of queries, by seed, as a trie of their stages."""

    def __init__(self, plans: Iterable[tuple[str, DeltaQuery]]) -> None:
        #: Per seed shape, a plan that seeds it (every plan under it seeds alike) and the root.
        self.roots: dict[Any, tuple[DeltaQuery, Node]] = {}
        for query, plan in plans:
            key = _seed_shape(plan)
            node = self.roots.setdefault(key, (plan, Node(None)))[1]
            for stage in plan.stages:
                node = node.children.setdefault(_stage_shape(stage), Node(stage))
            node.ends.append((query, plan))

    @property
    def shared(self) -> int:
        """How many stages run once for several plans (``explain`` and the tests read it)."""
        return sum(_shared(root) for _, root in self.roots.values())


def run_trie(
    root: Node,
    index: IndexReader,
    seeds: Prefixes,
    max_prefixes: int,
    emit: PlanEmit,
    runner: type[StageRunner] = StageRunner,
) -> int:
    """Extend ``seeds`` through the trie below ``root``; the peak prefixes alive at once."""
    run = _TrieRun(index, max(1, max_prefixes // root.depth), emit, runner)
    n = len(seeds)
    for lo in range(0, n, run.budget):
        run.descend(root, seeds.slice(lo, min(lo + run.budget, n)), 0)
    return run.peak


class _TrieRun:
    """One run of a trie over an epoch's seeds: its stage runners (made as the run reaches
    them), its budget and peak. A class, not a closure calling itself: a closure's cycle would
    keep the runners, and the index versions they read, until the cyclic collector ran."""

    def __init__(
        self, index: IndexReader, budget: int, emit: PlanEmit, runner: type[StageRunner]
    ) -> None:
        self.index, self.budget, self.emit, self.runner = index, budget, emit, runner
        self.runners: dict[int, StageRunner] = {}
        self.peak = 0

    def descend(self, node: Node, prefixes: Prefixes, alive: int) -> None:
        alive += len(prefixes)
        self.peak = max(self.peak, alive)
        for query, plan in node.ends:
            columns = tuple(prefixes.columns[c] for c in plan.output)
            self.emit(query, plan, Prefixes(columns, prefixes.diff))
        for child in node.children.values():
            assert child.stage is not None
            stage = self.runners.get(id(child))
            if stage is None:
                stage = self.runners[id(child)] = self.runner(child.stage, self.index)
            winner, counts, keys = stage.counts(prefixes)
            live = np.flatnonzero(counts > 0)
            part_of = prefixes
            if live.shape[0] < counts.shape[0]:
                part_of, winner, counts = prefixes.take(live), winner[live], counts[live]
                keys = [k[live] for k in keys]
            for lo, hi in _chunks(counts, self.budget):
                part = [k[lo:hi] for k in keys]
                extended = stage.extend(part_of.slice(lo, hi), winner[lo:hi], part)
                if len(extended):
                    self.descend(child, extended, alive)


def _seed_shape(plan: DeltaQuery) -> Any:
    seed = replace(plan.seed, atom=0)
    checks = tuple(_unnumbered(c) for c in plan.checks)
    guards = tuple(_unnumbered(g) for g in plan.guards)
    return (seed, checks, plan.comparisons, plan.fields, guards)


def _stage_shape(stage: Stage) -> Any:
    return replace(
        stage,
        variable="",
        extenders=tuple(_unnumbered(e) for e in stage.extenders),
        checks=tuple(_unnumbered(c) for c in stage.checks),
    )


def _unnumbered(part: P) -> P:
    """``part`` without its atom's number (printed by ``explain``, never read by the engine)."""
    return replace(part, atom=0)


def _shared(node: Node) -> int:
    ends = len(node.ends)
    below = sum(_plans(c) for c in node.children.values())
    here = int(node.stage is not None and ends + below > 1)
    return here + sum(_shared(c) for c in node.children.values())


def _plans(node: Node) -> int:
    return len(node.ends) + sum(_plans(c) for c in node.children.values())
