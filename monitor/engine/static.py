"""Static evaluation (BiGJoin): every current match of a query, by the same prefix extension.

Seeded by every tuple of one atom's relation, the static plan extends prefixes exactly as delta
queries do; each binding is produced once, so no consolidation is needed and matches can be
counted or streamed out chunk by chunk within the prefix budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from monitor.engine.extend import IndexReader, StageRunner
from monitor.engine.pipeline import run_plan
from monitor.engine.seeds import seed_prefixes
from monitor.index.levels import I32
from monitor.plan.cut import Cut
from monitor.plan.plan import DeltaQuery
from monitor.plan.planner import static_plan
from monitor.query.ast import Query


def enumerate_matches(
    query: Query,
    index: IndexReader,
    emit: Callable[[list[I32]], None],
    *,
    max_prefixes: int = 1 << 20,
    cut: Cut = Cut.NEW,
    runner: type[StageRunner] = StageRunner,
    restrict: Mapping[str, I32] | None = None,
) -> None:
    """Pass every current match to ``emit``, in batches of binding columns in head order
    (``runner``: the stage implementation, as :func:`~monitor.engine.pipeline.run_plan`'s).
    With ``restrict`` (variable -> sorted dense ids), only the matches whose variables it names
    take one of those ids: the seed's tuples restricted, and the prefixes after the stage that
    binds each other variable named."""
    plan = static_plan(query)
    columns = _seed_tuples(plan, index, cut, restrict or {})
    if not columns or not columns[0].shape[0]:
        return
    if restrict:
        keep = np.ones(columns[0].shape[0], np.bool_)
        for position, at in enumerate(plan.seed.columns):
            allowed = restrict.get(plan.order[at])
            if allowed is not None:
                keep &= np.isin(columns[position], allowed)
        columns = [c[keep] for c in columns]
        if not columns[0].shape[0]:
            return
    seeds = seed_prefixes(plan, columns, np.ones(columns[0].shape[0], np.int64), index)
    run_plan(plan, index, seeds, max_prefixes, lambda p: emit(list(p.columns)), runner, restrict)


def _seed_tuples(
    plan: DeltaQuery, index: IndexReader, cut: Cut, restrict: Mapping[str, I32]
) -> list[I32]:
    """The tuples of the seed's relation; of a binary one whose first variable ``restrict``
    names, only those of its allowed ids (proposed by their adjacency, not every tuple read
    and filtered: an aggregate's few group rows, every epoch)."""
    seed = plan.seed
    first = plan.order[seed.columns[0]] if seed.columns else ""
    allowed = restrict.get(first)
    if len(seed.columns) != 2 or allowed is None or seed.columns[0] == seed.columns[1]:
        return index.tuples(seed.relation, cut)
    # (a binary relation's adjacency by its first position is keyed by that vertex itself)
    owner, values = index.view(seed.relation, 1, cut).propose(allowed.astype(np.int64))
    return [allowed[owner].astype(np.int32), values.astype(np.int32)]


def count_matches(
    query: Query,
    index: IndexReader,
    *,
    max_prefixes: int = 1 << 20,
    cut: Cut = Cut.NEW,
    runner: type[StageRunner] = StageRunner,
) -> int:
    """The number of current matches of ``query``."""
    total = 0

    def add(columns: list[I32]) -> None:
        nonlocal total
        total += int(columns[0].shape[0]) if columns else 0

    enumerate_matches(query, index, add, max_prefixes=max_prefixes, cut=cut, runner=runner)
    return total
