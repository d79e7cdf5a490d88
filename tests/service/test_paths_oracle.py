"""Paths of variable length against a direct enumeration, after every epoch.

``transfer{m,n}(x, y) as p`` is rewritten into one query per length (:mod:`monitor.query.paths`).
The oracle knows nothing of the rewrite: it walks every sequence of k events that chain head to
tail, keeps the simple ones (every vertex once, except where the query closes the path), and
checks the hop predicates on every hop, ``next(p)`` on every two consecutive hops and
``within`` on the whole path, over the events present after each epoch of random timestamped
streams with deletes (and, with a window, expiry and late events).
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.errors import QueryError
from monitor.query import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_events_oracle import deltas
from tests.engine.test_time_oracle import MINUTE, batch
from tests.engine.test_window_oracle import WindowModel

ROUND_TRIP = """round_trip(a) :=
    transfer{2,4}(a, a) as p,
    p.amount >= 1, next(p).ts > p.ts, next(p).amount >= 0.5 * p.amount,
    within 30m, distinct."""
CHAIN = "chain(a, b) := transfer{1,3}(a, b) as p, next(p).amount <= p.amount, distinct."

# insert (id, src, dst, amount, ts in minutes), or delete an id
OPS = st.one_of(
    st.tuples(
        st.just("insert"),
        st.integers(0, 11),
        st.integers(0, 3),
        st.integers(0, 3),
        st.integers(0, 4),
        st.integers(0, 60),
    ),
    st.tuples(st.just("delete"), st.integers(0, 11)),
)

Binding = tuple[tuple[int, ...], tuple[str, ...]]


def paths(model: WindowModel, name: str) -> dict[str, set[Binding]]:
    """Every path the query ``name`` asks for, by the name of its length's query."""
    events = model.events
    found: dict[str, set[Binding]] = {}
    low, high = (2, 4) if name == "round_trip" else (1, 3)
    for k in range(low, high + 1):
        rows: set[Binding] = set()
        for chain in itertools.permutations(sorted(events), k):
            ends = [(events[e][0], events[e][1]) for e in chain]
            if any(ends[i][1] != ends[i + 1][0] for i in range(k - 1)):
                continue
            walk = [ends[0][0], *(d for _, d in ends)]
            amount = [float(events[e][2]["amount"]) for e in chain]  # type: ignore[arg-type]
            ts = [float(events[e][2]["ts"]) for e in chain]  # type: ignore[arg-type]
            if name == "round_trip":
                if walk[0] != walk[-1] or len(set(walk[:-1])) != k:
                    continue
                if any(a < 1 for a in amount) or max(ts) - min(ts) > 30 * MINUTE:
                    continue
                if any(ts[i + 1] <= ts[i] or amount[i + 1] < 0.5 * amount[i] for i in range(k - 1)):
                    continue
                vertices = (walk[0], *walk[1:-1])
            else:
                if len(set(walk)) != k + 1:
                    continue
                if any(amount[i + 1] > amount[i] for i in range(k - 1)):
                    continue
                vertices = (walk[0], walk[-1], *walk[1:-1])
            rows.add((vertices, chain))
        found[f"{name}{{{k}}}"] = rows
    return found


def check(text: str, names: list[str], ops: list[tuple[Any, ...]], cuts: list[int]) -> int:
    queries = parse_queries(text)
    processor = EpochProcessor(queries, Settings(allowed_lateness=0, watermark_outliers=0))
    model = WindowModel(processor.retention["transfer"], 0, 0)
    current: Counter[tuple[str, Binding]] = Counter()
    seen = 0
    for lo, hi in itertools.pairwise(sorted({0, len(ops), *(c for c in cuts if c < len(ops))})):
        out = processor.process(batch(ops[lo:hi], lo))
        processor.commit()
        model.epoch(ops[lo:hi], lo)
        for query, binding, diff in deltas(out.queries):
            current[(query, binding)] += diff
            assert current[(query, binding)] in (0, 1), (query, binding)
        for name in names:
            for query, rows in paths(model, name).items():
                got = {b for (q, b), c in current.items() if q == query and c}
                assert got == rows, f"{query} after ops {lo}..{hi}"
                seen += len(rows)
    return seen


