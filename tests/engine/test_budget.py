"""The prefix budget: evaluation never holds more than ``max_prefixes`` prefixes at once."""

from __future__ import annotations

import numpy as np
import pytest

from core.records import RelationUpdates, UpdateBatch
from monitor.engine.delta import DeltaEvaluator
from monitor.engine.static import count_matches
from monitor.index.graph import GraphIndex
from monitor.query.builtins import builtin


def ring_lattice(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every vertex points to its next ``k`` neighbours on a ring: degree k, many cliques."""
    src = np.repeat(np.arange(n), k)
    dst = (src + np.tile(np.arange(1, k + 1), n)) % n
    return src.astype(np.int64), dst.astype(np.int64)


@pytest.mark.parametrize("budget", [64, 256, 4096])
def test_peak_prefixes_stay_within_the_budget_and_results_do_not_change(budget: int) -> None:
    src, dst = ring_lattice(300, 6)
    query = builtin("4-clique")
    results = []
    for max_prefixes in (budget, 1 << 22):
        index = GraphIndex()
        index.relation("e", 2)
        evaluator = DeltaEvaluator([query], max_prefixes=max_prefixes)
        seq = np.arange(src.shape[0], dtype=np.int64)
        batch = UpdateBatch(
            {"e": RelationUpdates([src, dst], np.ones(src.shape[0], np.int8), seq)},
            0,
            src.shape[0],
        )
        staged = index.stage(batch)
        (out,) = evaluator.evaluate(index, staged.changes)
        index.commit()
        results.append(([c.tolist() for c in out.columns], out.diff.tolist()))
        if max_prefixes == budget:
            # Degrees are 6, so no single prefix exceeds a stage's share of the budget.
            assert 0 < evaluator.stats.peak_prefixes <= budget
        assert len(out) == count_matches(query, index, max_prefixes=max_prefixes)
    assert results[0] == results[1]
    assert len(results[0][1]) > 1000
