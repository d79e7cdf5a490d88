"""The compiled radix sort of packed bindings against numpy's sort."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine import sorting
from monitor.engine.consolidate import consolidate

needs_numba = pytest.mark.skipif(not sorting.COMPILED, reason="numba is not in use (SGM_NUMBA=0)")


@needs_numba
@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 63).flatmap(
        lambda width: st.tuples(
            st.just(width),
            st.lists(st.integers(0, 2**width - 1), max_size=300),
        )
    )
)
def test_the_radix_sort_sorts_as_numpy_does(case: tuple[int, list[int]]) -> None:
    width, values = case
    keys = np.array(values, np.int64)
    before = keys.copy()
    assert sorting.radix_sort(keys, width).tolist() == np.sort(keys).tolist()
    assert keys.tolist() == before.tolist()  # a new array; the input is left as it was


@needs_numba
def test_large_epochs_take_the_radix_sort_and_consolidate_alike() -> None:
    rng = np.random.default_rng(7)
    rows = sorting.RADIX_MIN * 8
    columns = [rng.integers(0, 4000, rows).astype(np.int32) for _ in range(4)]
    packed = np.unique(
        (columns[0].astype(np.int64) << 36)
        | (columns[1].astype(np.int64) << 24)
        | (columns[2].astype(np.int64) << 12)
        | columns[3]
    )
    distinct = [((packed >> s) & 4095).astype(np.int32) for s in (36, 24, 12, 0)]
    order = rng.permutation(packed.shape[0])
    shuffled = [c[order] for c in distinct]
    for sign in (1, -1):  # one-signed: sorted, not grouped
        got, diff = consolidate(shuffled, np.full(packed.shape[0], sign, np.int64))
        assert [c.tolist() for c in got] == [c.tolist() for c in distinct]
        assert (diff == sign).all()
    # +1/-1: half of the rows again with the other sign cancel; the rest stay
    half = packed.shape[0] // 2
    both = [np.concatenate([c, c[:half]]) for c in shuffled]
    signs = np.concatenate([np.ones(packed.shape[0], np.int64), -np.ones(half, np.int64)])
    got, diff = consolidate(both, signs)
    kept = np.sort(packed[order][half:])
    assert [c.tolist() for c in got] == [((kept >> s) & 4095).tolist() for s in (36, 24, 12, 0)]
    assert (diff == 1).all()
