"""The intersection of two adjacencies per prefix, in one compiled pass: propose and intersect
fused.

A stage that binds a vertex from two adjacencies (the vertex that closes a ring: ``p_v1`` in
``fwd a`` and in ``rev p_v2``) proposes every value of the smaller one for each prefix, then
tests each in the other (:mod:`monitor.index.kernels`). On ``bench.typologies``' round trips
that is 18 proposals a prefix of which one in sixteen is kept: the proposals' rows and values
are written, read back by the comparisons, copied, and read again by the intersection.
:func:`intersect` walks each prefix's proposals (its CSR segment merged with its pairs in the
view's level, as ``compiled_propose`` merges them) and tests each in the other adjacency as it
goes (galloping on in the other's segment and level: the proposals come in order), writing the
values both hold only. The values are the same, in the order of the prefixes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, njit
from monitor.index.levels import I8, I32, I64, VALUE_BITS, VALUE_MASK, Level

if AVAILABLE:
    from monitor.index.levels import gallop

    @njit(cache=True, nogil=True, inline="always")
    def _held(targets, pairs, diff, key, at, end, level_at, level_end, value):  # type: ignore[no-untyped-def]
        """Whether the other adjacency holds ``(key, value)``, and where its searches ended
        (the next value of the key is larger: they go on from there)."""
        at = gallop(targets, at, end, value)
        present = at < end and targets[at] == value
        if level_at < level_end:
            packed = (np.int64(key) << VALUE_BITS) | np.int64(value)
            level_at = gallop(pairs, level_at, level_end, packed)
            if level_at < level_end and pairs[level_at] == packed:
                present = diff[level_at] > 0
        return present, at, level_at

    @njit(cache=True, nogil=True)
    def _intersect(  # type: ignore[no-untyped-def]
        a_offsets, a_targets, a_pairs, a_diff, a_keys, a_lo, a_hi,
        b_offsets, b_targets, b_pairs, b_diff, b_keys, b_lo, b_hi,
        from_b,
    ):  # fmt: skip
        n = a_keys.shape[0]
        capacity = 0
        for i in range(n):
            if from_b[i]:
                capacity += b_offsets[b_keys[i] + 1] - b_offsets[b_keys[i]] + b_hi[i] - b_lo[i]
            else:
                capacity += a_offsets[a_keys[i] + 1] - a_offsets[a_keys[i]] + a_hi[i] - a_lo[i]
        rows = np.empty(capacity, np.int64)
        values = np.empty(capacity, np.int32)
        mask = np.int64(VALUE_MASK)
        out = 0
        for i in range(n):
            if from_b[i]:
                p_targets, p_pairs, p_diff = b_targets, b_pairs, b_diff
                a, end, p, last = b_offsets[b_keys[i]], b_offsets[b_keys[i] + 1], b_lo[i], b_hi[i]
                c_targets, c_pairs, c_diff, key = a_targets, a_pairs, a_diff, a_keys[i]
                at, c_end = a_offsets[key], a_offsets[key + 1]
                level_at, level_end = a_lo[i], a_hi[i]
            else:
                p_targets, p_pairs, p_diff = a_targets, a_pairs, a_diff
                a, end, p, last = a_offsets[a_keys[i]], a_offsets[a_keys[i] + 1], a_lo[i], a_hi[i]
                c_targets, c_pairs, c_diff, key = b_targets, b_pairs, b_diff, b_keys[i]
                at, c_end = b_offsets[key], b_offsets[key + 1]
                level_at, level_end = b_lo[i], b_hi[i]
            while a < end or p < last:
                if p < last:
                    pending = np.int32(p_pairs[p] & mask)
                    if a < end and p_targets[a] < pending:
                        value = p_targets[a]
                        a += 1
                    elif a < end and p_targets[a] == pending:
                        a += 1  # present in the CSR: the level removes it (-1)
                        p += 1
                        continue
                    else:
                        p += 1
                        if p_diff[p - 1] <= 0:
                            continue
                        value = pending
                else:
                    value = p_targets[a]
                    a += 1
                present, at, level_at = _held(
                    c_targets, c_pairs, c_diff, key, at, c_end, level_at, level_end, value
                )
                if present:
                    rows[out] = i
                    values[out] = value
                    out += 1
        return rows[:out].copy(), values[:out].copy()


def fusable(a_offsets: npt.NDArray[np.integer], b_offsets: npt.NDArray[np.integer]) -> bool:
    """Whether :func:`intersect` takes two adjacencies of these CSR offsets: narrow ones (below
    2**30 pairs), so that one compiled signature serves (the wide take the two steps)."""
    return AVAILABLE and a_offsets.dtype == np.int32 and b_offsets.dtype == np.int32


def intersect(
    a: tuple[npt.NDArray[np.integer], I32, Level],
    a_probe: tuple[npt.NDArray[np.integer], I64, I64],
    b: tuple[npt.NDArray[np.integer], I32, Level],
    b_probe: tuple[npt.NDArray[np.integer], I64, I64],
    from_b: npt.NDArray[np.bool_],
) -> tuple[I64, I32]:
    """The values both adjacencies hold, per prefix: ``(rows, values)``, the prefixes in order
    and each one's values ascending. ``a`` and ``b``: each adjacency's CSR offsets, targets
    and delta level; their probes: each prefix's key and the range of its pairs in the level;
    ``from_b``: the prefixes whose proposals come from ``b`` (its count is the smaller)."""
    (a_offsets, a_targets, a_level), (b_offsets, b_targets, b_level) = a, b
    (a_keys, a_lo, a_hi), (b_keys, b_lo, b_hi) = a_probe, b_probe
    rows: I64
    values: I32
    rows, values = _intersect(
        a_offsets, a_targets, a_level.pairs, _diff(a_level), _wide(a_keys), a_lo, a_hi,
        b_offsets, b_targets, b_level.pairs, _diff(b_level), _wide(b_keys), b_lo, b_hi,
        from_b,
    )  # fmt: skip
    return rows, values


def _diff(level: Level) -> I8:
    return level.diff


def _wide(keys: npt.NDArray[np.integer]) -> I64:
    return keys.astype(np.int64, copy=False)


def warm() -> None:
    """Load (or compile, the first time on a machine) :func:`intersect`'s loop."""
    if not AVAILABLE:
        return
    offsets, targets = np.zeros(2, np.int32), np.zeros(0, np.int32)
    level = Level.of(np.zeros(0, np.int64), np.zeros(0, np.int8))
    probe = (np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64))
    intersect(
        (offsets, targets, level), probe, (offsets, targets, level), probe, np.ones(1, np.bool_)
    )
