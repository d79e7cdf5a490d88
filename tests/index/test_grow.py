"""Growing an index column: in place while nothing else holds the array, a copy while a view
or another reference does; the old entries kept, the new ones the fill, either way."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.index import levels
from monitor.index.levels import grow


class Owner:
    def __init__(self, values: np.ndarray) -> None:  # type: ignore[type-arg]
        self.values = values


@pytest.mark.skipif(not levels.IN_PLACE, reason="Python 3.14+: columns are always copied")
@pytest.mark.parametrize("fill", [0, -1, False, np.nan])
def test_a_column_nothing_else_holds_grows_in_place(fill: object) -> None:
    dtype = np.float64 if fill is np.nan else (np.bool_ if fill is False else np.int32)
    owner = Owner(np.arange(1, 6).astype(dtype))
    identity = id(owner.values)
    grow(owner, "values", 9, fill)
    assert id(owner.values) == identity  # the same array object, resized: not a copy
    assert owner.values.shape == (9,)
    assert owner.values[:5].tolist() == np.arange(1, 6).astype(dtype).tolist()
    tail = owner.values[5:]
    assert (np.isnan(tail) if fill is np.nan else tail == fill).all()
    assert owner.values.flags.owndata


def test_a_column_with_a_view_is_copied_and_the_view_is_untouched() -> None:
    owner = Owner(np.arange(5, dtype=np.int32))
    view = owner.values[1:3]
    before = owner.values
    grow(owner, "values", 8, -1)
    assert owner.values is not before  # copied: the view still reads the old array
    assert view.tolist() == [1, 2] and before.tolist() == [0, 1, 2, 3, 4]
    assert owner.values.tolist() == [0, 1, 2, 3, 4, -1, -1, -1]


def test_a_column_held_elsewhere_is_copied() -> None:
    owner = Owner(np.arange(3, dtype=np.int64))
    held = owner.values
    grow(owner, "values", 5)
    assert owner.values is not held and held.tolist() == [0, 1, 2]
    assert owner.values.tolist() == [0, 1, 2, 0, 0]


def test_growing_to_a_smaller_capacity_changes_nothing() -> None:
    owner = Owner(np.arange(4, dtype=np.int32))
    grow(owner, "values", 2)
    assert owner.values.tolist() == [0, 1, 2, 3]


def test_without_resizing_in_place_a_column_is_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(levels, "IN_PLACE", False)
    owner = Owner(np.arange(3, dtype=np.int32))
    before = owner.values
    grow(owner, "values", 5, -1)
    assert owner.values is not before and owner.values.tolist() == [0, 1, 2, -1, -1]
