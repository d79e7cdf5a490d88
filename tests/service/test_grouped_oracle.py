"""Aggregate queries against a brute force, after every epoch.

Tiny random streams of timestamped transfers (out of order, deletes by id, late events),
random epoch boundaries, lateness and outliers. The oracle replays each epoch with the window
model of the event-time oracle (``tests/engine/test_window_oracle.py``), enumerates every
binding of each aggregate query's body over the events present by brute force, keeps those
whose events all lie within ``over`` of the epoch's watermark, groups them by the head and
recounts every condition from scratch. After every epoch the groups the accumulated output
holds are the oracle's that satisfy all conditions, each row's ``values`` are the oracle's, and
every ``-1`` says ``expired`` exactly when expiry alone (the window moving on, events expiring,
no update of the epoch) stops the group holding.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.columns import Members, python_values
from core.errors import ConfigError
from monitor.query import parse_queries
from monitor.query.ast import FieldRef, Query
from monitor.service.epochs import EpochProcessor
from monitor.service.grouped import GroupedQuery
from monitor.service.query_output import QueryOutput
from monitor.service.serve import serve
from monitor.service.settings import Settings
from tests.engine.test_events_oracle import brute_force
from tests.engine.test_time_oracle import MINUTE, batch
from tests.engine.test_window_oracle import WindowModel

WINDOWED = parse_queries(
    """
    fan_in(b) := transfer(a, b) as t, t.amount < 4, count(distinct a) >= 2 over 20m.
    scatter(a, c) := transfer(a, b) as t1, transfer(b, c) as t2, t1.ts <= t2.ts, within 30m,
        distinct, count(distinct b) >= 2 over 40m.
    outflow(a) := transfer(a, b) as t, sum(t.amount) > 4.5 over 30m.
    spread(a) := transfer(a, b) as t, min(t.amount) <= 1, max(t.amount) >= 3, count(*) >= 2
        over 25m.
    busy(b) := transfer(a, b) as t, count(distinct t) >= 3, count(*) <= 4 over 15m.
    """
)
UNBOUNDED = parse_queries(
    """
    many(b) := transfer(a, b) as t, count(*) >= 3.
    pair_sum(a, b) := transfer(a, b) as t, sum(t.amount) >= 3.
    relay(a) := transfer(a, b) as t, transfer(b, c), distinct, count(distinct c) >= 2.
    """
)

# insert (id, src, dst, amount, ts in minutes), or delete an id
OPS = st.one_of(
    st.tuples(
        st.just("insert"),
        st.integers(0, 9),
        st.integers(0, 3),
        st.integers(0, 3),
        st.sampled_from([0, 0.5, 1, 2, 3, 4.25]),
        st.integers(0, 90),
    ),
    st.tuples(st.just("delete"), st.integers(0, 9)),
)

#: The contributing events listed per group row (``--output-limit``): few, so that the oracle
#: sees lists cut short.
LIMIT = 3
Group = tuple[str, tuple[int, ...]]
Binding = tuple[tuple[int, ...], tuple[str, ...]]


def counted(model: WindowModel, query: Query, watermark: float) -> set[Binding]:
    """The body's bindings the aggregates count: all its events within ``over``."""
    found = brute_force(model, query.body())
    return {b for b in found if inside(query, b, model.events, watermark)}


def inside(query: Query, binding: Binding, events: dict[str, Any], watermark: float) -> bool:
    """Whether the binding's earliest event lies within the query's window at ``watermark``
    (the one the epoch began with: where an event with a retention of ``over`` stays)."""
    if query.over is None:
        return True
    earliest = min(float(events[e][2]["ts"]) for e in binding[1])
    return earliest + query.over >= watermark


