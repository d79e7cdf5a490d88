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


@needs_numba
@pytest.mark.parametrize(("width", "top"), [(6, 2**23), (3, 2**31 - 1), (7, 50), (2, 2**31 - 1)])
def test_wide_bindings_group_in_the_compiled_pass_as_numpy_groups_them(
    width: int, top: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bindings that pack into several keys (six columns of 23-bit ids, as ``big_ring``'s
    vertices and events): the compiled radix grouping gives numpy's lexsort's result, each
    binding once with its sum, zeros dropped, in binding order."""
    rng = np.random.default_rng(width)
    rows = sorting.RADIX_MIN * 3
    columns = [rng.integers(0, top, rows // 2).astype(np.int32) for _ in range(width)]
    columns = [c.astype(np.int64) % 5 if i == 0 else c for i, c in enumerate(columns)]  # ties
    again = rng.integers(0, rows // 2, rows - rows // 2)
    both = [np.concatenate([c, c[again]]).astype(np.int32) for c in columns]
    diff = rng.choice(np.array([-2, -1, 1, 1, 3], np.int64), rows)
    diff[rows // 2 :][: again.shape[0] // 2] = -diff[again[: again.shape[0] // 2]]  # cancel some
    got, sums = consolidate(both, diff)
    monkeypatch.setattr(sorting, "COMPILED", False)
    want, want_sums = consolidate(both, diff)
    assert [c.tolist() for c in got] == [c.tolist() for c in want]
    assert sums.tolist() == want_sums.tolist()
    assert len(sums) < rows and (sums != 0).all()
