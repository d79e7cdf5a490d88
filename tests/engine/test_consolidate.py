"""Consolidation against a dict: each binding once with its summed diff, zeros dropped, sorted.

Both ways through it: +1/-1 diffs of bindings that pack into one key with a bit to spare (one
sort of the keys), and everything else (multiplicities, wide ids, many columns: argsort or
lexsort of the packed keys)."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine.consolidate import consolidate


@st.composite
def deltas(draw: st.DrawFn) -> tuple[list[np.ndarray], np.ndarray]:  # type: ignore[type-arg]
    width = draw(st.integers(1, 7))
    top = draw(st.sampled_from([1, 3, 200, 4095, 2**31 - 1]))
    rows = draw(st.integers(0, 40))
    ids = st.integers(0, top)
    columns = [
        np.array(draw(st.lists(ids, min_size=rows, max_size=rows)), np.int32) for _ in range(width)
    ]
    signs = st.sampled_from([1, -1]) if draw(st.booleans()) else st.integers(-3, 3)
    diff = np.array(draw(st.lists(signs, min_size=rows, max_size=rows)), np.int64)
    # repeat some rows so that bindings meet, and cancel
    if rows:
        again = np.array(draw(st.lists(st.integers(0, rows - 1), max_size=rows)), np.int64)
        columns = [np.concatenate([c, c[again]]) for c in columns]
        diff = np.concatenate([diff, -diff[again] if draw(st.booleans()) else diff[again]])
    return columns, diff


@settings(max_examples=300, deadline=None)
@given(deltas())
def test_consolidate_sums_each_binding_once_in_binding_order(
    delta: tuple[list[np.ndarray], np.ndarray],  # type: ignore[type-arg]
) -> None:
    columns, diff = delta
    expected: Counter[tuple[int, ...]] = Counter()
    for row, d in zip(zip(*(c.tolist() for c in columns), strict=True), diff.tolist(), strict=True):
        expected[row] += d
    out, sums = consolidate(columns, diff)
    got = list(zip(zip(*(c.tolist() for c in out), strict=True), sums.tolist(), strict=True))
    assert got == sorted((row, d) for row, d in expected.items() if d)
    assert all(c.dtype == np.int32 for c in out)
