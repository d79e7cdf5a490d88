"""A static evaluation restricted to some vertices (an aggregate's group rows list the events
of their bindings this way): exactly the matches whose variables take the allowed ids, the
variables the seed binds and the ones later stages bind alike, as filtering every match."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.records import RelationUpdates, UpdateBatch
from monitor.engine.static import enumerate_matches
from monitor.index.graph import GraphIndex
from monitor.index.levels import I32
from monitor.plan.planner import static_plan
from monitor.query.parser import parse_queries

(PATHS,) = parse_queries("paths(a, b, c) := e(a, b), e(b, c), a != c.")


def matches(index: GraphIndex, restrict: dict[str, I32] | None) -> set[tuple[int, ...]]:
    found: set[tuple[int, ...]] = set()

    def take(columns: list[I32]) -> None:
        found.update(zip(*(c.tolist() for c in columns), strict=True))

    enumerate_matches(PATHS, index, take, max_prefixes=64, restrict=restrict)
    return found


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=1, max_size=40),
    st.sets(st.integers(0, 7)),
    st.sets(st.integers(0, 7)),
)
def test_restricted_matches_are_the_matches_so_filtered(
    edges: list[tuple[int, int]], firsts: set[int], lasts: set[int]
) -> None:
    index = GraphIndex()
    index.relation("e", 2)
    src, dst = (np.array(c, np.int64) for c in zip(*edges, strict=True))
    n = src.shape[0]
    updates = RelationUpdates([src, dst], np.ones(n, np.int8), np.arange(n, dtype=np.int64))
    index.apply(UpdateBatch({"e": updates}, 0, n))
    encode = index.dictionary.encode
    allowed = {
        "a": np.unique(encode(np.array(sorted(firsts), np.int64), add=False)),
        "c": np.unique(encode(np.array(sorted(lasts), np.int64), add=False)),
    }
    allowed = {v: ids[ids >= 0].astype(np.int32) for v, ids in allowed.items()}
    every = matches(index, None)
    expected = {m for m in every if m[0] in allowed["a"] and m[2] in allowed["c"]}
    assert matches(index, allowed) == expected
    seed = {static_plan(PATHS).order[c] for c in static_plan(PATHS).seed.columns}
    assert seed == {"a", "b"}  # (so c is bound by a later stage: its restriction is not the seed's)
