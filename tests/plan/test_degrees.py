"""Degree bounds: which aggregate bodies get them, and the index's degree relations against the
live events they count, through inserts, deletes, expiry and a rebuild.

That the groups' output stays exact with them is the grouped oracle's to show
(``tests/service/test_grouped_oracle.py``: its ``scatter`` is bounded; its fixed stream fails
with a bound one too high, with bounds counted after the epoch's changes, or with pruned
bindings taken out before the rows' values are read or as expired).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.plan.degrees import degree_bounds
from monitor.plan.events import rewrite, selection_of
from monitor.plan.planner import delta_queries
from monitor.query.ast import Query
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_time_oracle import batch


def bounds(text: str) -> list[str]:
    (query,) = parse_queries(text)
    selected: dict[str | None, Any] = {None: ()}
    selected.update((a.edge, selection_of(query, a.edge)) for a in query.atoms if a.edge)
    return [str(b.atom) for b in degree_bounds(query, {"transfer"}, selected)]


def test_a_distinct_count_of_neighbours_bounds_the_group_vertices_it_is_joined_to() -> None:
    assert bounds(
        "sg(a, c) := transfer(a, b) as t1, transfer(b, c) as t2, count(distinct b) >= 5."
    ) == ["transfer#out>=5(a)", "transfer#in>=5(c)"]
    # (the selection of the atom's edge variable; '> 4' is '>= 5'; an atom without 'as')
    assert bounds(
        "sg(a) := transfer(a, b) as t, t.amount < 10, transfer(b, c), count(distinct b) > 4."
    ) == ["transfer{amount < 10}#out>=5(a)"]


def test_no_bound_where_it_cannot_prune_or_does_not_follow() -> None:
    # one event atom: a binding per event, nothing to save
    assert bounds("fan_in(b) := transfer(a, b) as t, count(distinct a) >= 10.") == []
    # a count of events, a bound of 1, a sum, a vertex not joined to the group
    two = "transfer(a, b) as t1, transfer(b, c) as t2"
    assert bounds(f"q(a, c) := {two}, count(distinct t1) >= 5.") == []
    assert bounds(f"q(a, c) := {two}, count(distinct b) >= 1.") == []
    assert bounds(f"q(a, c) := {two}, sum(t1.amount) >= 5.") == []
    assert bounds(f"q(a) := {two}, count(distinct c) >= 5.") == []
    # a plain relation's atom is not an event relation's
    assert bounds("q(a) := knows(a, b), transfer(b, c) as t, count(distinct b) >= 5.") == []


def test_only_the_single_process_plan_reads_them() -> None:
    (query,) = parse_queries(
        "sg(a, c) := transfer(a, b) as t1, transfer(b, c) as t2, count(distinct b) >= 3."
    )
    bounded = rewrite(query, {"transfer"}, bounds=True)
    plain = rewrite(query, {"transfer"})
    assert [b.name for b in bounded.degrees] == ["transfer#out>=3", "transfer#in>=3"]
    assert plain.degrees == () and plain.whole == plain.internal
    assert bounded.whole == plain.internal  # (the contributions enumerate every binding)


QUERIES = parse_queries(
    """
    hub(a, c) := transfer(a, b) as t1, transfer(b, c) as t2, t1.ts <= t2.ts, within 30m,
        count(distinct b) >= 2 over 30m.
    big(a, c) := transfer(a, b) as t1, t1.amount >= 2, transfer(b, c) as t2,
        count(distinct b) > 2.
    """
)
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("insert"),
            st.integers(0, 15),
            st.integers(0, 4),
            st.integers(0, 4),
            st.sampled_from([0, 1, 2, 3]),
            st.integers(0, 120),
        ),
        st.tuples(st.just("delete"), st.integers(0, 15)),
    ),
    max_size=60,
)


def degrees_of(processor: EpochProcessor, query: Query) -> dict[str, set[int]]:
    """Each bound's vertices (external ids), counted here from the store's live selected
    events."""
    store = processor.events.stores["transfer"]
    live = np.flatnonzero(store.alive[: store.size]).astype(np.int32)
    out: dict[str, set[int]] = {}
    rewritten = next(r for r in processor.rewritten if r.source.name == query.name)
    for bound in rewritten.degrees:
        eids = live[store.select(live, bound.tests)]
        pairs = set(zip(store.src[eids].tolist(), store.dst[eids].tolist(), strict=True))
        ends = Counter(s if bound.side == "out" else d for s, d in pairs)
        held = np.array([v for v, n in ends.items() if n >= bound.least], np.int32)
        out[bound.name] = set(processor.index.dictionary.decode(held).tolist())
    return out


def kept(processor: EpochProcessor, names: list[str]) -> dict[str, set[int]]:
    """Each degree relation's vertices (external ids)."""
    decode = processor.index.dictionary.decode
    return {name: set(decode(processor.index.tuples(name)[0]).tolist()) for name in names}


@settings(max_examples=150, deadline=None)
@given(OPS, st.lists(st.integers(1, 12), max_size=8))
def test_the_degree_relations_hold_the_vertices_with_enough_live_neighbours(
    ops: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    processor = EpochProcessor(QUERIES, Settings(allowed_lateness=0.0))
    lo = 0
    for size in [*cuts, len(ops)]:
        part = ops[lo : lo + size]
        if not part:
            break
        processor.process(batch(part, lo))
        processor.commit()
        lo += size
        for query in QUERIES:
            expected = degrees_of(processor, query)
            assert kept(processor, list(expected)) == expected
    processor.events.rebuild()  # (as a restore loads them: from the live events)
    for query in QUERIES:
        expected = degrees_of(processor, query)
        assert kept(processor, list(expected)) == expected


def test_the_degree_relations_see_vertices_come_and_go() -> None:
    """The property above is not vacuous: a vertex reaches a bound and falls below it."""
    ops: list[tuple[Any, ...]] = [("insert", i, 0, 1 + i, 3, i) for i in range(3)]
    processor = EpochProcessor(QUERIES, Settings(allowed_lateness=0.0))
    processor.process(batch(ops, 0))
    processor.commit()
    assert kept(processor, ["transfer#out>=2", "transfer{amount >= 2}#out>=3"]) == {
        "transfer#out>=2": {0},
        "transfer{amount >= 2}#out>=3": {0},
    }
    processor.process(batch([("delete", 2)], 3))
    processor.commit()
    assert kept(processor, ["transfer#out>=2", "transfer{amount >= 2}#out>=3"]) == {
        "transfer#out>=2": {0},
        "transfer{amount >= 2}#out>=3": set(),
    }


def test_a_bound_on_a_far_vertex_is_checked_at_its_stage_and_the_range_step_stays() -> None:
    """The hops of a time-ordered chain are bound by ranges of time (the events after a new
    one are few); the bound of the vertex a range step reaches intersects at that stage."""
    (query,) = parse_queries(
        "sg(a, c) := transfer(a, b) as t1, transfer(b, c) as t2, t1.ts <= t2.ts, within 1d, "
        "count(distinct b) >= 5 over 1d."
    )
    plans = delta_queries(rewrite(query, {"transfer"}, bounds=True).internal)
    first = plans[0].describe()
    assert "seed:  changes of transfer#events#2(a, b, t1)" in first
    assert "extend t2: transfer#by_src#" in first
    assert "extend c: transfer#4[dst of t2], transfer#in>=5#" in first
