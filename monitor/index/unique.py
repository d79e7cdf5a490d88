"""Sorted distinct values and where each input row's value is among them, in linear time.

``np.unique(values, return_inverse=True)`` argsorts every row: on an epoch's 30k matched event
ids (6k distinct) that is 2.4 ms, more than the work the distinct values then save. Here a
compiled loop puts each row's value into an open-addressing table (a power of two at least
twice the rows, linear probing, the value's multiplicative hash as its home), numbering the
distinct values in order of first appearance; only those are then sorted, and the numbers
renamed to sorted ranks. The result is ``np.unique``'s, which stays the fallback (and the
reference the tests compare with) where numba is not used.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, ENABLED, njit

T = TypeVar("T", bound=np.integer[Any])
Ints = npt.NDArray[T]
Rows = npt.NDArray[np.intp]
#: Fibonacci hashing's multiplier (2**64 / golden ratio), an odd 64-bit constant.
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
#: Below this many rows the argsort is as fast (and nothing is compiled for them).
SMALL = 64


def sorted_distinct(values: Ints[T]) -> Ints[T]:
    """``np.unique(values)``: a sort and the values unlike their predecessor. numpy 2.4's
    ``np.unique`` without ``return_*`` takes a hashing path that is 40x slower on an epoch's
    10k eids (1.0 ms against 0.03)."""
    ordered = np.sort(values)
    if ordered.shape[0] < 2:
        return ordered
    keep = np.empty(ordered.shape[0], np.bool_)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def numpy_unique(values: Ints[T]) -> tuple[Ints[T], Rows]:
    """The sorted distinct values and each row's position among them (the reference)."""
    unique, inverse = np.unique(values, return_inverse=True)
    return unique, inverse.reshape(-1).astype(np.intp, copy=False)


def first_appearances(values: Ints[T]) -> tuple[Ints[T], Rows]:
    """The distinct values in order of first appearance, and each row's position among them:
    :func:`unique_inverse` without the sort, for a caller that needs each value once in any
    order (``distinct[groups] == values``)."""
    if not ENABLED or values.shape[0] < SMALL:
        return numpy_unique(values)
    first, groups = _first_appearances(values)
    return values[first], groups


def unique_inverse(values: Ints[T]) -> tuple[Ints[T], Rows]:
    """``np.unique(values, return_inverse=True)`` for a 1-d integer array, hashed."""
    if not ENABLED or values.shape[0] < SMALL:
        return numpy_unique(values)
    first, groups = _first_appearances(values)
    distinct = values[first]
    order = np.argsort(distinct)  # distinct values: stability is moot
    rank = np.empty(order.shape[0], np.intp)
    rank[order] = np.arange(order.shape[0], dtype=np.intp)
    return distinct[order], rank[groups]


def first_rows(values: Ints[T]) -> tuple[Rows, Rows]:
    """The first row holding each distinct value (in any order) and each row's position among
    those: :func:`first_appearances` giving rows, for a caller that reads several columns."""
    if not ENABLED or values.shape[0] < SMALL:
        _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        return first.astype(np.intp, copy=False), inverse.reshape(-1).astype(np.intp)
    first, groups = _first_appearances(values)
    return first, groups


def shared_count(a: Ints[T], b: Ints[T]) -> int:
    """How many distinct values are in both ``a`` and ``b``: ``np.intersect1d(a, b).size``
    with one sort of the smaller array (an epoch's few deletes against its many inserts), not
    of both together."""
    small, large = (a, b) if a.shape[0] <= b.shape[0] else (b, a)
    if not small.shape[0]:
        return 0
    if int(small.max()) < int(large.min()) or int(large.max()) < int(small.min()):
        return 0  # apart (the slots of expired ids and of new ones, from a counter)
    small = np.sort(small)
    at = np.minimum(np.searchsorted(small, large), small.shape[0] - 1)
    found = large[small[at] == large]
    return int(sorted_distinct(found).shape[0])


def warm() -> None:
    """Load (or compile, the first time on a machine) the loop for the id types the index
    passes, before the first epoch."""
    if ENABLED:
        unique_inverse(np.zeros(SMALL, np.int32))
        unique_inverse(np.zeros(SMALL, np.int64))


if AVAILABLE:

    @njit(cache=True, nogil=True)
    def _first_appearances(values):  # type: ignore[no-untyped-def]
        """The row of each distinct value's first appearance, and each row's distinct number
        (in order of first appearance)."""
        n = values.shape[0]
        size = 1
        bits = 0
        while size < 2 * n:
            size <<= 1
            bits += 1
        shift = np.uint64(64 - bits)
        table = np.full(size, -1, np.int32)  # the first row holding the value there
        groups = np.empty(n, np.intp)
        first = np.empty(n, np.intp)
        distinct = 0
        mask = size - 1
        for i in range(n):
            value = values[i]
            at = np.intp((np.uint64(value) * GOLDEN) >> shift)
            while True:
                row = table[at]
                if row < 0:
                    table[at] = i
                    first[distinct] = i
                    groups[i] = distinct
                    distinct += 1
                    break
                if values[row] == value:
                    groups[i] = groups[row]
                    break
                at = (at + 1) & mask
        return first[:distinct], groups
