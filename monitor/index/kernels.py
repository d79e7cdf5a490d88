"""Compiled kernels for the engine's hottest loops: the intersection and the proposal.

``contains`` answers, for every candidate ``(key, value)`` of a stage, whether an adjacency
holds it: a binary search in the key's sorted CSR segment, then, where the adjacency has a delta
level on top, a binary search for the packed pair among the level's pairs, whose sign decides
(``+1`` added since the compaction, ``-1`` removed). It is the paper's ``intersect``. A key's
candidates come in order (a prefix's proposals are sorted), so the search for the next one
gallops on from where the previous one ended: a hub's segment is walked about once, not
searched from its start for every candidate.

``compiled_propose`` lists every value of every key (the paper's ``propose``): per key, one
merge of its CSR segment with its pairs in the level, which drops the removed values and adds
the new ones in order, instead of a lookup of every proposed pair among the level's pairs.

With numba installed (a dependency of the package), this is one compiled loop over the
candidates: no intermediate arrays, one pass, about 3x faster than the whole-array binary
lifting of :func:`numpy_contains` on ego-Facebook 4-cliques. :func:`numpy_contains` stays as the
reference implementation (tests compare both on random inputs) and as the fallback where numba
cannot be imported or ``SGM_NUMBA=0`` says not to use it; so does ``AdjacencyView``'s numpy
proposal for ``compiled_propose``.

Compiled code is cached on disk (numba's ``cache=True``: beside this file, or under
``NUMBA_CACHE_DIR``; the container image sets it to ``/tmp/numba``), so only the first run on a
machine pays the compilation (about a second).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, ENABLED, njit
from monitor.index.levels import I8, I32, I64, VALUE_BITS, VALUE_MASK, pack

if AVAILABLE:
    from monitor.index.levels import compiled_key_ranges, gallop, lower_bound

Offsets = npt.NDArray[np.signedinteger[Any]]
"""CSR offsets: ``int32`` while they fit (half the bytes per key), else ``int64``."""

Contains = Callable[
    [Offsets, I32, I64, I8, npt.NDArray[np.integer], npt.NDArray[np.integer]], npt.NDArray[np.bool_]
]


def numpy_contains(
    offsets: Offsets,
    targets: I32,
    level_pairs: I64,
    level_diff: I8,
    keys: npt.NDArray[np.integer],
    values: npt.NDArray[np.integer],
) -> npt.NDArray[np.bool_]:
    """Whether each ``(keys[i], values[i])`` is present: CSR, then the level's sign."""
    found = segment_contains(offsets, targets, keys, values)
    if level_pairs.shape[0]:
        packed = pack(keys, values)
        pos = np.minimum(np.searchsorted(level_pairs, packed), level_pairs.shape[0] - 1)
        hit = level_pairs[pos] == packed
        found = np.where(hit, level_diff[pos] > 0, found)
    return found


def segment_contains(
    offsets: Offsets, targets: I32, keys: npt.NDArray[np.integer], values: npt.NDArray[np.integer]
) -> npt.NDArray[np.bool_]:
    """Whether each value is in its key's sorted CSR segment: all binary searches at once.

    Binary lifting: ``pos`` starts at the segment's first position and moves forward by
    decreasing powers of two while the target there is still ``<= value``; after
    ``log2(longest segment)`` whole-array steps it rests on the last target ``<= value``.
    """
    lo = offsets[keys].astype(np.int64)
    end = offsets[keys + 1].astype(np.int64)
    if not lo.shape[0]:
        return np.zeros(0, np.bool_)
    values = values.astype(np.int32, copy=False)
    top = max(int(targets.shape[0]) - 1, 0)
    pos = lo.copy()
    for shift in range(int((end - lo).max()).bit_length() - 1, -1, -1):
        candidate = pos + (1 << shift)
        ok = candidate < end
        ok &= targets[np.minimum(candidate, top)] <= values
        pos = np.where(ok, candidate, pos)
    inside = lo < end
    found = np.zeros(pos.shape[0], np.bool_)
    found[inside] = targets[pos[inside]] == values[inside]
    return found


COMPILED = AVAILABLE

