"""Consolidation: sum the diffs of equal bindings and drop the ones that net to zero."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from monitor.index.levels import I32, I64


def consolidate(columns: Sequence[I32], diff: I64) -> tuple[list[I32], I64]:
    """Each distinct binding once, with its summed diff, zeros dropped; sorted by binding.

    ``columns`` are the binding's columns (one per variable, dense ids >= 0) and ``diff`` the
    signed multiplicity of each row. Vectorized: the columns are packed into as few ``int64``
    sort keys as their ids' bit width allows (one key for up to five columns of 12-bit ids), then
    one sort and one segmented sum.
    """
    n = int(diff.shape[0])
    if n == 0:
        return [c[:0] for c in columns], diff[:0]
    if not columns:
        total = diff.sum(keepdims=True)
        return [], total[total != 0]
    keys = sort_keys(columns)
    order = np.argsort(keys[0], kind="stable") if len(keys) == 1 else np.lexsort(keys[::-1])
    sorted_keys = [k[order] for k in keys]
    start = np.ones(n, np.bool_)
    start[1:] = np.logical_or.reduce([k[1:] != k[:-1] for k in sorted_keys])
    starts = np.flatnonzero(start)
    sums = np.add.reduceat(diff[order], starts)
    keep = sums != 0
    rows = order[starts[keep]]
    return [c[rows] for c in columns], sums[keep]


def sort_keys(columns: Sequence[I32]) -> list[npt.NDArray[np.int64]]:
    """The columns packed, most significant first, into ``int64`` keys that sort like them."""
    top = max(int(c.max()) for c in columns)
    bits = max(1, top.bit_length())
    per_key = max(1, 63 // bits)
    keys = []
    for lo in range(0, len(columns), per_key):
        key = columns[lo].astype(np.int64)
        for column in columns[lo + 1 : lo + per_key]:
            key = (key << bits) | column
        keys.append(key)
    return keys
