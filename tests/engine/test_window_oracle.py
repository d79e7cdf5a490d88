"""Sliding windows against a brute-force oracle: watermark, expiry, late events, causes.

Tiny random streams of timestamped transfers arriving out of order (some without ``ts``),
deletes by id, random allowed lateness, outliers, retention and epoch boundaries. The oracle
replays the same epochs by the definitions of the README: an epoch begins with the watermark
the previous one left; every event with ``ts + retention`` below it expires, then the updates
apply (inserts older than the watermark minus the retention are late), then the watermark
advances (the ``outliers + 1``-th largest time seen, minus the lateness, never back). After
every epoch the accumulated deltas equal the brute force over the events in the window; every
``-1`` says ``deleted`` exactly when the match does not survive the epoch's deletions alone,
``expired`` otherwise; the late updates are exactly the oracle's.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Any

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.records import UpdateBatch
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_events_oracle import brute_force, deltas
from tests.engine.test_time_oracle import MINUTE, QUERIES, TimedModel, batch

Binding = tuple[tuple[int, ...], tuple[str, ...]]

# insert (id, src, dst, amount, ts in minutes or None), or delete an id
OPS = st.one_of(
    st.tuples(
        st.just("insert"),
        st.integers(0, 8),
        st.integers(0, 2),
        st.integers(0, 2),
        st.integers(0, 4),
        st.one_of(st.none(), st.integers(0, 60)),
    ),
    st.tuples(st.just("delete"), st.integers(0, 8)),
)


class WindowModel(TimedModel):
    """The oracle's window: events in it, the times seen, the watermark."""

    def __init__(self, retention: float, lateness: float, outliers: int) -> None:
        super().__init__()
        self.retention, self.lateness, self.outliers = retention, lateness, outliers
        self.times: list[float] = []
        self.watermark = -math.inf

    def epoch(self, ops: list[tuple[Any, ...]], first: int) -> tuple[set[int], set[str]]:
        """Apply one epoch: the events whose ``ts + retention`` the watermark has passed
        expire, then the updates apply (inserts older than the watermark minus the retention
        are late), then the watermark advances over the times seen. Returns the positions of
        the late or untimed inserts, and the ids that expired."""
        expired = {
            key
            for key, (_, _, row) in self.events.items()
            if row["ts"] + self.retention < self.watermark  # type: ignore[operator]
        }
        for key in expired:
            del self.events[key]
        refused = set()
        for at, op in enumerate(ops, first):
            if op[0] == "insert" and op[5] is not None:
                self.times.append(op[5] * MINUTE)
            if op[0] == "insert" and (
                op[5] is None or op[5] * MINUTE + self.retention < self.watermark
            ):
                refused.add(at)
                continue
            self.apply(op)
        top = sorted(self.times)
        if len(top) > self.outliers:
            candidate = top[-1 - self.outliers] - self.lateness
            self.watermark = max(self.watermark, candidate)
        return refused, expired

    def matches(self) -> dict[str, set[Binding]]:
        return {q.name: brute_force(self, q) for q in QUERIES}