if COMPILED:

    @njit(cache=True, nogil=True)
    def compiled_contains(offsets, targets, level_pairs, level_diff, keys, values, lo, hi):  # type: ignore[no-untyped-def]
        """:func:`numpy_contains` as one loop: per candidate a binary search in its key's CSR
        segment and, when the level holds pairs of the key (``lo[i] < hi[i]``: the range of
        its pairs, as :meth:`~monitor.index.levels.Level.key_ranges` gives it: a stage's probe
        has it already), one among those."""
        n = keys.shape[0]
        out = np.zeros(n, np.bool_)
        key_before = -1
        value_before = at_before = 0  # the previous candidate and its position in the CSR
        for i in range(n):
            key = keys[i]
            value = values[i]
            first, last = lo[i], hi[i]
            end = offsets[key + 1]
            if key == key_before and value >= value_before:
                # The key's next candidate, in order: gallop on from the last position (a
                # proposal of a prefix comes sorted, so a hub's segment is walked once).
                at = gallop(targets, at_before, end, value)
            else:
                at = lower_bound(targets, offsets[key], end, value)
            key_before, value_before, at_before = key, value, at
            present = at < end and targets[at] == value
            if first < last:
                packed = (np.int64(key) << VALUE_BITS) | np.int64(value)
                at = lower_bound(level_pairs, first, last, packed)
                if at < last and level_pairs[at] == packed:
                    present = level_diff[at] > 0
            out[i] = present
        return out

    @njit(cache=True, nogil=True)
    def compiled_count(offsets, keys, running, lo, hi, level):  # type: ignore[no-untyped-def]
        """``AdjacencyView.count`` in one pass: each key's CSR segment's length, plus its
        pairs' net change in the level (``running[hi] - running[lo]``) where ``level``."""
        out = np.empty(keys.shape[0], np.int64)
        for i in range(keys.shape[0]):
            count = np.int64(offsets[keys[i] + 1]) - np.int64(offsets[keys[i]])
            if level:
                count += running[hi[i]] - running[lo[i]]
            out[i] = count
        return out

    @njit(cache=True, nogil=True)
    def compiled_propose(offsets, targets, level_pairs, level_diff, keys, lo, hi):  # type: ignore[no-untyped-def]
        """All values of every key, as ``AdjacencyView.propose`` gives them (its numpy path is
        the reference): per key, one merge of its sorted CSR segment with its sorted pairs in
        the level (``[lo, hi)``), a ``-1`` pair dropping the value, a ``+1`` pair adding it;
        values in order within each key. Two passes: sizes, then values."""
        n = keys.shape[0]
        starts = np.empty(n + 1, np.int64)
        starts[0] = 0
        for i in range(n):
            size = np.int64(offsets[keys[i] + 1] - offsets[keys[i]])
            for p in range(lo[i], hi[i]):
                size += level_diff[p]
            starts[i + 1] = starts[i] + size
        owner = np.empty(starts[n], np.int64)
        values = np.empty(starts[n], np.int32)
        mask = np.int64(VALUE_MASK)
        for i in range(n):
            out = starts[i]
            a, end = offsets[keys[i]], offsets[keys[i] + 1]
            p, last = lo[i], hi[i]
            while p < last:
                pending = np.int32(level_pairs[p] & mask)
                while a < end and targets[a] < pending:
                    owner[out] = i
                    values[out] = targets[a]
                    out += 1
                    a += 1
                if a < end and targets[a] == pending:
                    a += 1  # present in the CSR: the level removes it (-1)
                elif level_diff[p] > 0:
                    owner[out] = i
                    values[out] = pending
                    out += 1
                p += 1
            while a < end:
                owner[out] = i
                values[out] = targets[a]
                out += 1
                a += 1
            if out != starts[i + 1]:  # only if a +1 pair were in the CSR or a -1 pair not
                raise AssertionError("a level pair contradicts the compacted adjacency")
        return owner, values


if COMPILED:

    @njit(cache=True, nogil=True)
    def compiled_compact(offsets, targets, level_pairs, level_diff, new_offsets, new_targets):  # type: ignore[no-untyped-def]
        """Compaction in one pass over the keys: each key's CSR segment merged with its pairs
        in the level (sorted by key, walked once) straight into ``new_offsets`` and
        ``new_targets`` (sized exactly by the caller: the level's net change), as
        :func:`compiled_propose` merges one key, without an owner per value. The merge loop
        is written out in both: a shared inlined helper cost the proposal 8-10% (measured)."""
        keys = new_offsets.shape[0] - 1
        size = level_pairs.shape[0]
        mask = np.int64(VALUE_MASK)
        out = 0
        p = 0
        for key in range(keys):
            new_offsets[key] = out
            a, end = offsets[key], offsets[key + 1]
            while p < size and (level_pairs[p] >> VALUE_BITS) == key:
                pending = np.int32(level_pairs[p] & mask)
                while a < end and targets[a] < pending:
                    new_targets[out] = targets[a]
                    out += 1
                    a += 1
                if a < end and targets[a] == pending:
                    a += 1  # present in the CSR: the level removes it (-1)
                elif level_diff[p] > 0:
                    new_targets[out] = pending
                    out += 1
                p += 1
            while a < end:
                new_targets[out] = targets[a]
                out += 1
                a += 1
        new_offsets[keys] = out
        if out != new_targets.shape[0] or p != size:
            raise AssertionError("a level pair contradicts the compacted adjacency")


def searching_contains(
    offsets: Offsets,
    targets: I32,
    level_pairs: I64,
    level_diff: I8,
    keys: npt.NDArray[np.integer],
    values: npt.NDArray[np.integer],
) -> npt.NDArray[np.bool_]:
    """:func:`compiled_contains`, the level's range of each key searched first."""
    lo, hi = compiled_key_ranges(level_pairs, keys)
    found: npt.NDArray[np.bool_] = compiled_contains(
        offsets, targets, level_pairs, level_diff, keys, values, lo, hi
    )
    return found


def _choose() -> tuple[Contains, str]:
    if not ENABLED:
        return numpy_contains, "numpy"
    return searching_contains, "numba"


contains, KERNELS = _choose()
"""The membership kernel in use, and which (``numba`` or ``numpy``)."""


_warm = False


def warm() -> None:
    """Load (or compile, the first time on a machine) the kernel for the key and value types
    the engine passes, so that the first epoch does not pay for it. Once per process."""
    global _warm
    if _warm:
        return
    _warm = True
    targets = np.zeros(0, np.int32)
    level_pairs, level_diff = np.zeros(0, np.int64), np.zeros(0, np.int8)
    values = np.zeros(1, np.int32)
    for offsets in (np.zeros(2, np.int32), np.zeros(2, np.int64)):  # narrow and wide CSRs
        for keys in (np.zeros(1, np.int32), np.zeros(1, np.int64)):
            contains(offsets, targets, level_pairs, level_diff, keys, values)
            if ENABLED:
                ranges = np.zeros(1, np.int64)
                compiled_propose(offsets, targets, level_pairs, level_diff, keys, ranges, ranges)
                compiled_count(offsets, keys, ranges, ranges, ranges, True)
        if ENABLED:
            for new_offsets in (np.zeros(2, np.int32), np.zeros(2, np.int64)):
                compiled_compact(offsets, targets, level_pairs, level_diff, new_offsets, targets)
