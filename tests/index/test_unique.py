"""The hashed distinct values against ``np.unique`` and a dict, and an event store's matched
columns (formatted once per distinct event) against its plain columns."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.columns import python_values
from monitor.index import unique
from monitor.index.events import EventStore

pytestmark = pytest.mark.skipif(not unique.ENABLED, reason="numba is switched off: numpy only")

EDGES = [-(2**63), -(2**31), -1, 0, 1, 2**31 - 1, 2**32, 2**63 - 1]


@st.composite
def columns(draw: st.DrawFn) -> np.ndarray:  # type: ignore[type-arg]
    """Rows over a few distinct values (collisions of the hash's top bits come from values
    that differ in their low bits only, and from the dtype's extremes), long enough to be
    hashed, not argsorted."""
    dtype = draw(st.sampled_from([np.int32, np.int64]))
    info = np.iinfo(dtype)
    pool = [v for v in EDGES if info.min <= v <= info.max]
    base = draw(st.integers(info.min, info.max - 64))
    values = st.one_of(st.sampled_from(pool), st.integers(base, base + 63))
    distinct = draw(st.lists(values, min_size=1, max_size=200, unique=True))
    n = draw(st.integers(unique.SMALL, 600))
    picks = draw(st.lists(st.integers(0, len(distinct) - 1), min_size=n, max_size=n))
    return np.array([distinct[p] for p in picks], dtype)


@settings(max_examples=200, deadline=None)
@given(columns())
def test_unique_inverse_is_np_unique(values: np.ndarray) -> None:  # type: ignore[type-arg]
    got, inverse = unique.unique_inverse(values)
    want, want_inverse = np.unique(values, return_inverse=True)
    assert got.dtype == values.dtype
    assert got.tolist() == want.tolist()
    assert inverse.tolist() == want_inverse.reshape(-1).tolist()


@settings(max_examples=200, deadline=None)
@given(columns())
def test_sorted_distinct_is_np_unique(values: np.ndarray) -> None:  # type: ignore[type-arg]
    for part in (values, values[:1], values[:0]):
        got = unique.sorted_distinct(part)
        assert got.dtype == part.dtype
        assert got.tolist() == np.unique(part).tolist()


@settings(max_examples=200, deadline=None)
@given(columns())
def test_first_appearances_numbers_values_in_order_of_first_appearance(
    values: np.ndarray,  # type: ignore[type-arg]
) -> None:
    distinct, groups = unique.first_appearances(values)
    seen: dict[int, int] = {}
    for v in values.tolist():
        seen.setdefault(v, len(seen))
    assert distinct.tolist() == list(seen)
    assert groups.tolist() == [seen[v] for v in values.tolist()]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-5, 40), max_size=30),
    st.lists(st.integers(-5, 40), max_size=300),
)
def test_shared_count_is_the_size_of_the_intersection(a: list[int], b: list[int]) -> None:
    left, right = np.array(a, np.int32), np.array(b, np.int32)
    want = np.intersect1d(left, right).shape[0]
    assert unique.shared_count(left, right) == want
    assert unique.shared_count(right, left) == want


def test_short_columns_take_np_unique() -> None:
    values = np.array([5, -3, 5, 9], np.int64)
    got, inverse = unique.unique_inverse(values)
    assert got.tolist() == [-3, 5, 9]
    assert inverse.tolist() == [1, 0, 1, 2]


ID_KINDS = {
    "text": lambda i: f"tx-{i}" if i % 7 else f"note {i}",
    "numbered": lambda i: f"tx-{i}",
    "not ascii": lambda i: f"tx-{i}" if i % 7 else f"nöte {i}",
    "integers": lambda i: i * 3,
    "mixed": lambda i: f"tx-{i}" if i % 2 else i,
}


@pytest.mark.parametrize("kind", list(ID_KINDS))
def test_matched_columns_and_hashes_are_the_per_row_ones(kind: str) -> None:
    """Each distinct event formatted once and gathered: the same columns and id hashes as
    formatting every row (ids numbered, text, integers or both; fields absent on some
    events)."""
    store = EventStore("transfer")
    n = 300
    ids = np.array([ID_KINDS[kind](i) for i in range(n)], dtype=object)
    channel = np.array([None if i % 5 == 0 else ("wire", "card")[i % 2] for i in range(n)], object)
    amount = np.where(np.arange(n) % 3 == 0, np.nan, np.arange(n) * 1.25)
    vertices = np.arange(n, dtype=np.int32)
    fields = {"amount": amount, "channel": channel}
    store.stage(
        ids, np.ones(n, np.bool_), np.arange(n), vertices % 11, vertices % 13, fields, Counter()
    )
    store.commit()
    eids = np.random.default_rng(3).integers(0, n, 2000).astype(np.int32)
    decode = lambda v: v.astype(np.int64) * 10  # noqa: E731 - a vertex decoder stand-in

    matched, hashes = store.matched(eids, decode)
    plain = store.columns(eids, decode)
    assert list(matched) == list(plain)
    for name in plain:
        assert python_values(matched[name]) == python_values(plain[name]), name
    assert hashes.tolist() == store.id_hashes(eids).tolist()
