"""A plan's alternatives: each prefix ranges from whichever end of its ring has fewer events.

:mod:`monitor.plan.alternatives` plans a ring again wherever another bound vertex could range
instead, and the pipeline sends each prefix down one of the two. The streams here have a hub
(most events touch vertex 0), so that the two ends' ranges differ and prefixes go both ways;
the rings found must be the paths oracle's (:mod:`tests.service.test_paths_oracle`), after every
epoch, with deletes and expiry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any
from unittest.mock import patch

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine import pipeline
from monitor.engine.pipeline import Node, Pipeline
from monitor.engine.prefixes import Prefixes
from monitor.engine.shared import PlanTrie
from monitor.plan.alternatives import count
from monitor.plan.events import event_relations, rewrite
from monitor.plan.planner import delta_queries
from monitor.query import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_time_oracle import batch
from tests.service.test_paths_oracle import ROUND_TRIP, check

VERTEX = st.sampled_from([0, 0, 0, 1, 2, 3, 4, 5])


@st.composite
def hub_streams(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Events in the order of their times, most touching the hub 0, with rings of 2 to 4 hops
    among them (hop after hop, each among other events), and deletes: insert (id, src, dst,
    amount, ts in minutes), or delete an id."""
    noise = draw(st.lists(st.tuples(VERTEX, VERTEX), max_size=20))
    events = [(s, d) for s, d in noise]
    for _ in range(draw(st.integers(1, 3))):
        ring = draw(st.lists(st.integers(0, 5), min_size=2, max_size=4, unique=True))
        hops = [(v, ring[(i + 1) % len(ring)]) for i, v in enumerate(ring)]
        at = sorted(
            draw(st.lists(st.integers(0, len(events)), min_size=len(hops), max_size=len(hops)))
        )
        for offset, (where, hop) in enumerate(zip(at, hops, strict=True)):
            events.insert(where + offset, hop)
    ops: list[tuple[Any, ...]] = []
    ts = 0
    for i, (src, dst) in enumerate(events):
        ts += draw(st.integers(0, 2))
        ops.append(("insert", i, src, dst, draw(st.integers(3, 4)), ts))
        if draw(st.integers(0, 9)) == 0:
            ops.append(("delete", draw(st.integers(0, i))))
    return ops


def hub_ring(spokes: int) -> list[tuple[Any, ...]]:
    """A ring 1 -> 2 -> 3 -> 0 -> 1 closed last by 0 -> 1, where the hub 0 received ``spokes``
    payments from 4 before 3 paid it: backward from the last hop, its range is the hub's
    ``spokes + 1`` payments; forward from the origin 1, one."""
    ops: list[tuple[Any, ...]] = [("insert", 0, 1, 2, 4, 1), ("insert", 1, 2, 3, 4, 2)]
    ops += [("insert", 2 + i, 4, 0, 4, 3 + i) for i in range(spokes)]
    ops += [("insert", spokes + 2, 3, 0, 4, spokes + 3), ("insert", spokes + 3, 0, 1, 4, 29)]
    return ops


def test_a_prefix_ranges_from_the_end_with_fewer_events_and_finds_its_ring() -> None:
    ops = hub_ring(6)
    processor = EpochProcessor(
        parse_queries(ROUND_TRIP), Settings(allowed_lateness=0, watermark_outliers=0)
    )
    processor.process(batch(ops[:-1], 0))
    processor.commit()
    before = processor.evaluator.stats.alternated
    processor.process(batch(ops[-1:], len(ops) - 1))
    processor.commit()
    assert processor.evaluator.stats.alternated > before
    assert check(ROUND_TRIP, ["round_trip"], ops, [len(ops) - 1]) == 1


