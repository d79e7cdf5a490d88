"""Join filters on times that a stage's others imply, left out (``monitor/plan/implied.py``).

Sound as the filters compute, floats included: on times drawn near today's (where a float's
step is 1/4096 ms) with fractions that round, a bound :func:`implies` calls implied holds
wherever the bounds it was given hold. And a path's stages keep what prunes: each hop against
its neighbour and the path's span, nothing else.
"""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from monitor.plan.events import event_relations, rewrite
from monitor.plan.implied import Bound, implies
from monitor.plan.planner import delta_queries
from monitor.query.parser import parse_queries

NOW = 1_767_225_600_000.0
DAY = 86_400_000.0


def holds(bound: Bound, times: list[float]) -> bool:
    """``bound`` on ``times`` as a join filter computes it (numpy float64, as the engine)."""
    small, big = np.float64(times[bound.small]), np.float64(times[bound.big])
    if bound.on_big:  # small <= big + offset
        right = big + np.float64(bound.offset)
        return bool(small < right if bound.strict else small <= right)
    left = small - np.float64(bound.offset)  # (big >= small - offset)
    return bool(left < big if bound.strict else left <= big)


COLUMNS = 4
offsets = st.sampled_from([0.0, 0.0, 0.0, 1e-4, 0.3, 1.0, 2.5, -0.3, -1.0, 7 * DAY, -DAY, DAY])
bounds = st.builds(
    Bound,
    st.integers(0, COLUMNS - 1),
    st.integers(0, COLUMNS - 1),
    offsets,
    st.booleans(),
    st.booleans(),
).filter(lambda b: b.small != b.big)
times = st.lists(
    st.builds(
        lambda day, ms, fraction: NOW + day * DAY + ms + fraction,
        st.integers(-1, 1),
        st.sampled_from([0.0, 0.3, 1.0, 2.5, 3.0]),
        st.sampled_from([0.0, 0.1, 0.2, 1 / 3, 1e-4, 0.7]),
    ),
    min_size=COLUMNS,
    max_size=COLUMNS,
)


@settings(max_examples=3000, deadline=None)
@given(times, st.lists(bounds, max_size=8), st.lists(bounds, min_size=1, max_size=8))
@example(  # a sum on the other side rounds otherwise: x <= fl(y + 0.3) does not give this
    [NOW + 0.1, NOW + 0.4, NOW, NOW],
    [Bound(1, 0, 0.3, False, True)],
    [Bound(1, 0, 0.3, False, False)],
)
@example(  # x <= y does not give x < fl(y + 1e-4): the sum rounds to y
    [NOW, NOW, NOW, NOW], [Bound(0, 1, 0.0, False, True)], [Bound(0, 1, 1e-4, True, True)]
)
def test_what_is_implied_holds_wherever_what_implies_it_holds(
    at: list[float], candidates: list[Bound], targets: list[Bound]
) -> None:
    known = [b for b in candidates if holds(b, at)]
    for target in targets:
        if implies(known, target):
            assert holds(target, at), (known, target)


def test_chains_imply_through_one_offset_and_no_more() -> None:
    """``a < b < c`` and ``c <= a + 7d`` imply every pair's ``within``; two offsets added
    (``a <= b + 1d``, ``b <= c + 1d``: ``a <= c + 2d``) are two rounded sums, not one."""
    week = 7 * DAY
    ordered = [Bound(0, 1, 0.0, True, True), Bound(1, 2, 0.0, True, True)]
    span = Bound(2, 0, week, False, True)
    assert implies([*ordered, span], Bound(1, 0, week, False, True))  # b <= a + 7d
    assert implies([*ordered, span], Bound(2, 1, week, False, True))  # c <= b + 7d
    assert implies(ordered, Bound(0, 2, 0.0, True, True))  # a < c
    assert implies(ordered, Bound(0, 2, week, False, False))  # c >= a - 7d
    assert not implies(ordered, Bound(2, 0, week, False, True))  # nothing bounds the span
    assert not implies([span], Bound(2, 0, week, False, False))  # same bound, other sum
    assert not implies([span], Bound(2, 0, week, True, True))  # strict from non-strict
    assert implies([span], Bound(2, 0, week + 1.0, True, True))  # ... but with a 1 ms margin
    two = [Bound(0, 1, DAY, False, True), Bound(1, 2, DAY, False, True)]
    assert not implies(two, Bound(0, 2, 2 * DAY, False, True))


def test_a_round_trip_s_stages_test_each_hop_against_its_neighbour_and_the_span() -> None:
    """Seeded by its last hop, each stage of a six-hop round trip tests the hop it binds
    against the hop after it (time and amount) and against the last (the span): of the ten
    filters and five ``!=`` of events at the first hop's stage, three filters are left."""
    (query,) = parse_queries(
        """round_trip(a) := transfer{6,6}(a, a) as p, p.amount >= 1000, next(p).ts > p.ts,
        next(p).amount >= 0.8 * p.amount, within 7d, distinct."""
    )
    internal = rewrite(query, event_relations((query,))).internal
    (last,) = [p for p in delta_queries(internal) if p.order[p.seed.columns[-1]] == "p_6"]
    first_hop = last.stages[-1]
    assert first_hop.variable == "p_1"
    assert [f.describe(last.order) for f in first_hop.fields] == [
        "p_2.ts > p_1.ts",
        "p_2.amount >= 0.8 * p_1.amount",
        "p_6.ts <= p_1.ts + 7d",
    ]
    events = {last.order.index(f"p_{i}") for i in range(1, 7)}
    assert not [c for c in first_hop.comparisons if {c.left, c.right} <= events]
    vertices = [c.describe(last.order) for c in last.stages[6].comparisons]
    assert "p_v1 != p_v2" in vertices  # (distinct accounts stay: no time orders them)
