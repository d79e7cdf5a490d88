"""The compiled join filter on two number fields (:mod:`monitor.engine.field_joins`) keeps
exactly the candidates that the whole-array filter keeps: every comparison, scaled and plain
columns on either side, absent values, the proposal or an earlier column on either side, and
factors and offsets whose products round."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.compiled import ENABLED
from core.fields import affine, compare
from monitor.engine.field_joins import OPS, keep_joined
from monitor.engine.prefixes import Candidates, Prefixes
from monitor.index.field_columns import FieldColumn
from monitor.plan.plan import FieldFilter

pytestmark = pytest.mark.skipif(not ENABLED, reason="the compiled loops are off")

EVENTS = 40


def _column(rng: np.random.Generator, scaled: bool) -> FieldColumn:
    """A number column over ``EVENTS`` events, some absent: cents (kept scaled) or thirds
    (kept as floats: no decimal exponent holds them)."""
    column = FieldColumn("number")
    numbers = rng.integers(-6, 6, EVENTS) / (100.0 if scaled else 3.0)  # (ties are common)
    numbers[rng.random(EVENTS) < 0.2] = np.nan
    column.grow(EVENTS)
    column.store(np.arange(EVENTS, dtype=np.int32), numbers)
    assert column.scaled == scaled
    return column


@settings(max_examples=400, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    op=st.sampled_from(sorted(OPS)),
    sides=st.tuples(st.booleans(), st.booleans()),
    scaled=st.tuples(st.booleans(), st.booleans()),
    factor=st.sampled_from([1.0, 0.8, 1.1, -0.3, 1 / 3]),
    offset=st.sampled_from([0.0, 0.1, -2.5, 1e-9]),
)
def test_the_compiled_filter_keeps_what_the_arrays_keep(
    seed: int,
    op: str,
    sides: tuple[bool, bool],
    scaled: tuple[bool, bool],
    factor: float,
    offset: float,
) -> None:
    rng = np.random.default_rng(seed)
    left_field, right_field = _column(rng, scaled[0]), _column(rng, scaled[1])
    width, n = 3, 200
    prefixes = Prefixes(
        tuple(rng.integers(0, EVENTS, 50).astype(np.int32) for _ in range(width)),
        np.ones(50, np.int64),
    )
    rows = np.sort(rng.integers(0, 50, n)).astype(np.int64)
    batch = Candidates(prefixes, rows, rng.integers(0, EVENTS, n).astype(np.int32))
    left = width if sides[0] else int(rng.integers(0, width))
    right = width if sides[1] else int(rng.integers(0, width))
    join = FieldFilter(left, "t", "amount", op, right, "t", "amount", factor, offset)
    before = rng.random(n) < 0.9
    keep = before.copy()
    assert keep_joined(keep, batch, join, left_field.numbers(), right_field.numbers())  # type: ignore[arg-type]
    a = left_field.get(batch.column(left))
    b = right_field.get(batch.column(right))
    want = before & compare(a, op, affine(b, factor, offset))
    assert (keep == want).all()


def test_a_rounding_product_is_not_fused() -> None:
    """``0.1 * 3 + -0.3`` is 5.55e-17 as numpy computes it (two roundings) and 2.78e-17 as a
    fused multiply-add would: the filter ``a > b * 3 - 0.3`` with ``a = 3e-17`` tells them
    apart."""
    left, right = FieldColumn("number"), FieldColumn("number")
    for column, number in ((left, 3e-17), (right, 0.1)):
        column.grow(1)
        column.store(np.zeros(1, np.int32), np.array([number]))
    prefixes = Prefixes((np.zeros(1, np.int32),), np.ones(1, np.int64))
    batch = Candidates(prefixes, np.zeros(1, np.int64), np.zeros(1, np.int32))
    join = FieldFilter(1, "t", "x", ">", 0, "t", "x", 3.0, -0.3)
    keep = np.ones(1, np.bool_)
    assert keep_joined(keep, batch, join, left.numbers(), right.numbers())  # type: ignore[arg-type]
    want = compare(left.get(np.zeros(1, np.int32)), ">", affine(np.array([0.1]), 3.0, -0.3))
    assert keep.tolist() == want.tolist() == [False]
