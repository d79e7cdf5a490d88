"""``distinct`` queries count exactly networkx's subgraph monomorphisms, streamed or static."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from networkx.algorithms.isomorphism import DiGraphMatcher

from core.records import RelationUpdates, UpdateBatch
from monitor.engine.static import count_matches
from monitor.query.ast import Query
from monitor.query.builtins import builtin
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings


def distinct(query: Query) -> Query:
    return Query(query.name, query.head, query.atoms, query.filters, distinct=True)


PATTERNS = [distinct(builtin(n)) for n in ("triangle", "4-clique", "diamond", "house")] + list(
    parse_queries(
        """
        cycle3(a, b, c) := e(a, b), e(b, c), e(c, a), distinct.
        path3(a, b, c, d) := e(a, b), e(b, c), e(c, d), distinct.
        star(a, b, c) := e(a, b), e(a, c), distinct.
        """
    )
)


def pattern_graph(query: Query) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(query.head)
    graph.add_edges_from(atom.variables for atom in query.atoms)
    return graph


def monomorphisms(data: nx.DiGraph, query: Query) -> int:
    return sum(1 for _ in DiGraphMatcher(data, pattern_graph(query)).subgraph_monomorphisms_iter())


@pytest.mark.parametrize("seed", range(4))
def test_streamed_distinct_queries_count_monomorphisms(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, m = 12, 60
    src = rng.integers(0, n, 4 * m)
    dst = rng.integers(0, n, 4 * m)
    pairs = np.unique(np.stack([src, dst], axis=1)[src != dst], axis=0)
    pairs = pairs[rng.permutation(pairs.shape[0])][:m]
    src, dst = pairs[:, 0], pairs[:, 1]
    # Stream the edges, then delete a third of them, in epochs of 7 updates.
    deleted = rng.choice(m, m // 3, replace=False)
    s = np.concatenate([src, src[deleted]])
    d = np.concatenate([dst, dst[deleted]])
    diff = np.concatenate([np.ones(m, np.int8), -np.ones(deleted.shape[0], np.int8)])
    processor = EpochProcessor(PATTERNS, Settings(batch_size=7))
    running = {q.name: 0 for q in PATTERNS}
    for lo in range(0, s.shape[0], 7):
        hi = min(lo + 7, s.shape[0])
        batch = UpdateBatch(
            {"e": RelationUpdates([s[lo:hi], d[lo:hi]], diff[lo:hi], np.arange(lo, hi))},
            lo,
            hi - lo,
        )
        out = processor.process(batch)
        processor.commit()
        for q in out.queries:
            running[q.query] += int(q.diff.sum())
    alive = np.ones(m, np.bool_)
    alive[deleted] = False
    data = nx.DiGraph()
    data.add_nodes_from(range(n))
    data.add_edges_from(zip(src[alive].tolist(), dst[alive].tolist(), strict=True))
    for query in PATTERNS:
        expected = monomorphisms(data, query)
        assert running[query.name] == expected, query.name
        assert count_matches(query, processor.index) == expected, query.name
