"""Consolidation: sum the diffs of equal bindings and drop the ones that net to zero."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from monitor.engine.sorting import grouped, sort_packed
from monitor.index.levels import I32, I64


def consolidate(
    columns: Sequence[I32], diff: I64, keyed_by: Sequence[int] | None = None
) -> tuple[list[I32], I64]:
    """Each distinct binding once, with its summed diff, zeros dropped; sorted by binding.

    ``columns`` are the binding's columns (one per variable, dense ids >= 0) and ``diff`` the
    signed multiplicity of each row. Vectorized: the columns are packed into as few ``int64``
    sort keys as their ids' bit width allows (one key for up to five columns of 12-bit ids), then
    one sort and one segmented sum (for +1/-1 diffs, a sort of the keys alone).

    ``keyed_by``: columns that determine the others (an event's id determines its ends), which
    alone are sorted and compared; the bindings then come sorted by those columns.
    """
    n = int(diff.shape[0])
    if n == 0:
        return [c[:0] for c in columns], diff[:0]
    if not columns:
        total = diff.sum(keepdims=True)
        return [], total[total != 0]
    if keyed_by is not None and 0 < len(keyed_by) < len(columns):
        rows, sums = _groups([columns[k] for k in keyed_by], diff)
        return [c[rows] for c in columns], sums
    keys = sort_keys(columns)
    width = _bits(columns) * len(columns)
    if len(keys) == 1 and width < 63:
        first = int(diff[0])
        if first in (1, -1) and (diff == first).all():
            # One sign (an epoch of inserts or of deletes): the bindings are distinct as the
            # delta queries produce them; sorting them is all that is left to do.
            packed = sort_packed(keys[0], width)
            if (packed[1:] != packed[:-1]).all():
                return _unpack(columns, packed), np.full(n, first, diff.dtype)
        if (np.abs(diff) == 1).all():
            return _consolidate_units(columns, keys[0], diff, width)
    rows, sums = _groups(columns, diff, keys)
    return [c[rows] for c in columns], sums


def _groups(
    columns: Sequence[I32], diff: I64, keys: list[I64] | None = None
) -> tuple[npt.NDArray[np.integer], I64]:
    """The first row of each group of equal bindings of ``columns`` whose diffs do not sum to
    zero, in the bindings' order, and the sums (``keys``: :func:`sort_keys` of ``columns``)."""
    keys = sort_keys(columns) if keys is None else keys
    found = grouped(keys, _widths(columns), diff)
    if found is not None:  # compiled: one radix sort of the rows over every key, one pass
        return found
    order = np.argsort(keys[0], kind="stable") if len(keys) == 1 else np.lexsort(keys[::-1])
    sorted_keys = [k[order] for k in keys]
    start = np.ones(order.shape[0], np.bool_)
    start[1:] = np.logical_or.reduce([k[1:] != k[:-1] for k in sorted_keys])
    starts = np.flatnonzero(start)
    sums = np.add.reduceat(diff[order], starts)
    keep = sums != 0
    return order[starts[keep]], sums[keep]


def _consolidate_units(
    columns: Sequence[I32], key: I64, diff: I64, width: int
) -> tuple[list[I32], I64]:
    """:func:`consolidate` for diffs of +1 and -1 whose binding packs into one key with a bit
    to spare: the sign goes into that bit, so one ``sort`` (no ``argsort``, no gathers) groups
    the rows, and the columns come back out of the sorted keys (``width``: the key's bits)."""
    signed = sort_packed((key << 1) | (diff > 0), width + 1)
    bound = signed >> 1
    start = np.ones(signed.shape[0], np.bool_)
    np.not_equal(bound[1:], bound[:-1], out=start[1:])
    starts = np.flatnonzero(start)
    sizes = np.diff(np.append(starts, signed.shape[0]))
    plus = np.add.reduceat(signed & 1, starts)
    sums = 2 * plus - sizes
    keep = sums != 0
    return _unpack(columns, bound[starts[keep]]), sums[keep]


def _unpack(columns: Sequence[I32], packed: I64) -> list[I32]:
    """The columns of bindings packed into one key each by :func:`sort_keys`."""
    bits = _bits(columns)
    mask = (1 << bits) - 1
    last = len(columns) - 1
    return [((packed >> (bits * (last - k))) & mask).astype(c.dtype) for k, c in enumerate(columns)]


def _bits(columns: Sequence[I32]) -> int:
    """Bits per column in :func:`sort_keys`."""
    return max(1, max(int(c.max()) for c in columns).bit_length())


def _widths(columns: Sequence[I32]) -> list[int]:
    """The bits of each key of :func:`sort_keys`."""
    bits = _bits(columns)
    per_key = max(1, 63 // bits)
    return [bits * len(columns[lo : lo + per_key]) for lo in range(0, len(columns), per_key)]


def sort_keys(columns: Sequence[I32]) -> list[npt.NDArray[np.int64]]:
    """The columns packed, most significant first, into ``int64`` keys that sort like them."""
    bits = _bits(columns)
    per_key = max(1, 63 // bits)
    keys = []
    for lo in range(0, len(columns), per_key):
        key = columns[lo].astype(np.int64)
        for column in columns[lo + 1 : lo + per_key]:
            key = (key << bits) | column
        keys.append(key)
    return keys


def by_identity(
    columns: Sequence[I32], diff: I64, width: int, slots: Sequence[npt.NDArray[np.integer]]
) -> tuple[list[I32], I64]:
    """The deltas consolidated by what a binding is outside: its vertices (the first ``width``
    columns) and its events' ids (``slots``, one column per edge variable). An id deleted and
    inserted again within the epoch is a new event, so a binding that holds with the old event
    and with the new one comes as -1 and +1 of two internal bindings; they cancel (at most one
    of each per identity: the old and the new event are never alive at once)."""
    keys = [*columns[:width], *slots]
    order = np.lexsort(keys[::-1])
    n = order.shape[0]
    starts = np.ones(n, np.bool_)
    if n > 1:
        starts[1:] = np.logical_or.reduce([k[order][1:] != k[order][:-1] for k in keys])
    group = np.cumsum(starts) - 1
    sums = np.add.reduceat(diff[order], np.flatnonzero(starts)) if n else diff[:0]
    keep = np.sort(order[diff[order] == np.sign(sums)[group]])
    return [c[keep] for c in columns], diff[keep]