@settings(max_examples=150, deadline=None)
@given(ops=hub_streams(), cuts=st.lists(st.integers(1, 40), max_size=5))
def test_rings_through_a_hub_are_the_oracles_whichever_way_their_prefixes_go(
    ops: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    check(ROUND_TRIP, ["round_trip"], ops, cuts)


def test_a_ring_ranges_from_either_end_at_each_step() -> None:
    """The six-hop ring seeded by its last hop may range backward from the seed or forward
    from the origin at each of its four range steps: one plan and its alternatives, one per
    way of meeting."""
    (query,) = [
        rewrite(q, event_relations([q])).internal
        for q in parse_queries(
            """r(a) := transfer{6}(a, a) as p, next(p).ts > p.ts, within 7d, distinct."""
        )
    ]
    plans = delta_queries(query)
    last = next(p for p in plans if p.seed.atom == 2 * 6 - 1)
    assert [k for k, _ in last.alternatives] == [0, 2, 4]
    assert count(last) == 8  # the backward range's stage replaced at each range step or not
    (_, first), *_ = last.alternatives
    ends = {last.stages[0].variable, first.stages[0].variable}
    assert ends == {"p_1", "p_5"}  # (forward from the origin, backward from the seed's source)
    assert "or, where its range costs less than stage 1's: order p_" in last.describe()
    trie = PlanTrie([("r", p) for p in plans])
    assert sum(_alternatives(root) for _, root in trie.roots.values()) >= 3
    assert PlanTrie([("r", last)]).shared == 0  # (its alternatives are the plan again)


def test_plans_through_a_stage_without_the_same_alternative_keep_it_to_themselves() -> None:
    """A stage two plans share, only one of which has an alternative there: no prefix may
    leave it, or the other plan would lose the prefix's matches."""
    queries = [
        rewrite(q, event_relations([q])).internal
        for q in parse_queries(
            """r(a) := transfer{4}(a, a) as p, next(p).ts > p.ts, within 7d, distinct."""
        )
    ]
    (plan,) = [p for p in delta_queries(queries[0]) if p.alternatives][:1]
    bare = replace(plan, alternatives=())
    trie = PlanTrie([("r", plan), ("s", bare)])
    assert sum(_alternatives(root) for _, root in trie.roots.values()) == 0
    alone = PlanTrie([("r", plan)])
    assert sum(_alternatives(root) for _, root in alone.roots.values()) >= 1
    assert alone.shared == 0  # (a plan's alternatives are the plan: it shares nothing)


def _alternatives(node: Node) -> int:
    return len(node.alternatives) + sum(_alternatives(c) for c in node.children.values())


@settings(max_examples=100, deadline=None)
@given(ops=hub_streams(), cuts=st.lists(st.integers(1, 40), max_size=5))
def test_rings_are_the_oracles_where_learned_costs_steer_the_prefixes(
    ops: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    """Once a stage has counted :data:`~monitor.engine.pipeline.LEARNED` values, what they
    cost steers its prefixes (here from the first one): the rings stay the oracle's."""
    with patch.object(pipeline, "LEARNED", 1):
        check(ROUND_TRIP, ["round_trip"], ops, cuts)


class _Promising:
    """A stage whose count for a prefix ``x`` is ``count(x)`` and which extends each prefix by
    ``kept(x)`` values: what the pipeline learns costs from, without an index."""

    def __init__(self, stage: Any, index: Any) -> None:
        self.count, self.kept = stage

    def counts(self, prefixes: Prefixes) -> tuple[Any, Any, list[Any]]:
        x = prefixes.columns[0].astype(np.int64)
        return np.zeros(len(prefixes), np.intp), self.count(x), []

    def extend(self, prefixes: Prefixes, winner: Any, keys: Any) -> Prefixes:
        kept = self.kept(prefixes.columns[0].astype(np.int64))
        rows = np.repeat(np.arange(len(prefixes)), kept)
        return prefixes.extended(rows, np.zeros(rows.shape[0], np.int32))


def _stage(count: Callable[[Any], Any], kept: Callable[[Any], Any]) -> Any:
    """What :class:`_Promising` is made from, in a node's place of a stage."""
    return (count, kept)


def test_a_prefix_goes_down_the_alternative_whose_values_have_cost_less() -> None:
    """Stage A counts ``x + 1`` values for prefix ``x`` and keeps them all, and the stage
    after it extends each by four more; its alternative B counts ``10 - x`` and keeps none.
    By counts alone prefixes 0..4 go down A; once both have counted enough values, a value of
    A has cost 6 (itself, its prefix, four below) and one of B 1, so only prefix 0 (6 < 10)
    does."""
    after = Node(_stage(lambda x: np.full(x.shape[0], 4), lambda x: np.full(x.shape[0], 4)))
    a = Node(_stage(lambda x: x + 1, lambda x: x + 1), children={0: after})
    b = Node(_stage(lambda x: 10 - x, lambda x: np.zeros(x.shape[0], np.int64)))
    root = Node(None, children={0: a, 1: b}, alternatives={0: 1})
    xs = np.arange(10, dtype=np.int32)
    seeds = Prefixes((xs,), np.ones(10, np.int64))
    runner: Any = _Promising

    def went_down_b() -> int:
        index: Any = None
        run = Pipeline(root, index, 1 << 20, runner)
        run.run(seeds, lambda *_: None)
        return run.alternated

    assert went_down_b() == 5  # (5..9: by counts, B's is the smaller)
    while a.cost() is None or b.cost() is None:
        went_down_b()
    assert a.cost() == 6.0 and b.cost() == 1.0
    assert went_down_b() == 9
