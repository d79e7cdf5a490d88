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


def _keyed(events: list[np.ndarray], width: int) -> list[np.ndarray]:  # type: ignore[type-arg]
    """Vertex columns each a function of the event columns (as an event's ends are of its id),
    followed by the event columns."""
    mixed = sum(e.astype(np.int64) * (k + 7919) for k, e in enumerate(events))
    vertices = [((mixed * (31 + k)) % (97 + k)).astype(np.int32) for k in range(width)]
    return [*vertices, *events]


def _by_dict(
    columns: list[np.ndarray],  # type: ignore[type-arg]
    diff: np.ndarray,  # type: ignore[type-arg]
) -> Counter[tuple[int, ...]]:
    out: Counter[tuple[int, ...]] = Counter()
    for row, d in zip(zip(*(c.tolist() for c in columns), strict=True), diff.tolist(), strict=True):
        out[row] += d
    return out


@settings(max_examples=200, deadline=None)
@given(deltas(), st.integers(1, 4))
def test_consolidation_keyed_by_determining_columns_sums_each_binding_once_in_their_order(
    delta: tuple[list[np.ndarray], np.ndarray],  # type: ignore[type-arg]
    width: int,
) -> None:
    events, diff = delta
    events = events[:2]
    columns = _keyed(events, width)
    keyed_by = tuple(range(width, len(columns)))
    expected = _by_dict(columns, diff)
    out, sums = consolidate(columns, diff, keyed_by)
    got = list(zip(zip(*(c.tolist() for c in out), strict=True), sums.tolist(), strict=True))
    assert sorted(got) == sorted((row, d) for row, d in expected.items() if d)
    keys = [row[width:] for row, _ in got]
    assert keys == sorted(keys)  # (in the order of the determining columns)


def test_consolidation_keyed_by_events_on_many_rows_as_the_radix_sort_groups_them() -> None:
    """Past the compiled sort's threshold: the same bindings and sums as keyed by every column."""
    rng = np.random.default_rng(5)
    rows = 20_000
    events = [rng.integers(0, 3000, rows).astype(np.int32) for _ in range(2)]
    diff = rng.choice(np.array([-1, 1, 2], np.int64), rows)
    columns = _keyed(events, 3)
    whole, whole_sums = consolidate(columns, diff)
    out, sums = consolidate(columns, diff, (3, 4))
    expected = sorted(zip(_rows(whole), whole_sums.tolist(), strict=True))
    got = list(zip(_rows(out), sums.tolist(), strict=True))
    assert len(got) < rows  # (rows met and some cancelled)
    assert sorted(got) == expected
    assert [row[3:] for row, _ in got] == sorted(row[3:] for row, _ in got)


def _rows(columns: list[np.ndarray]) -> list[tuple[int, ...]]:  # type: ignore[type-arg]
    return list(zip(*(c.tolist() for c in columns), strict=True))
