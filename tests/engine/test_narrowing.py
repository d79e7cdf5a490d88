"""Range steps narrowed by other bound events' times (:class:`monitor.plan.plan.Narrowing`).

A chain of four hops in time order within 20 minutes, seeded by its last hop, ranges back hop
by hop: each hop's range is anchored on the hop after it and narrowed by the last hop's time
minus 20 minutes. The plan says so; the probe's ranges are the narrower ones; and the results
equal the brute force's, with events that live until deleted (the window's horizon narrows
nothing) and times that make the narrowing cut.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from monitor.engine.prefixes import Prefixes
from monitor.engine.time_order import MARGIN, RangeSource
from monitor.plan.events import event_relations, rewrite
from monitor.plan.plan import Narrowing, RangeExtender
from monitor.plan.planner import delta_queries
from monitor.query.parser import parse_queries
from tests.engine.test_events_oracle import check_epochs
from tests.engine.test_time_oracle import FOREVER, MINUTE, OPS, TimedModel, batch

QUERIES = parse_queries(
    """
    chain(a, b, c, d, e) := transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, d) as t3,
        transfer(d, e) as t4, t1.ts < t2.ts, t2.ts < t3.ts, t3.ts < t4.ts, within 20m.
    ring(a, b, c, d) := transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, d) as t3,
        transfer(d, a) as t4, t1.ts < t2.ts, t2.ts < t3.ts, t3.ts < t4.ts, within 20m, distinct.
    """
)


def _range_extenders(seed_edge: str) -> list[tuple[RangeExtender, tuple[str, ...]]]:
    chain = QUERIES[0]
    internal = rewrite(chain, event_relations((chain,)), True).internal
    plans = [
        p
        for p in delta_queries(internal)
        if internal.atoms[p.seed.atom].relation.endswith("#events")
        and internal.atoms[p.seed.atom].variables[-1] == seed_edge
        and p.seed.sign >= 0
    ]
    assert plans, f"no plan seeded by {seed_edge}"
    return [
        (e, plans[0].order)
        for stage in plans[0].stages
        for e in stage.extenders
        if isinstance(e, RangeExtender)
    ]


def test_hops_back_from_the_last_are_narrowed_by_its_time() -> None:
    found = _range_extenders("t4")
    narrowed = {order[e.key[0]]: e.narrowing for e, order in found}
    assert len(found) == 3  # t3, t2 and t1, each back from the one after it
    first, *later = [e for e, _ in found]
    assert first.narrowing == ()  # anchored on t4 itself: nothing is tighter
    for e in later:
        (n,) = e.narrowing
        order = found[0][1]
        assert order[n.anchor] == "t4"
        assert (n.low, n.high) == (-20 * MINUTE, math.inf)
    assert narrowed


class _Index:
    """The anchors' times, as an index gives them."""

    def __init__(self, times: dict[str, np.ndarray[Any, Any]]) -> None:
        self.times = times

    def field_values(self, relation: str, name: str, eids: np.ndarray[Any, Any]) -> Any:
        return self.times[relation][eids]


class _View:
    def probe(self, vertices: Any, lo: Any, hi: Any) -> tuple[Any, Any]:
        return lo, hi


def test_the_probe_asks_for_the_narrower_range() -> None:
    ts = np.array([100.0, 1000.0, 5000.0, np.nan])
    extender = RangeExtender(
        0,
        "transfer#by_dst",
        3,
        2,
        (0,),
        RangeExtender.__dataclass_fields__["cut"].default,  # type: ignore[arg-type]
        anchor=1,
        anchor_relation="transfer",
        low=-2000.0,
        high=0.0,
        narrowing=(Narrowing(2, "transfer", -4500.0, math.inf),),
    )
    index = _Index({"transfer": ts})
    source = RangeSource(extender, _View(), index)  # type: ignore[arg-type]
    eids = np.array([1, 2, 1], np.int32)
    anchors = np.array([1, 2, 3], np.int32)  # the anchor events' eids: times 1000, 5000, NaN
    later = np.array([2, 2, 2], np.int32)  # the narrowing's: 5000
    prefixes = Prefixes((eids, anchors, later), np.ones(3, np.int64))
    lo, hi = source.probe(prefixes)  # type: ignore[misc]
    widened = 500.0 - (500.0 * MARGIN + MARGIN)
    assert lo[0] == widened  # 5000 - 4500 (widened) above 1000 - 2000
    assert lo[1] == 3000.0  # 5000 - 2000 above 500
    assert math.isnan(lo[2])  # an anchor without a time: nothing is in range
    assert hi.tolist()[:2] == [1000.0, 5000.0]


# times to an hour, so that the 20 minutes cut
TIMED_OPS = OPS.map(
    lambda op: (*op[:5], None if op[5] is None else op[5] * 2) if op[0] == "insert" else op
)


@example(  # a chain and a ring spanning exactly 20 minutes, seeded by their last hops
    ops=[
        ("insert", 0, 0, 1, 1, 0),
        ("insert", 1, 1, 2, 1, 6),
        ("insert", 2, 2, 0, 1, 12),
        ("insert", 5, 3, 4, 1, 0),
        ("insert", 6, 4, 5, 1, 6),
        ("insert", 3, 0, 1, 1, 20),
        ("insert", 4, 0, 1, 1, 21),
        ("insert", 7, 5, 3, 1, 20),
    ],
    cuts=[5],
)
@settings(max_examples=250, deadline=None)
@given(
    ops=st.lists(TIMED_OPS, min_size=4, max_size=40), cuts=st.lists(st.integers(1, 40), max_size=5)
)
def test_narrowed_chains_and_rings_match_the_brute_force(
    ops: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    check_epochs(QUERIES, TimedModel(), batch, ops, cuts, FOREVER)
