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

Consecutive prefixes often test the same key of the other side (a hub's neighbours, for the
prefixes a parent extended): 122 prefixes' proposals a run on 800k events. Where a run
proposes at least a quarter as many values as its key holds, the key's values go into a
bitmap once (its CSR segment, then its level's additions set and removals cleared), each
proposal is one bit's test instead of a search, and the bits are cleared when the run ends:
13% of ``round_trip{2,6}``'s time on 800k events, 8.1 s instead of 9.3 on 2M.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, njit
from monitor.index.levels import I32, I64, VALUE_BITS, VALUE_MASK, Level

#: The largest value a run's bitmap holds (2**26 bits: 8 MiB); a key with larger values is
#: searched instead.
BITMAP_LIMIT = 1 << 26

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

    @njit(cache=True, nogil=True, inline="always")
    def _mark(bits, targets, at, end, pairs, diff, level_at, level_end, on):  # type: ignore[no-untyped-def]
        """Set (``on``) the bits of a key's current values (its CSR segment, then its level's
        pairs: a removal clears, an addition sets), or clear every bit they touched."""
        mask = np.int64(VALUE_MASK)
        one = np.uint64(1)
        for t in range(at, end):
            v = targets[t]
            if on:
                bits[v >> 6] |= one << np.uint64(v & 63)
            else:
                bits[v >> 6] = np.uint64(0)
        for q in range(level_at, level_end):
            v = np.int64(pairs[q] & mask)
            if not on:
                bits[v >> 6] = np.uint64(0)
            elif diff[q] > 0:
                bits[v >> 6] |= one << np.uint64(v & 63)
            else:
                bits[v >> 6] &= ~(one << np.uint64(v & 63))

    @njit(cache=True, nogil=True)
    def _intersect(  # type: ignore[no-untyped-def]
        a_offsets, a_targets, a_pairs, a_diff, a_keys, a_lo, a_hi,
        b_offsets, b_targets, b_pairs, b_diff, b_keys, b_lo, b_hi,
        from_b,
    ):  # fmt: skip
        n = a_keys.shape[0]
        sizes = np.empty(n, np.int64)  # each prefix's proposals (an upper bound)
        for i in range(n):
            if from_b[i]:
                sizes[i] = b_offsets[b_keys[i] + 1] - b_offsets[b_keys[i]] + b_hi[i] - b_lo[i]
            else:
                sizes[i] = a_offsets[a_keys[i] + 1] - a_offsets[a_keys[i]] + a_hi[i] - a_lo[i]
        rows = np.empty(sizes.sum(), np.int64)
        values = np.empty(sizes.sum(), np.int32)
        mask = np.int64(VALUE_MASK)
        out = 0
        bits = np.zeros(1, np.uint64)  # the bitmap of a run's other values, all clear between
        run_end = 0
        marked = False
        top = np.int64(-1)
        c_run, l_run, d_run = a_targets, a_pairs, a_diff  # (the run's other side, once marked)
        run_at = run_stop = run_lat = run_lend = np.int64(0)
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
            if i >= run_end:
                # A run: the prefixes after this one that test the same key of the same side.
                # Its values go into a bitmap where the run proposes enough to pay for it.
                if marked:
                    _mark(bits, c_run, run_at, run_stop, l_run, d_run, run_lat, run_lend, False)
                    marked = False
                run_end, proposed = i + 1, sizes[i]
                while run_end < n and from_b[run_end] == from_b[i]:
                    other = a_keys[run_end] if from_b[i] else b_keys[run_end]
                    if other != key:
                        break
                    proposed += sizes[run_end]
                    run_end += 1
                size = c_end - at + level_end - level_at
                top = np.int64(c_targets[c_end - 1]) if c_end > at else np.int64(-1)
                for q in range(level_at, level_end):
                    top = max(top, np.int64(c_pairs[q] & mask))
                if run_end - i > 1 and proposed * 4 >= size and top < BITMAP_LIMIT:
                    words = (top >> 6) + 1
                    if words > bits.shape[0]:  # (a larger one: the old is clear)
                        bits = np.zeros(words + bits.shape[0], np.uint64)
                    c_run, l_run, d_run = c_targets, c_pairs, c_diff
                    run_at, run_stop = np.int64(at), np.int64(c_end)
                    run_lat, run_lend = np.int64(level_at), np.int64(level_end)
                    _mark(bits, c_run, run_at, run_stop, l_run, d_run, run_lat, run_lend, True)
                    marked = True
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
                if marked:
                    v = np.int64(value)
                    present = v <= top and (bits[v >> 6] >> np.uint64(v & 63)) & np.uint64(1) != 0
                else:
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
        a_offsets, a_targets, a_level.pairs, a_level.diff, _wide(a_keys), a_lo, a_hi,
        b_offsets, b_targets, b_level.pairs, b_level.diff, _wide(b_keys), b_lo, b_hi,
        from_b,
    )  # fmt: skip
    return rows, values


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