def group_values(
    model: WindowModel, query: Query, bindings: set[Binding], events: dict[str, Any]
) -> dict[tuple[int, ...], dict[str, float]]:
    """Per group with a binding, every condition's value, recounted (sums exactly)."""
    width = len(query.head)
    variables = query.body().head
    groups: dict[tuple[int, ...], list[Binding]] = {}
    for binding in bindings:  # (a group without bindings: its counts and sums 0)
        groups.setdefault(binding[0][:width], []).append(binding)
    out: dict[tuple[int, ...], dict[str, float]] = {}
    for group, found in groups.items():
        if not found:
            continue
        values: dict[str, float] = {}
        for condition in query.aggregates:
            argument = condition.argument
            if condition.kind == "count":
                values[condition.name] = len(found)
            elif condition.kind == "count_distinct":
                assert isinstance(argument, str)
                if argument in variables:
                    at = variables.index(argument)
                    values[condition.name] = len({b[0][at] for b in found})
                else:
                    at = query.edges.index(argument)
                    values[condition.name] = len({b[1][at] for b in found})
            else:
                assert isinstance(argument, FieldRef)
                at = query.edges.index(argument.edge)
                amounts = [Decimal(repr(events[b[1][at]][2]["amount"])) for b in found]
                total = {"sum": sum(amounts), "min": min(amounts), "max": max(amounts)}
                values[condition.name] = float(total[condition.kind])
        out[group] = values
    return out


def empty(query: Query) -> dict[str, float]:
    """A group's values without bindings: counts and sums 0, no least or greatest."""
    return {c.name: 0 for c in query.aggregates if c.kind not in ("min", "max")}


def holding(query: Query, values: dict[tuple[int, ...], dict[str, float]]) -> set[tuple[int, ...]]:
    ops = {
        "<": float.__lt__,
        "<=": float.__le__,
        ">": float.__gt__,
        ">=": float.__ge__,
        "=": float.__eq__,
        "!=": float.__ne__,
    }
    return {
        group
        for group, found in values.items()
        if all(ops[c.op](float(found[c.name]), c.threshold) for c in query.aggregates)
    }


def events_of(out: QueryOutput) -> list[object]:
    """Each row's contributing events (``--output-limit``)."""
    return python_values(out.extra["events"])  # type: ignore[arg-type]


def rows(out: QueryOutput) -> list[tuple[tuple[int, ...], int, dict[str, Any], object]]:
    """Each row: the group, its diff, its values (absent ones left out), its cause."""
    values = out.extra["values"]
    assert isinstance(values, Members)
    named = {n: python_values(c) for n, c in values.columns.items()}
    causes = python_values(out.extra["cause"]) if "cause" in out.extra else [None] * len(out)
    found = []
    for i, diff in enumerate(out.diff.tolist()):
        group = tuple(int(c[i]) for c in out.columns)
        row = {n: v[i] for n, v in named.items() if v[i] is not None}
        found.append((group, diff, row, causes[i]))
    return found