@example(  # a ring of four hops whose second arrives last, then its third is deleted: seeded
    # at middle hops, by an insertion and by a deletion, whose plans differ (forward first for
    # the one, backward for the other; monitor/plan/planner.py::range_step)
    ops=[
        ("insert", 0, 0, 1, 4, 0),
        ("insert", 2, 2, 3, 2, 9),
        ("insert", 3, 3, 0, 1, 12),
        ("insert", 1, 1, 2, 3, 5),
        ("delete", 2),
    ],
    cuts=[3, 4],
)
@example(  # a round trip of three hops, each after the previous and at least half of it
    ops=[
        ("insert", 0, 0, 1, 4, 0),
        ("insert", 1, 1, 2, 2, 5),
        ("insert", 2, 2, 0, 1, 9),
        ("insert", 3, 2, 1, 1, 10),
        ("delete", 1),
    ],
    cuts=[3],
)
@settings(max_examples=150, deadline=None)
@given(ops=st.lists(OPS, min_size=3, max_size=30), cuts=st.lists(st.integers(1, 30), max_size=5))
def test_paths_of_each_length_are_the_simple_paths_with_their_hop_predicates(
    ops: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    check(f"{ROUND_TRIP}\n{CHAIN}", ["round_trip", "chain"], ops, cuts)


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(OPS, min_size=3, max_size=30), cuts=st.lists(st.integers(1, 30), max_size=5))
def test_round_trips_within_their_window_as_events_expire(
    ops: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    """Alone, the round trip's events live its span (30m): they expire, late ones are refused."""
    check(ROUND_TRIP, ["round_trip"], ops, cuts)


def test_the_path_oracle_sees_paths_of_every_length() -> None:
    ops: list[tuple[Any, ...]] = []
    for i in range(40):
        ops.append(("insert", i % 12, i % 4, (i * 3 + 1) % 4, 4 - i % 4, i))
    seen = check(f"{ROUND_TRIP}\n{CHAIN}", ["round_trip", "chain"], ops, [10, 20, 30])
    assert seen >= 20, seen


def test_each_length_is_a_query_that_prints_and_parses_back() -> None:
    queries = parse_queries(ROUND_TRIP)
    assert [q.name for q in queries] == ["round_trip{2}", "round_trip{3}", "round_trip{4}"]
    three = queries[1]
    assert three.head == ("a", "p_v1", "p_v2") and three.edges == ("p_1", "p_2", "p_3")
    assert [str(p) for p in three.predicates][:5] == [
        "p_1.amount >= 1",
        "p_2.amount >= 1",
        "p_3.amount >= 1",
        "p_2.ts > p_1.ts",
        "p_3.ts > p_2.ts",
    ]
    assert parse_queries(str(three)) == (three,)


@pytest.mark.parametrize(
    ("text", "message", "where"),
    [
        ("q(a, b) := transfer{0,3}(a, b) as p.", "has at least 1 hop", (1, 20)),
        ("q(a, b) := transfer{2,9}(a, b) as p.", "has at most 8 hops, not 9", (1, 20)),
        ("q(a, b) := transfer{3,2}(a, b) as p.", "asks for 3 to 2 hops", (1, 20)),
        ("q(a, b) := transfer{1.5}(a, b) as p.", "a whole number", (1, 21)),
        ("q(a) := link{2,3}(a, b, c) as p.", "a path runs from a vertex to a vertex", (1, 9)),
        ("q(a, b) := transfer(a, b) as t, next(t).ts > t.ts.", "has no path", (1, 33)),
        (
            "q(a, b) := transfer{1,2}(a, b) as p, transfer(b, a) as t, next(t).ts > p.ts.",
            "which is no path",
            (1, 59),
        ),
        ("q(a, p_v1) := transfer{1,3}(a, p_v1) as p.", "names a variable 'p_v1'", (1, 15)),
        (
            "q(a) := transfer{2,3}(a, a) as p, count(*) >= 2.",
            "aggregates over path",
            (1, 9),
        ),
    ],
)
def test_bad_paths_are_query_errors_at_their_place(
    text: str, message: str, where: tuple[int, int]
) -> None:
    with pytest.raises(QueryError) as raised:
        parse_queries(text)
    assert message in raised.value.message, raised.value.message
    assert (raised.value.line, raised.value.column) == where, raised.value
