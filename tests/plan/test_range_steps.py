"""Range steps: an edge variable bound from its vertex's events in a gap's time range.

With a gap between two edge variables (``pass_through``: ten minutes), the plans bind the
second transfer from the shared account's events in time order, then the far account as the
event's end; a ring's closing vertex is still bound by intersection.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from monitor.plan.cut import projections
from monitor.plan.events import event_relations, rewrite
from monitor.plan.needs import time_ordered, unread
from monitor.plan.plan import EndpointExtender, FieldFilter, RangeExtender
from monitor.plan.planner import delta_queries, static_plan
from monitor.plan.range_steps import RangeStep, held_by_range
from monitor.query.ast import Query
from monitor.query.parser import parse_queries

GOLDEN = Path(__file__).parent / "golden"
MINUTE = 60_000.0
QUERIES = {
    q.name: q
    for q in parse_queries(
        """
        pass_through(a, b, c) :=
            transfer(a, b) as t1, transfer(b, c) as t2,
            t1.ts <= t2.ts, t2.ts <= t1.ts + 10m,
            t2.amount >= 0.9 * t1.amount,
            distinct.
        fast_ring(a, b, c) :=
            transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, a) as t3,
            t1.ts < t2.ts, t2.ts < t3.ts, within 10m, distinct.
        cash_out(a, b, c) :=
            deposit(a, b) as d, withdrawal(b, c) as w, d.ts <= w.ts, w.ts <= d.ts + 1h.
        ring_4(a, b, c, d) :=
            transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, d) as t3,
            transfer(d, a) as t4, t1.ts < t2.ts, t2.ts < t3.ts, t3.ts < t4.ts,
            within 7d, distinct.
        strict_echo(a, b, c) :=
            transfer(a, b) as t1, transfer(b, c) as t2,
            t1.ts < t2.ts, t2.ts <= t1.ts + 10m, t2.ts >= t1.ts - 1h, within 5m.
        """
    )
}


def internal(name: str, time_orders: bool = True) -> Query:
    query = QUERIES[name]
    return rewrite(query, event_relations((query,)), time_orders).internal


def ranges(query: Query) -> list[tuple[RangeExtender, EndpointExtender]]:
    """Per delta query, its range stage's extender and the next stage's endpoint."""
    out = []
    for plan in delta_queries(query):
        for stage, after in zip(plan.stages, plan.stages[1:], strict=False):
            if isinstance(stage.extenders[0], RangeExtender):
                assert len(stage.extenders) == 1, stage
                assert isinstance(after.extenders[0], EndpointExtender), after
                out.append((stage.extenders[0], after.extenders[0]))
    return out


def test_a_gap_well_inside_the_retention_binds_the_next_transfer_by_time() -> None:
    query = internal("pass_through")
    (forward, src_end), (backward, dst_end) = ranges(query)
    by_t1, by_t2 = delta_queries(query)
    # seeded by t1 = (a, b): t2 from b's transfers out in t1.ts + [0, 10m], then c = t2's dst
    assert forward.relation == "transfer#by_src" and by_t1.order == ("a", "b", "t1", "t2", "c")
    assert by_t1.order[forward.key[0]] == "b" and by_t1.order[forward.anchor] == "t1"
    assert (forward.low, forward.high) == (0, 10 * MINUTE)
    assert src_end.position == 1 and by_t1.order[src_end.key[0]] == "t2"
    # seeded by t2 = (b, c): t1 from b's transfers in, in t2.ts - [10m, 0], then a = t1's src
    assert backward.relation == "transfer#by_dst" and by_t2.order[backward.key[0]] == "b"
    assert (backward.low, backward.high) == (-10 * MINUTE, 0)
    assert dst_end.position == 0 and by_t2.order[dst_end.key[0]] == "t1"
    # the cut of the edge variable's events atom; the gap predicates the range computes as
    # the filter would are held by it, the others (the amounts, the gap with the anchor
    # shifted: another sum) join at the range stage
    projected = projections(query)
    assert forward.cut is by_t1.stages[0].extenders[0].cut
    assert projected[forward.atom] == 3 and projected[backward.atom] == 1
    described = [[f.describe(p.order) for f in p.stages[0].fields] for p in (by_t1, by_t2)]
    held = [
        [f.describe(p.order) for f in r.holds] for p, r in ((by_t1, forward), (by_t2, backward))
    ]
    assert described == [
        ["t2.amount >= 0.9 * t1.amount"],
        ["t2.ts <= t1.ts + 10m", "t2.amount >= 0.9 * t1.amount"],
    ]
    assert held == [["t1.ts <= t2.ts", "t2.ts <= t1.ts + 10m"], ["t1.ts <= t2.ts"]]
    assert time_ordered([*delta_queries(query), static_plan(query)]) == {
        "transfer#by_src",
        "transfer#by_dst",
    }


def test_without_time_orders_the_plans_bind_over_pairs() -> None:
    query = internal("pass_through", time_orders=False)
    assert not any("#by_" in atom.relation for atom in query.atoms)
    assert ranges(query) == []
    assert not any("#by_" in atom.relation for atom in internal("cash_out", False).atoms)


def test_a_rings_closing_vertex_is_still_intersected() -> None:
    query = internal("fast_ring")
    assert ranges(query) == []
    for plan in delta_queries(query):
        assert len(plan.stages[0].extenders) == 2, plan.describe()


def test_a_ring_seeded_mid_chain_ranges_forward_for_insertions_backward_for_deletions() -> None:
    """Inserted events are the stream's newest: the hops after them are the epoch's own and
    late ones, so a ring seeded at a middle hop by insertions reads those first (and mostly
    stops there), not the week of hops before it. Expiring events are the oldest: the hops
    before them expired already, so deletions range backward first. A seed with one direction
    only (the first hop forward, the last backward) keeps one plan for every change."""
    query = internal("ring_4")
    firsts = {}
    for plan in delta_queries(query):
        seed = next(v for v in plan.order[:3] if v.startswith("t"))
        first = plan.stages[0].extenders[0]
        assert isinstance(first, RangeExtender), plan.describe()
        assert plan.seed.delta and (seed, plan.seed.sign) not in firsts
        firsts[seed, plan.seed.sign] = (plan.order[first.anchor], plan.order[first.key[0]])
        assert (first.low >= 0) == (plan.seed.sign >= 0 and seed != "t4"), plan.describe()
    assert firsts == {
        ("t1", 0): ("t1", "b"),  # t2 from b's transfers out after t1
        ("t2", 1): ("t2", "c"),  # inserted: t3 after t2 first, not t1 before it
        ("t2", -1): ("t2", "b"),  # deleted: t1 before t2 first
        ("t3", 1): ("t3", "d"),
        ("t3", -1): ("t3", "c"),
        ("t4", 0): ("t4", "a"),  # the last hop: every other one is before it
    }
    described = "\n".join(p.describe() for p in delta_queries(query))
    assert "seed:  insertions of" in described and "seed:  deletions of" in described


def test_two_relations_anchor_each_other() -> None:
    (forward, _), (backward, _) = ranges(internal("cash_out"))
    assert forward.relation == "withdrawal#by_src" and forward.anchor_relation == "deposit"
    assert (forward.low, forward.high) == (0, 60 * MINUTE)
    assert backward.relation == "deposit#by_dst" and backward.anchor_relation == "withdrawal"


def test_explain_of_a_range_step_matches_golden_file() -> None:
    query = internal("pass_through")
    plans = [p.describe() for p in delta_queries(query)] + [static_plan(query).describe()]
    text = f"# {QUERIES['pass_through']}\n" + "\n".join(plans) + "\n"
    path = GOLDEN / "pass_through.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.read_text() == text


def test_relations_no_delta_query_reads_are_not_maintained() -> None:
    """``pass_through`` reads its time orders only: its pairs and events are unread. A set
    atom over the same relation reads the pairs (and needs the events to count them); plans
    over pairs read both."""
    selection = [("transfer", "transfer#events")]
    timed = delta_queries(internal("pass_through"))
    assert unread(selection, timed) == {"transfer", "transfer#events"}
    over_pairs = delta_queries(internal("pass_through", time_orders=False))
    assert unread(selection, over_pairs) == set()
    (mixed,) = parse_queries(
        "mixed(a, b, c) := transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, a), "
        "t1.ts <= t2.ts, t2.ts <= t1.ts + 10m."
    )
    plans = delta_queries(rewrite(mixed, {"transfer"}).internal)
    assert unread(selection, plans) == set()


def test_a_range_holds_the_bounds_it_computes_and_strict_ones_at_its_open_ends() -> None:
    """``t1.ts < t2.ts`` is strict and is the range's low end, 0: the range leaves the end
    out (the next float up from ``t1.ts``) and holds it. The 10-minute gap is looser than
    ``within 5m``, the range's end: every event proposed passes it, as its own bound ``t2.ts
    <= t1.ts + 5m`` and the hour before (looser than the range's start, 0). ``within``'s
    other half, ``t1.ts <= t2.ts + 5m``, has the anchor on the left, shifted (another sum,
    rounded otherwise): a filter. Seeded by t2, t1's range is t2.ts - [5m, 0), open at its
    high end for ``t1.ts < t2.ts``, and holds that half too. The filters the others imply are
    left out (:mod:`monitor.plan.implied`): ``t1.ts <= t2.ts + 5m`` once ``t1.ts < t2.ts``;
    seeded by t2, the 10-minute gap (the 5-minute one is tighter) and the hour before."""
    query = internal("strict_echo")
    (forward, _), (backward, _) = ranges(query)
    by_t1, by_t2 = delta_queries(query)
    assert (forward.low, forward.high) == (0, 5 * MINUTE)
    assert (forward.open_low, forward.open_high) == (True, False)
    assert [f.describe(by_t1.order) for f in forward.holds] == [
        "t1.ts < t2.ts",
        "t2.ts <= t1.ts + 10m",
        "t2.ts >= t1.ts - 1h",
        "t2.ts <= t1.ts + 5m",
    ]
    assert "t1.ts (0 .. +5m]" in by_t1.describe()
    assert by_t1.stages[0].fields == ()
    assert (backward.open_low, backward.open_high) == (False, True)
    assert [f.describe(by_t2.order) for f in backward.holds] == [
        "t1.ts < t2.ts",
        "t1.ts <= t2.ts + 5m",
    ]
    fields = [f.describe(by_t2.order) for f in by_t2.stages[0].fields]
    assert fields == ["t2.ts <= t1.ts + 5m"]


@pytest.mark.parametrize(
    ("op", "offset", "edge_left", "low", "high", "held"),
    [
        (">", 0.0, True, 0.0, 60.0, "low"),  # t2 > t1: the low end, 0
        (">", 5.0, True, 5.0, 60.0, "low"),  # t2 > t1 + 5: the low end, 5
        (">", 5.0, True, 0.0, 60.0, None),  # inside the range: a filter
        ("<", 60.0, True, 0.0, 60.0, "high"),  # t2 < t1 + 60: the high end
        ("<", 0.0, False, 0.0, 60.0, "low"),  # t1 < t2 (the anchor on the left)
        ("<", 5.0, False, 5.0, 60.0, None),  # t1 < t2 + 5: shifted, another sum
        (">", 0.0, False, -60.0, 0.0, "high"),  # t1 > t2, backward
        (">=", 0.0, True, 0.0, 60.0, "held"),
        (">=", 0.0, True, -1.0, 60.0, None),
        ("<=", 90.0, True, 0.0, 60.0, "held"),
    ],
)
def test_a_strict_bound_is_held_at_the_range_s_end_it_equals_only(
    op: str, offset: float, edge_left: bool, low: float, high: float, held: str | None
) -> None:
    """:func:`held_by_range` of ``t2 op t1 + offset`` (edge t2 in column 1, anchor t1 in 0;
    ``t1 op t2 + offset`` where the anchor is on the left) over a range ``t1.ts + [low,
    high]``: a strict bound is held by leaving out the range's end that equals it, the end
    named; inside the range, or shifted on the anchor's side, it stays a filter."""
    step = RangeStep(0, 1, frozenset(), "b", "t2", "c", "by_src", "t1", "transfer", low, high)
    left, right = (1, 0) if edge_left else (0, 1)
    join = FieldFilter(left, "transfer", "ts", op, right, "transfer", "ts", 1.0, offset)
    assert held_by_range(join, step, 1, 0) == held


def test_a_ring_seeded_by_its_last_hop_ranges_over_the_hop_before_it() -> None:
    """The seed's amount bounds the hop before it (``p_6.amount >= 0.8 * p_5.amount``); only
    ``within`` bounds the first hop: the plan ranges back from the seed's source, where the
    filters prune, and the first hop's seed forward from its end. (With no such filter, as in
    ``ring_4``, the first of the steps in atom order: the test above.)"""
    (query,) = parse_queries(
        """round_trip(a) := transfer{6,6}(a, a) as p, p.amount >= 1000, next(p).ts > p.ts,
        next(p).amount >= 0.8 * p.amount, within 7d, distinct."""
    )
    firsts = {}
    for plan in delta_queries(rewrite(query, event_relations((query,))).internal):
        first = plan.stages[0].extenders[0]
        assert isinstance(first, RangeExtender), plan.describe()
        firsts[plan.order[plan.seed.columns[-1]], plan.seed.sign] = plan.order[first.key[0]]
    assert firsts["p_6", 0] == "p_v5"  # (the seed's source: the hop before it ends there)
    assert firsts["p_1", 0] == "p_v1"  # (the seed's destination: the next hop starts there)
