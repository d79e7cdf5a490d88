"""A string field's codes: a byte an event while its pool is small, wider as it grows, the
values, selections and output unchanged; a pool shared by two columns."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from core.columns import python_values
from core.compiled import AVAILABLE
from core.fields import compare
from monitor.index.field_columns import FieldColumn, StringPool, code_dtype


def strings(values: list[str | None]) -> np.ndarray:  # type: ignore[type-arg]
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def test_codes_are_as_narrow_as_the_pool_allows() -> None:
    assert [code_dtype(n) for n in (0, 127, 128, 32_767, 32_768)] == [
        np.int8,
        np.int8,
        np.int16,
        np.int16,
        np.int32,
    ]


def test_a_column_widens_as_its_pool_grows_and_keeps_its_values() -> None:
    pool = StringPool()
    channel, country = FieldColumn("string", pool), FieldColumn("string", pool)
    for column in (channel, country):
        column.grow(400)
    channel.store(np.arange(3, dtype=np.int32), strings(["wire", "card", None]))
    assert channel.values.dtype == np.int8
    names = [f"c{i}" for i in range(300)]  # the other column fills the shared pool
    country.store(np.arange(300, dtype=np.int32), strings(names))
    assert country.values.dtype == np.int16 and channel.values.dtype == np.int8
    channel.store(np.array([3], np.int32), strings(["c299"]))  # a code beyond int8
    assert channel.values.dtype == np.int16
    got = python_values(channel.values_of(np.arange(4, dtype=np.int32)))
    assert got == ["wire", "card", None, "c299"]
    assert python_values(country.values_of(np.array([0, 299], np.int32))) == ["c0", "c299"]
    # A literal's code beyond the narrow type compares as it should (absent: false).
    literal = country.code("c299")
    assert literal > np.iinfo(np.int8).max
    narrow = FieldColumn("string", StringPool())
    narrow.grow(2)
    narrow.store(np.arange(2, dtype=np.int32), strings(["wire", None]))
    assert narrow.values.dtype == np.int8
    assert compare(narrow.values[:2], "!=", literal).tolist() == [True, False]
    assert compare(narrow.values[:2], "=", literal).tolist() == [False, False]


def numbers(values: list[float]) -> np.ndarray:  # type: ignore[type-arg]
    return np.array(values, np.float64)


def test_amounts_in_cents_and_times_in_ms_take_four_bytes() -> None:
    amounts, times = FieldColumn("number"), FieldColumn("number")
    for column in (amounts, times):
        column.grow(1000)
    cents = np.round(np.random.default_rng(1).lognormal(5.5, 1.6, 1000), 2)
    amounts.store(np.arange(1000, dtype=np.int32), cents)
    ms = 1_767_225_600_000 + np.arange(1000) * 86_400.0
    times.store(np.arange(1000, dtype=np.int32), ms)
    assert (amounts.values.dtype, amounts.exponent, amounts.base) == (np.int32, 2, 0)
    assert (times.values.dtype, times.exponent, times.base) == (np.int32, 0, 1_767_225_600_000)
    assert amounts.get(np.arange(1000)).tobytes() == cents.tobytes()
    assert times.get(np.arange(1000)).tobytes() == ms.tobytes()


def test_a_value_not_kept_exactly_turns_the_column_into_float64() -> None:
    """Whole numbers, then cents (a finer exponent, values rescaled), then a third: float64
    from then on, every value read back bit for bit, NaN where absent."""
    column = FieldColumn("number")
    column.grow(8)
    column.store(np.array([0, 1], np.int32), numbers([100.0, np.nan]))
    assert column.exponent == 0
    column.store(np.array([2, 3], np.int32), numbers([15.25, -3.0]))
    assert (column.values.dtype, column.exponent) == (np.int32, 2)
    column.store(np.array([4], np.int32), numbers([1 / 3]))
    assert column.values.dtype == np.float64
    column.store(np.array([5], np.int32), numbers([2.5]))
    got = column.get(np.arange(6))
    assert got[:6].tolist()[2:] == [15.25, -3.0, 1 / 3, 2.5]
    assert got[0] == 100.0 and np.isnan(got[1])


@given(
    st.lists(
        st.lists(
            st.one_of(
                st.integers(-(10**9), 10**9).map(lambda c: c / 100),
                st.integers(0, 10**7).map(lambda ms: 1.7e12 + ms),
                st.floats(allow_nan=True, allow_infinity=True),
                st.sampled_from([0.0, -0.0, 2.0**31, -(2.0**31), 1e300, 5e-324]),
            ),
            max_size=8,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_numbers_read_back_bit_for_bit(batches: list[list[float]]) -> None:
    """Whatever the numbers and however they arrive, :meth:`get` gives their very bits back
    (NaN for NaN: absent), scaled or not; comparisons and output read that."""
    column = FieldColumn("number")
    stored: list[float] = []
    for batch in batches:
        eids = np.arange(len(stored), len(stored) + len(batch), dtype=np.int32)
        column.grow(len(stored) + len(batch))
        column.store(eids, numbers(batch))
        stored.extend(batch)
    expected = numbers(stored)
    nan = np.isnan(expected)
    for compiled in (False, AVAILABLE):  # numpy, and numba where it is installed
        got = column.get(np.arange(len(stored)), compiled=compiled)
        assert (np.isnan(got) == nan).all()
        assert got[~nan].tobytes() == expected[~nan].tobytes()


@given(
    st.lists(
        st.lists(
            st.one_of(st.none(), st.sampled_from(["wire", "card", "cash", "ach", "é", "a\x00", ""]))
        )
        | st.lists(st.one_of(st.none(), st.text(max_size=3)), min_size=17),
        min_size=1,
        max_size=4,
    )
)
def test_string_values_read_back_whatever_their_number_in_a_batch(
    batches: list[list[str | None]],
) -> None:
    """A batch's few distinct values (compared one by one) and many (sorted) get codes of
    the same pool that read back as the values."""
    column = FieldColumn("string")
    everything = [v for batch in batches for v in batch]
    column.grow(max(len(everything), 1))
    at = 0
    for batch in batches:
        column.store(np.arange(at, at + len(batch), dtype=np.int32), strings(batch))
        at += len(batch)
    got = python_values(column.values_of(np.arange(at, dtype=np.int32)))
    assert got == everything
    assert len(column.pool.strings) == len({v for v in everything if v is not None})
