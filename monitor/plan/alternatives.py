"""Alternatives: where a plan could range from another bound vertex, the plan that does.

A plan binds its variables in one order for every prefix, and each stage's count / propose /
intersect adapts to each prefix only among the extenders of that stage's variable. A ring
seeded by its last hop can close from either end: backward from the seed's source, hop by hop
through the events before it, or forward from its target (the ring's origin) through the events
since the window began. Which end has fewer events differs from prefix to prefix: a hub's
thousands of payments on one side, an ordinary account's few on the other. On
``bench.typologies``' ``round_trip`` (800k events), the six-hop ring's third backward range
proposes 93.7M events, where ranging forward from the origin instead, for each prefix whichever
is shorter, would propose 8.3M.

At each stage that takes a range step (:mod:`monitor.plan.range_steps`), :func:`alternatives`
looks for the range step another bound vertex could take there, and plans the query again with
that step first, from the same bound prefix on: the *alternative* of the stage. The pipeline
(:mod:`monitor.engine.shared`) counts both ranges for every prefix and sends each prefix down
the one with fewer events, weighed, once it has learned them, by what a value counted down
each has cost (:mod:`monitor.engine.pipeline`); an alternative has alternatives of its own at
its later range steps, so a ring's prefixes meet wherever their two ends cost least. Both
plans bind every variable of the query under the same atoms and filters, so a prefix's matches
are the same down either: each prefix going down exactly one, the bindings are produced once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from monitor.plan.plan import DeltaQuery, RangeExtender, Stage
from monitor.plan.range_steps import range_step
from monitor.query.ast import Query

#: Plans ``query`` again with its order beginning with the given variables.
Replan = Callable[[tuple[str, ...]], DeltaQuery]


def alternatives(query: Query, plan: DeltaQuery, replan: Replan, forward: bool) -> DeltaQuery:
    """``plan`` with an alternative at each of its range steps where another bound vertex can
    range instead (``forward``: the direction of time its range steps prefer)."""
    return _from(query, plan, replan, forward, 0)


def _from(query: Query, plan: DeltaQuery, replan: Replan, forward: bool, start: int) -> DeltaQuery:
    width = len(plan.order) - len(plan.stages)
    found: list[tuple[int, DeltaQuery]] = []
    for k in range(start, len(plan.stages)):
        stage = plan.stages[k]
        if not _ranges(stage):
            continue
        bound = plan.order[: width + k]
        step = range_step(query, bound, forward, besides=stage.variable)
        if step is None:
            continue
        other = replan((*bound, step.edge, step.far))
        if other.stages[:k] != plan.stages[:k] or _seeding(other) != _seeding(plan):
            continue  # (not the same plan up to there: a pipeline could not share its stages)
        found.append((k, _from(query, other, replan, forward, k + 1)))
    return replace(plan, alternatives=tuple(found))


def _ranges(stage: Stage) -> bool:
    return len(stage.extenders) == 1 and isinstance(stage.extenders[0], RangeExtender)


def _seeding(plan: DeltaQuery) -> tuple[object, ...]:
    return (plan.seed, plan.checks, plan.comparisons, plan.fields, plan.guards)


def count(plan: DeltaQuery) -> int:
    """How many plans ``plan`` is with its alternatives, its own included."""
    return 1 + sum(count(alt) for _, alt in plan.alternatives)
