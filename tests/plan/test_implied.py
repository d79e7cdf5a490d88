"""Implied join filters: a chain of field comparisons composed into one between its ends.

They must never change a result (every binding they drop fails the filters they come from,
floating point included), and they should prune where the chain's ends are bound first: a
round trip seeded by its last hop.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.fields import compare_implied
from monitor.plan.events import event_relations, rewrite
from monitor.plan.implied import implied
from monitor.plan.plan import RangeExtender
from monitor.plan.planner import delta_queries
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_time_oracle import batch


def implied_of(text: str) -> list[str]:
    """The implied filters of the one query of ``text`` (of a path, of its longest length)."""
    queries = parse_queries(text)
    return [str(p) for p in implied(queries[-1].predicates)]


def test_a_chain_of_ratios_composes_into_one_per_pair_of_its_ends() -> None:
    found = implied_of(
        """q(a) := transfer{4,4}(a, a) as p, next(p).amount >= 0.8 * p.amount,
        next(p).ts > p.ts, distinct."""
    )
    assert sorted(found) == sorted(
        [
            "p_3.amount >= 0.64 * p_1.amount (implied)",
            "p_4.amount >= 0.64 * p_2.amount (implied)",
            "p_4.amount >= 0.512 * p_1.amount (implied)",
        ]
    )


def test_an_upper_bound_turns_around_and_mixed_chains_compose() -> None:
    # t2 <= t1 and t3 >= 2 * t2 + 1: nothing follows between t1 and t3 (the one says t1 is
    # above t2, the other that t3 is); t3 <= t2 and t2 <= 0.5 * t1 say t1 >= 4 * t3
    assert (
        implied_of(
            "q(a, b, c, d) := transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, d) as t3, "
            "t2.amount <= t1.amount, t3.amount >= 2 * t2.amount."
        )
        == []
    )
    assert implied_of(
        "q(a, b, c, d) := transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, d) as t3, "
        "t3.amount <= t2.amount, t2.amount <= 0.5 * t1.amount."
    ) == ["t1.amount >= 2 * t3.amount (implied)"]


@pytest.mark.parametrize(
    "predicates",
    [
        "t2.ts > t1.ts, t3.ts > t2.ts",  # times: their closure is the windows' (time_bounds)
        "t2.amount = t1.amount, t3.amount = t2.amount",  # (= may join strings)
        "t2.amount >= -1 * t1.amount, t3.amount >= -1 * t2.amount",  # a negative scale
        "t2.amount >= t1.amount, t3.amount >= t2.amount, t3.amount >= 2 * t1.amount",  # direct
        "t2.amount >= t1.amount, t3.amount >= t1.amount",  # no chain: both from t1
    ],
)
def test_no_implied_filter_where_none_follows_or_one_is_written(predicates: str) -> None:
    assert (
        implied_of(
            "q(a, b, c, d) := transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, d) as t3, "
            f"{predicates}."
        )
        == []
    )


def test_the_tolerance_keeps_what_rounding_would_drop() -> None:
    """``0.8 * 0.8`` is ``0.6400000000000001``: 100, 80, 64 pass both filters of the chain,
    and the exact comparison of the composed one would drop them."""
    left, right = np.array([64.0, 63.9, np.nan]), np.array([100.0, 100.0, 100.0]) * (0.8 * 0.8)
    assert not (left[0] >= right[0])
    assert compare_implied(left, ">=", right).tolist() == [True, False, False]
    assert compare_implied(np.array([np.inf]), ">=", np.array([np.inf])).tolist() == [True]


def test_a_ring_at_the_exact_ratios_is_found_from_every_seed() -> None:
    """A round trip of three hops, each exactly 80% of the one before, arriving in every
    order: each arrival seeds another plan, and each reads the implied filter."""
    text = """ring(a) := transfer{3,3}(a, a) as p, next(p).amount >= 0.8 * p.amount,
        next(p).ts > p.ts, distinct."""
    hops = [
        ("insert", 0, 0, 1, 100.0, 1),
        ("insert", 1, 1, 2, 80.0, 2),
        ("insert", 2, 2, 0, 64.0, 3),
    ]
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        processor = EpochProcessor(parse_queries(text), Settings(allowed_lateness=0))
        rows = 0
        for k, i in enumerate(order):
            out = processor.process(batch([hops[i]], k))
            processor.commit()
            rows += sum(int(q.diff.sum()) for q in out.queries)
        assert rows == 1, order


def test_a_ring_seeded_by_its_last_hop_ranges_over_the_hop_before_it() -> None:
    """The seed's amount bounds the hop before it (``p_6.amount >= 0.8 * p_5.amount``); only
    ``within`` and an implied amount bound the first hop: the plan ranges backward from the
    seed's source, where the filters prune, and the first hop's seed forward from its end."""
    (query,) = parse_queries(
        """round_trip(a) := transfer{6,6}(a, a) as p, p.amount >= 1000, next(p).ts > p.ts,
        next(p).amount >= 0.8 * p.amount, within 7d, distinct."""
    )
    internal = rewrite(query, event_relations((query,))).internal
    firsts = {}
    for plan in delta_queries(internal):
        first = plan.stages[0].extenders[0]
        assert isinstance(first, RangeExtender), plan.describe()
        seed = plan.order[plan.seed.columns[-1]]
        firsts[seed, plan.seed.sign] = plan.order[first.key[0]]
    assert firsts["p_6", 0] == "p_v5"  # (its source: the hop before it ends there)
    assert firsts["p_1", 0] == "p_v1"  # (its destination: the hop after it starts there)
