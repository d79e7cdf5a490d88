"""Static evaluation (BiGJoin): every current match of a query, by the same prefix extension.

Seeded by every tuple of one atom's relation, the static plan extends prefixes exactly as delta
queries do; each binding is produced once, so no consolidation is needed and matches can be
counted or streamed out chunk by chunk within the prefix budget.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from monitor.engine.extend import IndexReader, StageRunner
from monitor.engine.pipeline import run_plan
from monitor.engine.seeds import seed_prefixes
from monitor.index.levels import I32
from monitor.plan.cut import Cut
from monitor.plan.planner import given_plan, static_plan
from monitor.query.ast import Query


def enumerate_matches(
    query: Query,
    index: IndexReader,
    emit: Callable[[list[I32]], None],
    *,
    max_prefixes: int = 1 << 20,
    cut: Cut = Cut.NEW,
    runner: type[StageRunner] = StageRunner,
) -> None:
    """Pass every current match to ``emit``, in batches of binding columns in head order
    (``runner``: the stage implementation, as :func:`~monitor.engine.pipeline.run_plan`'s)."""
    plan = static_plan(query)
    columns = index.tuples(plan.seed.relation, cut)
    if not columns or not columns[0].shape[0]:
        return
    seeds = seed_prefixes(plan, columns, np.ones(columns[0].shape[0], np.int64), index)
    run_plan(plan, index, seeds, max_prefixes, lambda p: emit(list(p.columns)), runner)


def enumerate_given(
    query: Query,
    index: IndexReader,
    variables: tuple[str, ...],
    given: list[I32],
    emit: Callable[[list[I32]], None],
    *,
    max_prefixes: int = 1 << 20,
    runner: type[StageRunner] = StageRunner,
) -> None:
    """Pass to ``emit`` every current match (at ``NEW``) whose ``variables`` take the values
    of a row of ``given`` (dense ids, one column per variable, rows distinct): the plan is
    seeded by those rows (:func:`~monitor.plan.planner.given_plan`), and reads nothing of
    the matches of other rows."""
    if not given or not given[0].shape[0]:
        return
    plan = given_plan(query, variables)
    seeds = seed_prefixes(plan, given, np.ones(given[0].shape[0], np.int64), index)
    run_plan(plan, index, seeds, max_prefixes, lambda p: emit(list(p.columns)), runner)


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
