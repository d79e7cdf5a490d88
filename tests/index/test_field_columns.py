"""A string field's codes: a byte an event while its pool is small, wider as it grows, the
values, selections and output unchanged; a pool shared by two columns."""

from __future__ import annotations

import numpy as np

from core.columns import python_values
from core.fields import compare
from monitor.index.events import FieldColumn, StringPool, code_dtype


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