def check_windows(
    ops: list[tuple[Any, ...]],
    cuts: list[int],
    retention: int | None,
    lateness: int,
    outliers: int,
    compaction_min: int | None = None,
    live_matches: int | None = None,
) -> EpochProcessor:
    overrides = {} if retention is None else {"transfer": retention * MINUTE}
    run = Settings(
        retention=overrides, allowed_lateness=lateness * MINUTE, watermark_outliers=outliers
    )
    if compaction_min is not None:
        run = run.model_copy(update={"event_compaction_min": compaction_min})
    if live_matches is not None:
        run = run.model_copy(update={"live_matches": live_matches})
    processor = EpochProcessor(QUERIES, run)
    assert processor.windowed
    model = WindowModel(processor.retention["transfer"], lateness * MINUTE, outliers)
    current: Counter[tuple[str, Binding]] = Counter()
    before = model.matches()
    for lo, hi in itertools.pairwise(sorted({0, len(ops), *(c for c in cuts if c < len(ops))})):
        out = processor.process(batch(ops[lo:hi], lo))
        processor.commit()
        # the oracle: the epoch, and its deletions alone (what a -1 needs to survive; a delete
        # of an event that expired as the epoch began deletes nothing)
        alone = WindowModel(model.retention, model.lateness, model.outliers)
        alone.events = dict(model.events)
        refused, expired = model.epoch(ops[lo:hi], lo)
        for op in ops[lo:hi]:
            if op[0] == "delete" and f"tx-{op[1]}" not in expired:
                alone.apply(op)
        after = model.matches()
        late = {int(s) for seqs in out.late.values() for s in seqs.tolist()}
        assert late == refused, f"late or untimed updates of ops {lo}..{hi}"
        assert out.expired == len(expired), f"expired events of ops {lo}..{hi}"
        survivors = {q.name: brute_force(alone, q) for q in QUERIES}
        causes = {
            (q.query, binding): cause
            for q in out.queries
            for (_, binding, _), cause in zip(deltas([q]), q.extra["cause"].tolist(), strict=True)
        }
        for name, binding, diff in deltas(out.queries):
            current[(name, binding)] += diff
            assert current[(name, binding)] in (0, 1), f"running sum of {name} {binding}"
            if diff < 0:
                want = "expired" if binding in survivors[name] else "deleted"
                assert causes[(name, binding)] == want, f"cause of {name} {binding} at {lo}..{hi}"
            else:
                assert causes[(name, binding)] is None
        for query in QUERIES:
            got = {b for (n, b), c in current.items() if n == query.name and c}
            assert got == after[query.name], f"{query.name} after ops {lo}..{hi}"
        before = after
    assert before == model.matches()
    return processor


def test_a_long_window_compacts_many_times_and_keeps_every_row() -> None:
    """Hundreds of events in time order (a little disorder), a short window, some deleted by
    id: the store compacts at many commits, each renumbering the time orders and the expiry
    queue; every epoch is the oracle's (an expiry of a renumbered event would hit another)."""
    rng = np.random.default_rng(11)
    ops: list[tuple[Any, ...]] = []
    for i in range(600):
        src, dst = (int(x) for x in rng.integers(0, 3, 2))
        ops.append(
            ("insert", i, src, dst, int(rng.integers(0, 4)), i // 4 + int(rng.integers(0, 6)))
        )
        if i >= 20 and rng.random() < 0.2:
            ops.append(("delete", i - 20))
    processor = check_windows(ops, list(range(0, len(ops), 23)), 10, 2, 0, compaction_min=4)
    assert processor.index.event_stores["transfer"].compactions >= 5


@example(  # a ring, then time moves on: the ring expires
    ops=[
        ("insert", 0, 0, 1, 2, 0),
        ("insert", 1, 1, 2, 1, 5),
        ("insert", 2, 2, 0, 1, 12),
        ("insert", 3, 1, 1, 1, 40),
        ("insert", 4, 1, 1, 1, 41),
    ],
    cuts=[3],
    retention=None,
    lateness=0,
    outliers=0,
)
@example(  # an event older than the window arrives: late; a delete in the epoch that expires
    ops=[
        ("insert", 0, 0, 1, 2, 30),
        ("insert", 1, 1, 0, 1, 31),
        ("insert", 2, 1, 1, 1, 60),
        ("insert", 3, 0, 1, 1, 1),
        ("delete", 1),
        ("insert", 4, 2, 2, 1, 60),
    ],
    cuts=[2, 3],
    retention=10,
    lateness=1,
    outliers=0,
)
@example(  # exactly at the edge of the window: not late, not expired
    ops=[("insert", 0, 0, 1, 1, 20), ("insert", 1, 1, 0, 1, 10)],
    cuts=[1],
    retention=10,
    lateness=0,
    outliers=0,
)
@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(OPS, min_size=3, max_size=40),
    cuts=st.lists(st.integers(1, 40), max_size=6),
    retention=st.one_of(st.none(), st.integers(0, 40)),
    lateness=st.integers(0, 10),
    outliers=st.integers(0, 2),
)
def test_windows_match_the_brute_force_after_every_epoch(
    ops: list[tuple[Any, ...]], cuts: list[int], retention: int | None, lateness: int, outliers: int
) -> None:
    check_windows(ops, cuts, retention, lateness, outliers)


