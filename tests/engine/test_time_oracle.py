"""Event-time predicates against the brute-force oracle: order, gaps (``t2.ts <= t1.ts + 10m``),
a number times a field (``t2.amount >= 0.9 * t1.amount``) and ``within``.

Tiny random multigraphs of timestamped events (some without ``ts``), inserts and deletes by id,
random epoch boundaries; after every epoch the accumulated deltas equal the brute force over the
events present, each binding at most once per epoch, every running sum in {0, 1}. Events live
until deleted here (retention ``none``): windows, expiry and lateness are
``tests/engine/test_window_oracle.py``'s.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.fields import to_column
from core.records import EventUpdates, UpdateBatch
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_events_oracle import Model, brute_force, check_epochs

MINUTE = 60_000
#: Events live until deleted: these tests check the predicates, not the window.
FOREVER = Settings(retention={"transfer": math.inf})
QUERIES = parse_queries(
    """
    layering(a, b, c) := transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, a) as t3,
        t1.amount >= 1, t1.ts < t2.ts, t2.ts < t3.ts, within 20m, distinct.
    pass_through(a, b, c) := transfer(a, b) as t1, transfer(b, c) as t2,
        t1.ts <= t2.ts, t2.ts <= t1.ts + 10m, t2.amount >= 0.5 * t1.amount.
    close(a, b) := transfer(a, b) as x, transfer(b, a) as y, y.ts >= x.ts - 5m, within 15m.
    alone(a, b) := transfer(a, b) as t, within 1m.
    hop(a, b, c) := transfer(a, b) as t1, transfer(b, c) as t2,
        t1.ts < t2.ts, t2.ts <= t1.ts + 8m, within 5m.
    """
)

# insert (id, src, dst, amount or None, ts in minutes or None), or delete an id
OPS = st.one_of(
    st.tuples(
        st.just("insert"),
        st.integers(0, 6),
        st.integers(0, 2),
        st.integers(0, 2),
        st.one_of(st.none(), st.integers(0, 4)),
        st.one_of(st.none(), st.integers(0, 30)),
    ),
    st.tuples(st.just("delete"), st.integers(0, 6)),
)


class TimedModel(Model):
    """The oracle's events with a time (``ts`` in milliseconds) where the op gives one."""

    def apply(self, op: tuple[Any, ...]) -> None:
        if op[0] == "insert":
            key = f"tx-{op[1]}"
            if key not in self.events:
                row: dict[str, object] = {}
                if op[4] is not None:
                    row["amount"] = op[4]
                if op[5] is not None:
                    row["ts"] = op[5] * MINUTE
                self.events[key] = (op[2], op[3], row)
        else:
            self.events.pop(f"tx-{op[1]}", None)


def batch(ops: list[tuple[Any, ...]], first_seq: int) -> UpdateBatch:
    n = len(ops)
    inserts = [op[0] == "insert" for op in ops]
    events = EventUpdates(
        np.array([f"tx-{op[1]}" for op in ops], dtype=object),
        np.array([1 if i else -1 for i in inserts], np.int8),
        np.arange(first_seq, first_seq + n, dtype=np.int64),
        np.array([op[2] if i else 0 for op, i in zip(ops, inserts, strict=True)], np.int64),
        np.array([op[3] if i else 0 for op, i in zip(ops, inserts, strict=True)], np.int64),
        {
            "amount": to_column(
                "number", [op[4] if i else None for op, i in zip(ops, inserts, strict=True)]
            ),
            "ts": to_column(
                "number",
                [
                    op[5] * MINUTE if i and op[5] is not None else None
                    for op, i in zip(ops, inserts, strict=True)
                ],
            ),
        },
    )
    return UpdateBatch({}, first_seq, n, None, {"transfer": events})


