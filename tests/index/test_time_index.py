"""The time index against a set of ``(vertex, time, eid)`` entries kept by hand.

Random epochs of inserts and removals, committed or aborted, with compactions at random sizes,
and for most a window: a horizon that moves on, below which entries are gone without a removal;
after each, the ranges queried under both cuts must find exactly the entries of the set with
the vertex and a time in the range; the compiled kernels and the numpy ones
must agree on every call.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.compiled import ENABLED
from monitor.index import time_kernels
from monitor.index.time_index import TimeIndex
from monitor.index.window import first_live
from monitor.plan.cut import Cut

Entry = tuple[int, float, int]


def expected(entries: set[Entry], vertex: int, lo: float, hi: float) -> list[int]:
    """The eids of ``vertex`` with a time in ``[lo, hi]``, sorted."""
    return sorted(e for v, t, e in entries if v == vertex and lo <= t <= hi)


def found(
    index: TimeIndex, cut: Cut, vertices: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> list[list[int]]:
    view = index.view(cut)
    probe = view.probe(vertices, lo, hi)
    owner, eids = view.propose(probe)
    counts = view.count(probe)
    out: list[list[int]] = [[] for _ in range(vertices.shape[0])]
    for o, e in zip(owner.tolist(), eids.tolist(), strict=True):
        out[o].append(e)
    assert [len(x) for x in out] == counts.tolist()
    if vertices.shape[0]:  # every found event is contained, and one of another query is not
        assert view.contains(probe, owner, eids).all()
        assert not view.contains(probe, (owner + 1) % vertices.shape[0], eids + 10_000).any()
    return out


def check(index: TimeIndex, cut: Cut, entries: set[Entry], rng: np.random.Generator) -> None:
    n = 40
    vertices = rng.integers(-1, 9, n)
    lo = rng.integers(0, 30, n).astype(np.float64)
    hi = lo + rng.integers(-2, 12, n)
    lo[rng.random(n) < 0.1] = np.nan
    got = found(index, cut, vertices, lo, hi)
    for i in range(n):
        assert sorted(got[i]) == expected(entries, int(vertices[i]), lo[i], hi[i]), (
            vertices[i],
            lo[i],
            hi[i],
        )


@pytest.mark.parametrize("compiled", [False, True] if ENABLED else [False])
def test_ranges_find_exactly_the_entries_in_range(compiled: bool) -> None:
    before = time_kernels.COMPILED
    time_kernels.COMPILED = compiled
    try:
        random_epochs()
    finally:
        time_kernels.COMPILED = before


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), compaction_min=st.sampled_from([1, 4, 64]))
def random_epochs(seed: int, compaction_min: int) -> None:
    rng = np.random.default_rng(seed)
    index = TimeIndex(compaction_ratio=0.25, compaction_min=compaction_min)
    committed: set[Entry] = set()
    next_eid = 0
    meta: dict[int, Entry] = {}
    if rng.random() < 0.3:  # a bulk load first
        k = int(rng.integers(0, 30))
        loaded = [
            (int(rng.integers(0, 8)), float(rng.integers(0, 30)), next_eid + i) for i in range(k)
        ]
        next_eid += k
        index.load(*_columns(loaded))
        committed = set(loaded)
        meta.update({e: (v, t, e) for v, t, e in loaded})
    horizon = -np.inf  # with a window, entries below it expire without a removal staged
    windowed = rng.random() < 0.6
    for _ in range(int(rng.integers(1, 12))):
        upto = horizon
        if windowed and rng.random() < 0.6:
            upto = max(horizon, float(rng.integers(0, 4)) + max(horizon, 0.0))
        expired = {x for x in committed if x[1] < upto}
        # the removals staged: by id, and now and then one of an expired entry
        removed = [x for x in committed if rng.random() < (0.3 if x not in expired else 0.1)]
        k = int(rng.integers(0, 12))
        added = [
            (int(rng.integers(0, 8)), float(rng.integers(max(upto, 0), 31)), next_eid + i)
            for i in range(k)
        ]
        next_eid += k
        changes = [(x, -1) for x in removed] + [(x, 1) for x in added]
        rng.shuffle(changes)  # type: ignore[arg-type]
        v, t, e = _columns([x for x, _ in changes])
        diff = np.array([d for _, d in changes], np.int8)
        index.stage(v, t, e, diff, horizon=upto, expired=len(expired))
        after = (committed - set(removed) - expired) | set(added)
        check(index, Cut.OLD, committed, rng)
        check(index, Cut.NEW, after, rng)
        if rng.random() < 0.2:
            index.abort()
        else:
            index.commit()
            committed, horizon = after, upto
        check(index, Cut.OLD, committed, rng)
        assert len(index) == len(committed)
        if rng.random() < 0.2:  # compacted, it holds the entries alive, nothing expired
            index.compact()
            assert len(index.base) == len(committed) and not len(index.committed)
        v, t, e = index.entries()
        assert sorted(zip(v.tolist(), t.tolist(), e.tolist(), strict=True)) == sorted(committed)


def test_a_load_replaces_the_horizon_too() -> None:
    """Entries loaded are the live events, even those older than a horizon the index had."""
    index = TimeIndex()
    index.stage(*_columns([(0, 20.0, 0)]), np.ones(1, np.int8), horizon=10.0)
    index.commit()
    index.load(*_columns([(0, 5.0, 1), (0, 12.0, 2)]))
    rng = np.random.default_rng(0)
    check(index, Cut.OLD, {(0, 5.0, 1), (0, 12.0, 2)}, rng)
    assert len(index) == 2


def test_the_order_of_entries_breaks_ties_by_eid() -> None:
    rng = np.random.default_rng(3)
    n = 500
    v = rng.integers(0, 5, n).astype(np.int32)
    t = rng.integers(0, 4, n).astype(np.float64)
    e = rng.permutation(n).astype(np.int32)
    reference = np.lexsort((e, t, v))
    assert np.array_equal(time_kernels.entry_order(v, t, e), reference)
    keys = list(
        zip(v[reference].tolist(), t[reference].tolist(), e[reference].tolist(), strict=True)
    )
    assert keys == sorted(keys)


def _columns(entries: list[Entry]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    v = np.array([x[0] for x in entries], np.int32)
    t = np.array([x[1] for x in entries], np.float64)
    e = np.array([x[2] for x in entries], np.int32)
    return v, t, e


@settings(max_examples=300, deadline=None)
@given(
    watermark=st.floats(-1e15, 1e15) | st.integers(0, 2**41).map(float),
    retention=st.floats(0, 1e12) | st.sampled_from([0.0, 1.0, 600_000.0, 86_400_000.0]),
)
def test_first_live_is_the_earliest_time_whose_deadline_the_queue_keeps(
    watermark: float, retention: float
) -> None:
    """The horizon of a cut is exact: an event at it is alive at the watermark (its deadline,
    ``ts + retention`` as the expiry queue rounds it, is not below), one a step earlier is
    expired, so the time index drops exactly what the queue expires."""
    t = first_live(watermark, retention)
    assert t + retention >= watermark
    assert math.nextafter(t, -math.inf) + retention < watermark


def test_first_live_without_a_watermark_or_a_window_keeps_everything() -> None:
    assert first_live(-math.inf, 1000.0) == -math.inf
    assert first_live(5.0, math.inf) == -math.inf
