"""A static evaluation seeded by given rows of some variables (an aggregate's group rows list
the events of their bindings this way): exactly the matches whose variables take the values of
one of the rows, as filtering every match, whichever variables the rows bind."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.records import RelationUpdates, UpdateBatch
from monitor.engine.static import enumerate_given, enumerate_matches
from monitor.index.graph import GraphIndex
from monitor.index.levels import I32
from monitor.plan.planner import GIVEN, given_plan
from monitor.query.parser import parse_queries

(PATHS,) = parse_queries("paths(a, b, c) := e(a, b), e(b, c), a != c.")
EDGES = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=1, max_size=40)
ROWS = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=12, unique=True)


def index_of(edges: list[tuple[int, int]]) -> GraphIndex:
    index = GraphIndex()
    index.relation("e", 2)
    src, dst = (np.array(c, np.int64) for c in zip(*edges, strict=True))
    n = src.shape[0]
    updates = RelationUpdates([src, dst], np.ones(n, np.int8), np.arange(n, dtype=np.int64))
    index.apply(UpdateBatch({"e": updates}, 0, n))
    return index


def collect(run: object) -> set[tuple[int, ...]]:
    found: set[tuple[int, ...]] = set()

    def take(columns: list[I32]) -> None:
        found.update(zip(*(c.tolist() for c in columns), strict=True))

    run(take)  # type: ignore[operator]
    return found


@pytest.mark.parametrize("variables", [("a", "c"), ("c", "a"), ("a",), ("b",), ("a", "b")])
@settings(max_examples=60, deadline=None)
@given(edges=EDGES, rows=ROWS)
def test_given_rows_seed_exactly_their_matches(
    variables: tuple[str, ...], edges: list[tuple[int, int]], rows: list[tuple[int, int]]
) -> None:
    index = index_of(edges)
    rows = sorted({r[: len(variables)] for r in rows})
    columns = [np.array([r[k] for r in rows], np.int64) for k in range(len(variables))]
    dense = [index.dictionary.encode(c, add=False) for c in columns]
    known = np.logical_and.reduce([d >= 0 for d in dense]) if rows else np.zeros(0, np.bool_)
    given_rows = [d[known].astype(np.int32) for d in dense]
    every = collect(lambda take: enumerate_matches(PATHS, index, take, max_prefixes=64))
    at = [PATHS.head.index(v) for v in variables]
    wanted = set(zip(*(g.tolist() for g in given_rows), strict=True)) if rows else set()
    expected = {m for m in every if tuple(m[k] for k in at) in wanted}
    got = collect(
        lambda take: enumerate_given(PATHS, index, variables, given_rows, take, max_prefixes=64)
    )
    assert got == expected


def test_two_given_ends_of_a_path_bind_its_middle_by_intersection() -> None:
    """Seeded by ``(a, c)``, ``b`` is one of ``a``'s successors among ``c``'s predecessors: one
    stage of two extenders, not the chains from ``a`` to every ``c``."""
    plan = given_plan(PATHS, ("a", "c"))
    assert plan.seed.relation == GIVEN
    (stage,) = plan.stages
    assert stage.variable == "b" and len(stage.extenders) == 2, plan.describe()
