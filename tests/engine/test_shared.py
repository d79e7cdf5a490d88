"""Plans that begin alike run their common stages once (:mod:`monitor.engine.shared`).

The lengths of a path are queries of their own, and the delta queries their last hops seed
begin alike: the trie must run those stages once, and every query must get exactly the change it
gets when each of its plans runs alone, on random streams with deletes and expiry.
"""

from __future__ import annotations

import gc
import itertools
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine.delta import DeltaEvaluator
from monitor.engine.extend import StageRunner
from monitor.engine.shared import PlanTrie
from monitor.plan.events import event_relations, rewrite
from monitor.query import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_events_oracle import deltas
from tests.engine.test_time_oracle import batch
from tests.service.test_paths_oracle import OPS

QUERIES = """
round_trip(a) :=
    transfer{2,5}(a, a) as p,
    p.amount >= 1, next(p).ts > p.ts, next(p).amount >= 0.5 * p.amount,
    within 30m, distinct.
chain(a, b) := transfer{1,3}(a, b) as p, next(p).amount <= p.amount, distinct.
pair(a, b) := transfer(a, b) as t, transfer(b, a) as u, t.ts < u.ts.
less(a, b) := transfer(a, b) as t, transfer(b, a) as u, t.amount < u.amount.
more(a, b) := transfer(a, b) as t, transfer(b, a) as u, t.amount > u.amount.
"""


def trie_of(text: str) -> PlanTrie:
    queries = parse_queries(text)
    events = event_relations(queries)
    evaluator = DeltaEvaluator([rewrite(q, events).internal for q in queries])
    return PlanTrie((q, p) for q, plans in evaluator.plans.items() for p in plans)


def test_the_lengths_of_a_round_trip_seeded_by_their_last_hop_share_their_first_stages() -> None:
    trie = trie_of(
        """round_trip(a) := transfer{5,6}(a, a) as p, p.amount >= 1000, next(p).ts > p.ts,
        next(p).amount >= 0.8 * p.amount, within 7d, distinct."""
    )
    last = [
        root
        for plan, root in trie.roots.values()
        if plan.seed.atom == 2 * int(plan.query[-2]) - 1  # (the events atom of the last hop)
    ]
    assert len(last) == 1, "the last hops of both lengths seed alike"
    node, shared = last[0], 0
    while not node.ends:  # (down the plans' own stages, not their alternatives)
        own = [c for k, c in node.children.items() if k not in node.alternatives.values()]
        if len(own) != 1:
            break
        node, shared = own[0], shared + 1
    assert shared >= 4, shared  # two hops back from the seed, an event and its end each
    assert trie.shared >= 4


def test_plans_that_filter_otherwise_share_nothing() -> None:
    """``less`` and ``more`` read the same relations in the same order: their filters differ."""
    trie = trie_of(
        """less(a, b) := transfer(a, b) as t, transfer(b, a) as u, t.amount < u.amount.
        more(a, b) := transfer(a, b) as t, transfer(b, a) as u, t.amount > u.amount."""
    )
    assert trie.shared == 0
    assert len(trie.roots) == 2  # (each seeds its two plans: the same seeds, other stages)
    assert all(len(root.children) == 2 for _, root in trie.roots.values())


def run(ops: list[tuple[Any, ...]], cuts: list[int], shares: bool) -> list[Counter[Any]]:
    processor = EpochProcessor(
        parse_queries(QUERIES), Settings(allowed_lateness=0, watermark_outliers=0)
    )
    processor.evaluator.shares_stages = shares
    out: list[Counter[Any]] = []
    for lo, hi in itertools.pairwise(sorted({0, len(ops), *(c for c in cuts if c < len(ops))})):
        result = processor.process(batch(ops[lo:hi], lo))
        processor.commit()
        out.append(Counter({(q, b): d for q, b, d in deltas(result.queries)}))
    return out


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(OPS, min_size=3, max_size=30), cuts=st.lists(st.integers(1, 30), max_size=5))
def test_shared_stages_give_every_query_the_change_its_plans_give_alone(
    ops: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    assert run(ops, cuts, True) == run(ops, cuts, False)


def test_a_run_leaves_no_stage_runner_for_the_cyclic_collector() -> None:
    """The runners of an epoch read the index's versions of that epoch: once it is evaluated,
    nothing may keep them (a cycle would, until the cyclic collector ran: the memory of a long
    run grew by a version an epoch, 380 -> 690 MiB over bench.typologies' 2M events)."""
    ops = [("insert", i, i % 3, (i + 1) % 3, 2, i) for i in range(12)]
    processor = EpochProcessor(
        parse_queries(QUERIES), Settings(allowed_lateness=0, watermark_outliers=0)
    )
    gc.collect()
    gc.disable()
    try:
        for lo in range(0, len(ops), 4):
            processor.process(batch(ops[lo : lo + 4], lo))
            processor.commit()
        left = [o for o in gc.get_objects() if isinstance(o, StageRunner)]
    finally:
        gc.enable()
    assert left == []
