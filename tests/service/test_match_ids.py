"""``match_id``: the same query, vertices and events give the same id, anything else another.

The ids are pinned: a consumer joins alerts to cases by them, so a change of the hash is a
breaking change and must fail here first.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.service import match_ids as ids_module
from monitor.service.match_ids import match_ids


def objects(*values: object) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def test_match_ids_are_pinned() -> None:
    triangles = match_ids("triangle", [np.array([1, 4]), np.array([2, 5]), np.array([3, 6])], 2)
    assert triangles.tolist() == [b"769ce55d4005dc3f", b"a29f19a6fe984c69"]
    rings = match_ids(
        "big_ring",
        [objects(1, "acct-7"), objects("B", "é"), objects("tx-91", 42)],
        2,
    )
    assert rings.tolist() == [b"c9081028a8c22447", b"165b2a4e12a781b4"]


def test_an_id_depends_on_the_ids_their_kinds_their_order_and_the_query() -> None:
    def one(query: str, *ids: object) -> str:
        return bytes(match_ids(query, [objects(v) for v in ids], 1)[0]).decode()

    base = one("q", 1, 2)
    assert one("q", 1, 2) == base
    assert one("q", np.int64(1), 2) == base  # an integer is its value, whatever its type
    assert len({base, one("q", 2, 1), one("q", "1", 2), one("p", 1, 2), one("q", 1, 3)}) == 5
    assert one("q", "ab", "c") != one("q", "a", "bc")


def test_integer_and_mixed_columns_hash_integers_alike() -> None:
    ints = match_ids("q", [np.array([7, 8, 9])], 3)
    mixed = match_ids("q", [objects(7, 8, 9)], 3)
    assert ints.tolist() == mixed.tolist()
    assert len(set(ints.tolist())) == 3


@pytest.mark.skipif(not ids_module.COMPILED, reason="numba is not in use (SGM_NUMBA=0)")
@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 3).flatmap(
        lambda k: st.lists(
            st.lists(
                st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=4)),
                min_size=k,
                max_size=k,
            ),
            max_size=6,
        )
    ),
    st.booleans(),
)
def test_the_compiled_ids_are_the_numpy_ids(rows: list[list[object]], as_ints: bool) -> None:
    width = len(rows[0]) if rows else 0
    columns = []
    for k in range(width):
        values = [row[k] for row in rows]
        if as_ints and all(isinstance(v, int) for v in values):
            columns.append(np.array(values, np.int64))
        else:
            columns.append(objects(*values))
    numpy_ids = match_ids("q", columns, len(rows), compiled=False)
    assert match_ids("q", columns, len(rows), compiled=True).tolist() == numpy_ids.tolist()