class Seen(Counter[str]):
    """The causes of the ``-1`` rows seen, and the queries with rows."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: set[str] = set()


def check(
    queries: Sequence[Query],
    ops: list[tuple[Any, ...]],
    cuts: list[int],
    lateness: int,
    outliers: int,
    retention: int | None = None,
) -> Seen:
    """Run the epochs, checking each against the oracle; the causes seen. ``retention`` (in
    minutes) overrides the default, the longest ``over`` (or forever, with an aggregate
    without one)."""
    overrides = {} if retention is None else {"transfer": retention * MINUTE}
    run = Settings(
        allowed_lateness=lateness * MINUTE,
        watermark_outliers=outliers,
        retention=overrides,
        output_limit=LIMIT,
    )
    processor = EpochProcessor(queries, run)
    overs = [math.inf if q.over is None else q.over for q in queries]
    kept = max(overs) if retention is None else retention * MINUTE
    assert processor.retention["transfer"] == kept
    model = WindowModel(kept, lateness * MINUTE, outliers)
    current: Counter[Group] = Counter()
    before = {q.name: set[Binding]() for q in queries}
    seen = Seen()
    for lo, hi in itertools.pairwise(sorted({0, len(ops), *(c for c in cuts if c < len(ops))})):
        out = processor.process(batch(ops[lo:hi], lo))
        processor.commit()
        old_events = dict(model.events)
        began = model.watermark
        refused, expired = model.epoch(ops[lo:hi], lo)
        assert out.watermark == model.watermark
        assert {int(s) for seqs in out.late.values() for s in seqs.tolist()} == refused
        deleted = {f"tx-{op[1]}" for op in ops[lo:hi] if op[0] == "delete"} - expired
        by_query = {o.query: o for o in out.queries}
        assert set(by_query) <= {q.name for q in queries}
        for query in queries:
            now = counted(model, query, began)
            values = group_values(model, query, now, model.events)
            holds = holding(query, values)
            # expiry alone: the bindings counted before, but those gone by expiry (an event
            # expired and none deleted, or out of the window now)
            alone = {
                b
                for b in before[query.name]
                if not (set(b[1]) & expired and not set(b[1]) & deleted)
                and inside(query, b, old_events, began)
            }
            held_alone = holding(query, group_values(model, query, alone, old_events))
            found = rows(by_query[query.name]) if query.name in by_query else []
            listed = events_of(by_query[query.name]) if query.name in by_query else []
            width = len(query.head)
            for (group, diff, row, cause), events in zip(found, listed, strict=True):
                mine = {e for b in now if b[0][:width] == group for e in b[1]}
                assert events == sorted(mine)[:LIMIT], f"{query.name} {group} events"
                assert diff in (1, -1), f"{query.name} {group}: a diff of {diff}"
                current[(query.name, group)] += diff
                assert current[(query.name, group)] in (0, 1), f"{query.name} {group} twice"
                assert row == values.get(group, empty(query)), f"{query.name} {group} values"
                if diff < 0 and query.over is not None:
                    assert cause == ("deleted" if group in held_alone else "expired")
                    seen[str(cause)] += 1
                seen.queries.add(query.name)
            got = {g for (n, g), c in current.items() if n == query.name and c}
            assert got == holds, f"{query.name} after ops {lo}..{hi}"
            before[query.name] = now
    return seen


@example(  # three payers within 20 minutes, then time moves on and the group expires
    ops=[
        ("insert", 0, 0, 3, 1, 0),
        ("insert", 1, 1, 3, 2, 5),
        ("insert", 2, 2, 3, 0.5, 10),
        ("insert", 3, 0, 1, 4.25, 50),
        ("delete", 1),
    ],
    cuts=[3, 4],
    lateness=0,
    outliers=0,
    retention=None,
)
@example(  # a late payer exactly at the window's edge: not counted
    ops=[
        ("insert", 0, 0, 3, 1, 30),
        ("insert", 1, 1, 3, 1, 10),
        ("insert", 2, 2, 3, 1, 11),
    ],
    cuts=[1],
    lateness=0,
    outliers=0,
    retention=None,
)
@example(  # fan_in stops as two payers leave the window, and starts again in the same epoch
    ops=[
        ("insert", 0, 0, 3, 1, 0),
        ("insert", 1, 1, 3, 1, 5),
        ("insert", 2, 2, 3, 1, 25),
        ("insert", 3, 0, 3, 1, 24),
    ],
    cuts=[2],
    lateness=0,
    outliers=0,
    retention=None,
)
@example(  # a retention shorter than the window: bindings leave as their events expire
    ops=[
        ("insert", 0, 0, 3, 1, 0),
        ("insert", 1, 1, 3, 1, 5),
        ("insert", 2, 2, 2, 1, 16),
        ("insert", 3, 2, 2, 1, 17),
    ],
    cuts=[2, 3],
    lateness=0,
    outliers=0,
    retention=10,
)
@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(OPS, min_size=3, max_size=40),
    cuts=st.lists(st.integers(1, 40), max_size=6),
    lateness=st.integers(0, 10),
    outliers=st.integers(0, 1),
    retention=st.one_of(st.none(), st.integers(5, 60)),
)
def test_windowed_aggregates_match_the_brute_force_after_every_epoch(
    ops: list[tuple[Any, ...]], cuts: list[int], lateness: int, outliers: int, retention: int | None
) -> None:
    check(WINDOWED, ops, cuts, lateness, outliers, retention)


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(OPS, min_size=3, max_size=40), cuts=st.lists(st.integers(1, 40), max_size=6))
def test_aggregates_without_a_window_count_every_live_binding(
    ops: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    check(UNBOUNDED, ops, cuts, 0, 0)


def test_the_aggregate_oracle_sees_groups_start_and_stop_for_both_causes() -> None:
    """A longer random stream of the generated kind: groups of every windowed query start to
    hold, and stop for both causes (the checks above are not vacuous)."""
    rng = random.Random(7)
    ops: list[tuple[Any, ...]] = []
    for i in range(240):
        if i > 10 and rng.random() < 0.2:
            ops.append(("delete", rng.randrange(24)))
        else:
            src, dst = rng.randrange(4), rng.randrange(4)
            amount = rng.choice([0, 0.5, 1, 2, 3, 4.25])
            ops.append(("insert", rng.randrange(24), src, dst, amount, i // 3 + rng.randrange(8)))
    seen = check(WINDOWED, ops, list(range(0, len(ops), 7)), 2, 0)
    assert seen["expired"] >= 5 and seen["deleted"] >= 5, seen
    assert set(seen.queries) == {q.name for q in WINDOWED}, seen.queries


def test_an_aborted_epoch_is_forgotten_by_the_groups_too() -> None:
    """An epoch processed and aborted (its output not committed), then processed again: the
    groups give the rows of a run that never aborted (they are rebuilt from the index)."""
    ops = [("insert", i, i % 3, 3, [1, 2, 0.5][i % 3], i) for i in range(12)]
    ops += [("delete", 1), ("insert", 20, 0, 3, 4.25, 13), ("insert", 21, 1, 3, 1, 40)]
    batches = [batch(ops[lo : lo + 5], lo) for lo in range(0, len(ops), 5)]
    run = Settings(allowed_lateness=0, watermark_outliers=0)
    straight, aborting = EpochProcessor(WINDOWED, run), EpochProcessor(WINDOWED, run)
    for part in batches:
        expected = straight.process(part)
        straight.commit()
        aborting.process(part)
        aborting.abort()
        found = aborting.process(part)
        aborting.commit()
        assert [rows(q) for q in found.queries] == [rows(q) for q in expected.queries]
    assert straight.totals.deltas.total() >= 4, straight.totals.deltas


def test_the_replicated_scale_out_refuses_aggregate_queries() -> None:
    """Its workers each seed a part of the bindings: a group's count would be split among
    them. The service says so before it connects to anything."""
    text = "\n".join(str(q) for q in UNBOUNDED)
    settings = Settings(queries=text, control_topic="sgm-control")
    with pytest.raises(
        ConfigError, match=r"aggregate queries many, pair_sum, relay need all of a group"
    ):
        serve(settings)


@settings(max_examples=100, deadline=None)
@given(
    ops=st.lists(OPS, min_size=3, max_size=40),
    cuts=st.lists(st.integers(1, 40), max_size=8),
    windowed=st.booleans(),
)
def test_groups_forgotten_when_they_hold_no_binding_change_no_row(
    ops: list[tuple[Any, ...]], cuts: list[int], windowed: bool
) -> None:
    """The groups without bindings forgotten at every epoch they outnumber the others (the
    rest renumbered in every structure): the rows are the brute force's still."""
    with patch.object(GroupedQuery, "compact_min", 0):
        check(WINDOWED if windowed else UNBOUNDED, ops, cuts, 0, 0)


def test_the_groups_memory_follows_the_window_not_every_account_seen() -> None:
    """A stream whose payees never come back: once the window has passed them, their groups
    are forgotten, and the groups kept stay about the window's."""
    ops = [("insert", i % 10, 0, 3 + i, 1, i) for i in range(600)]
    processor = EpochProcessor(WINDOWED[:1], Settings(allowed_lateness=0, watermark_outliers=0))
    with patch.object(GroupedQuery, "compact_min", 8):
        kept = []
        for lo in range(0, len(ops), 20):
            processor.process(batch(ops[lo : lo + 20], lo))
            processor.commit()
            kept.append(len(processor.grouped["fan_in"].groups))
    assert max(kept[5:]) <= 2 * 20 + 8 + 20, kept  # (the window's 20 minutes of payees)
