"""Candidates kept by a stage's filters: the compiled pass against numpy's masked copies."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.compiled import ENABLED
from monitor.engine.prefixes import Candidates, Prefixes


@pytest.mark.skipif(not ENABLED, reason="numba is not in use (SGM_NUMBA=0 or not installed)")
@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 300), share=st.floats(0, 1), seed=st.integers(0, 2**16))
def test_take_keeps_the_rows_and_values_numpy_keeps(n: int, share: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    prefixes = Prefixes((rng.integers(0, 50, 40).astype(np.int32),), np.ones(40, np.int64))
    rows = np.sort(rng.integers(0, 40, n)).astype(np.int64)
    values = rng.integers(0, 1 << 30, n).astype(np.int32)
    keep = rng.random(n) < share
    kept = Candidates(prefixes, rows, values).take(keep)
    assert kept.rows.dtype == np.int64 and kept.values.dtype == np.int32
    assert kept.rows.tolist() == rows[keep].tolist()
    assert kept.values.tolist() == values[keep].tolist()
    # other dtypes take numpy's copies, alike
    narrow = Candidates(prefixes, rows.astype(np.int32), values).take(keep)
    assert narrow.rows.tolist() == rows[keep].tolist()