@example(  # a ring in order within 20 minutes, then one transfer late enough to break within
    ops=[
        ("insert", 0, 0, 1, 2, 0),
        ("insert", 1, 1, 2, 1, 5),
        ("insert", 2, 2, 0, 1, 19),
        ("delete", 2),
        ("insert", 2, 2, 0, 1, 21),
    ],
    cuts=[3],
)
@example(  # a pass-through at exactly 10 minutes, and one just past it
    ops=[
        ("insert", 0, 0, 1, 4, 0),
        ("insert", 1, 1, 2, 2, 10),
        ("insert", 2, 1, 2, 2, 11),
        ("insert", 3, 1, 2, 1, 5),
    ],
    cuts=[],
)
@settings(max_examples=250, deadline=None)
@given(ops=st.lists(OPS, min_size=3, max_size=40), cuts=st.lists(st.integers(1, 40), max_size=5))
def test_time_predicates_match_the_brute_force_after_every_epoch(
    ops: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    check_epochs(QUERIES, TimedModel(), batch, ops, cuts, FOREVER)


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(OPS, min_size=3, max_size=40), cuts=st.lists(st.integers(1, 40), max_size=5))
def test_compacting_the_store_renumbers_the_time_orders_and_changes_no_row(
    ops: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    """A store compacted at every commit it can renumbers its events: the time orders are
    renumbered in place (not rebuilt), and the output is the oracle's and the same rows as
    a run that never compacts."""
    compacting = Settings(retention={"transfer": math.inf}, event_compaction_min=0)
    rows = check_epochs(QUERIES, TimedModel(), batch, ops, cuts, compacting)
    assert rows == check_epochs(QUERIES, TimedModel(), batch, ops, cuts, FOREVER)


def test_a_long_stream_compacts_many_times_and_keeps_every_row() -> None:
    """Hundreds of events, most deleted again soon: the store compacts at many commits, each
    renumbering the time orders' events; every epoch's rows are the oracle's and those of a
    run that never compacts."""
    rng = np.random.default_rng(7)
    ops: list[tuple[Any, ...]] = []
    for i in range(300):  # each transfer deleted 16 transfers later: about 16 live
        src, dst = (int(x) for x in rng.integers(0, 3, 2))
        ops.append(
            ("insert", i, src, dst, int(rng.integers(0, 4)), i // 4 + int(rng.integers(0, 8)))
        )
        if i >= 16:
            ops.append(("delete", i - 16))
    cuts = list(range(0, len(ops), 29))
    compacting = Settings(retention={"transfer": math.inf}, event_compaction_min=8)
    rows = check_epochs(QUERIES, TimedModel(), batch, ops, cuts, compacting)
    assert rows == check_epochs(QUERIES, TimedModel(), batch, ops, cuts, FOREVER)
    assert sum(1 for epoch in rows for row in epoch if row[0] == "pass_through") > 50
    processor = EpochProcessor(QUERIES, compacting)
    for lo in cuts:
        processor.process(batch(ops[lo : lo + 29], lo))
        processor.commit()
    assert processor.index.event_stores["transfer"].compactions >= 10


@settings(max_examples=100, deadline=None)
@given(
    ops=st.lists(OPS, min_size=3, max_size=40),
    cuts=st.lists(st.integers(1, 40), max_size=5),
    which=st.sampled_from([q.name for q in QUERIES]),
)
def test_each_query_alone_with_its_static_counts(
    ops: list[tuple[Any, ...]], cuts: list[int], which: str
) -> None:
    """One query alone: its range steps then read the only maintained relations of its
    selections (``pass_through``'s pairs and events are unread), and the static counts,
    which load the unread ones for their duration, agree after every epoch."""
    query = [q for q in QUERIES if q.name == which]
    check_epochs(query, TimedModel(), batch, ops, cuts, FOREVER, static=True)


NARROW = parse_queries(
    """
    echo(a, b, c) := transfer(a, b) as t1, transfer(b, c) as t2,
        t1.ts <= t2.ts, t2.ts <= t1.ts + 1m.
    """
)


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(OPS, min_size=3, max_size=40), cuts=st.lists(st.integers(1, 40), max_size=5))
def test_a_narrow_gap_beside_a_wide_one_reads_one_time_order(
    ops: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    """``echo``'s one-minute gap and ``pass_through``'s ten minutes read the same time orders
    of the transfers, each over its own range."""
    queries = [*NARROW, *(q for q in QUERIES if q.name == "pass_through")]
    check_epochs(queries, TimedModel(), batch, ops, cuts, FOREVER, static=True)


def test_the_time_oracle_sees_matches() -> None:
    """The examples' kind of workload matches every query (the check is not vacuous)."""
    model = TimedModel()
    for op in [
        ("insert", 0, 0, 1, 2, 0),
        ("insert", 1, 1, 2, 1, 5),
        ("insert", 2, 2, 0, 1, 12),
        ("insert", 3, 1, 0, 1, 3),
    ]:
        model.apply(op)
    counts = {q.name: len(brute_force(model, q)) for q in QUERIES}
    assert counts == {"layering": 1, "pass_through": 3, "close": 2, "alone": 4, "hop": 2}, counts