def test_the_window_oracle_sees_expiries_late_events_and_both_causes() -> None:
    """The generated kind of stream does expire matches, refuse late events and retract
    matches for both causes (the checks above are not vacuous)."""
    model = WindowModel(20 * MINUTE, 0, 0)
    model.epoch([("insert", 0, 0, 1, 2, 0), ("insert", 1, 1, 0, 1, 3)], 0)
    assert model.matches()["close"]
    _, expired = model.epoch([("insert", 2, 2, 2, 1, 30), ("insert", 3, 0, 0, 1, 2)], 2)
    assert not expired  # the watermark 30m takes effect when the next epoch begins
    refused, expired = model.epoch([("insert", 4, 0, 0, 1, 1)], 4)
    assert expired == {"tx-0", "tx-1", "tx-3"} and refused == {4}
    assert all("tx-0" not in events for _, events in model.matches()["close"])
    processor = EpochProcessor(QUERIES, Settings(allowed_lateness=0, watermark_outliers=0))
    ops = [
        ("insert", 0, 0, 1, 2, 0),
        ("insert", 1, 1, 0, 1, 3),
        ("insert", 2, 0, 1, 2, 4),
        ("insert", 3, 1, 1, 1, 30),
        ("delete", 2),
        ("insert", 4, 2, 2, 1, 31),
    ]
    found: Counter[str] = Counter()
    for lo, hi in [(0, 3), (3, 5), (5, 6)]:
        out = processor.process(batch(ops[lo:hi], lo))
        processor.commit()
        found.update(str(c) for q in out.queries for c in q.extra["cause"].tolist() if c)
    assert found["expired"] and found["deleted"], found


def test_the_watermark_is_the_slowest_partitions_undirected_and_across_joined_batches() -> None:
    """The event times of each input partition survive the mirroring of ``--undirected`` and
    the joining of batches (a catch-up after a restart): the watermark is the minimum over the
    partitions, not the times of all partitions taken as one."""
    for undirected in (False, True):
        run = Settings(allowed_lateness=0, watermark_outliers=0, undirected=undirected)
        processor = EpochProcessor(QUERIES, run)
        slow = batch([("insert", 0, 0, 1, 2, 5)], 0)
        fast = batch([("insert", 1, 1, 2, 2, 30)], 1)
        slow.times = {"in:0": np.array([5.0 * MINUTE])}
        fast.times = {"in:1": np.array([30.0 * MINUTE])}
        out = processor.process(UpdateBatch.concat([slow, fast]))
        processor.commit()
        assert processor.clock.partitions() == {"in:0": 5 * MINUTE, "in:1": 30 * MINUTE}
        assert out.watermark == 5 * MINUTE, f"undirected={undirected}"


def test_an_id_expired_and_inserted_again_takes_the_inserts_sequence_number() -> None:
    """An id that expires as an epoch begins and is inserted again in it: the expiry takes
    the insert's sequence number (scale-out decides both halves on one worker); an expiry
    whose id no insert of the epoch repeats (a counter's) keeps the epoch's own, after its
    updates."""
    settings = Settings(retention={"transfer": MINUTE}, allowed_lateness=0.0, watermark_outliers=0)
    processor = EpochProcessor(QUERIES, settings)
    epochs = [
        [("insert", 1, 0, 1, 1, 0), ("insert", 2, 1, 2, 1, 10)],
        [("insert", 1, 0, 1, 1, 11), ("insert", 3, 1, 2, 1, 12)],  # tx-1 expired, again
        [("insert", 4, 0, 1, 1, 30), ("insert", 5, 1, 2, 1, 31)],  # fresh ids only
    ]
    seen = []
    first = 0
    for ops in epochs:
        processor.process(batch(ops, first))
        changed = processor.events.changed["transfer"]
        seen.append((changed.seq[changed.diff < 0].tolist(), changed.seq[changed.diff > 0]))
        processor.commit()
        first += len(ops)
    expiry_seq, insert_seq = seen[1]
    assert insert_seq.tolist() == [2, 3] and expiry_seq == [2]  # tx-1's, by its insert
    expiry_seq, insert_seq = seen[2]
    assert insert_seq.tolist() == [4, 5] and expiry_seq == [5]  # tx-2's: after the updates
