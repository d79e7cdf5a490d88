"""Consolidation: sum the diffs of equal bindings and drop the ones that net to zero."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from monitor.index.levels import I32, I64


def consolidate(columns: Sequence[I32], diff: I64) -> tuple[list[I32], I64]:
    """Each distinct binding once, with its summed diff, zeros dropped; sorted by binding.

    ``columns`` are the binding's columns (one per variable) and ``diff`` the signed
    multiplicity of each row. Vectorized: one lexicographic sort and one segmented sum.
    """
    n = int(diff.shape[0])
    if n == 0:
        return [c[:0] for c in columns], diff[:0]
    order = np.lexsort(tuple(reversed(columns))) if columns else np.arange(n)
    cols = [c[order] for c in columns]
    diff = diff[order]
    start = np.ones(n, np.bool_)
    if columns:
        start[1:] = np.logical_or.reduce([c[1:] != c[:-1] for c in cols])
    else:
        start[1:] = False
    starts = np.flatnonzero(start)
    sums = np.add.reduceat(diff, starts)
    keep = sums != 0
    rows = starts[keep]
    return [c[rows] for c in cols], sums[keep]
