"""The loops of the time index (:mod:`monitor.index.time_index`), compiled and in numpy.

Entries are ``(vertex, time, eid)`` triples, ordered by vertex, then time, then eid (an event's
time and ends never change, and an eid is one event: the order is total and stable). A level
holds such entries sorted, each with a diff; the compacted level is a CSR over vertices whose
segments hold ``(time, eid)`` sorted.

Each operation has a compiled loop (one pass, binary searches and merges over the sorted
arrays) and a numpy version, the fallback where numba is off and the reference the tests
compare with (:data:`~core.compiled.ENABLED` chooses).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, ENABLED, njit
from monitor.index.levels import I8, I32, I64, gather_ranges

F64 = npt.NDArray[np.float64]

#: Whether the compiled loops run (a call's ``compiled`` argument overrides it).
COMPILED = ENABLED
Offsets = npt.NDArray[np.signedinteger[Any]]


def entry_order(vertex: I32, times: F64, eids: I32) -> I64:
    """The permutation that sorts entries by ``(vertex, time, eid)``: each entry's rank by
    ``(time, eid)`` from a stable sort of the times in eid order (an epoch's times come in
    a few sorted runs, which a stable sort merges), then one sort of ``vertex << 32 | rank``
    (unique keys). A third of ``np.lexsort``'s time on an epoch's changes."""
    n = eids.shape[0]
    if n < 2:
        return np.arange(n, dtype=np.int64)
    by_eid = None if bool((eids[1:] > eids[:-1]).all()) else np.argsort(eids)
    by_time = np.argsort(times if by_eid is None else times[by_eid], kind="stable")
    if by_eid is not None:
        by_time = by_eid[by_time]
    rank = np.empty(n, np.int64)
    rank[by_time] = np.arange(n, dtype=np.int64)
    order: I64 = np.argsort((vertex.astype(np.int64) << 32) | rank)
    return order


def segment_bounds(times: F64, lo: I64, hi: I64, needles: F64, right: bool) -> I64:
    """Per row, the first position in ``times[lo:hi]`` (sorted) whose time is ``>= needle``
    (``> needle`` with ``right``): a binary search of every row at once, in whole-array
    halvings."""
    lo, hi = lo.copy(), hi.copy()
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = (lo + hi) >> 1
        at = times[np.where(open_, mid, 0)]  # a row still open has a non-empty range
        below = (at <= needles) if right else (at < needles)
        go_right = open_ & below
        lo = np.where(go_right, mid + 1, lo)
        hi = np.where(open_ & ~below, mid, hi)


def ranges(
    offsets: Offsets,
    times: F64,
    level_vertex: I32,
    level_times: F64,
    level_diff: I8,
    vertices: npt.NDArray[np.integer],
    lo: F64,
    hi: F64,
    *,
    compiled: bool | None = None,
) -> tuple[I64, I64, I64, I64, I64]:
    """Per query ``(vertices[i], lo[i], hi[i])``: the range ``[a, b)`` of the compacted level's
    entries of the vertex with a time in ``[lo, hi]``, ``[c, d)`` of the delta level's, and
    how many entries are present in them (``b - a`` and the diffs of ``[c, d)``). A query with
    a NaN bound, or a vertex past the CSR's, has empty ranges there."""
    compiled = COMPILED if compiled is None else compiled
    if compiled:
        order = np.argsort(vertices)
        return compiled_ranges(  # type: ignore[no-any-return]
            offsets, times, level_vertex, level_times, level_diff, order, vertices, lo, hi
        )
    keys = offsets.shape[0] - 1
    v = vertices.astype(np.int64)
    valid = (lo <= hi) & (v >= 0)
    inside = valid & (v < keys)
    safe = np.where(inside, v, 0)
    start = np.where(inside, offsets[safe], 0).astype(np.int64)
    end = np.where(inside, offsets[np.minimum(safe + 1, keys)], 0).astype(np.int64)
    a = segment_bounds(times, start, end, lo, right=False)
    b = segment_bounds(times, a, end, hi, right=True)
    first = np.searchsorted(level_vertex, v, side="left").astype(np.int64)
    last = np.searchsorted(level_vertex, v, side="right").astype(np.int64)
    first, last = np.where(valid, first, 0), np.where(valid, last, 0)
    c = segment_bounds(level_times, first, last, lo, right=False)
    d = segment_bounds(level_times, c, last, hi, right=True)
    running = np.zeros(level_diff.shape[0] + 1, np.int64)
    np.cumsum(level_diff, out=running[1:])
    return a, b, c, d, (b - a) + running[d] - running[c]


def propose(
    eids: I32,
    times: F64,
    level_eids: I32,
    level_times: F64,
    level_diff: I8,
    bounds: tuple[I64, I64, I64, I64] | tuple[I64, I64, I64, I64, I64],
    *,
    compiled: bool | None = None,
) -> tuple[I64, I32]:
    """``(owner, eid)`` of every entry present in each query's ranges: those of the compacted
    level the delta level does not remove, and those it adds; each query's together."""
    a, b, c, d = bounds[:4]
    compiled = COMPILED if compiled is None else compiled
    if compiled:
        owner, values = compiled_propose(
            eids, times, level_eids, level_times, level_diff, a, b, c, d
        )
        return owner, values
    owner, positions = gather_ranges(a, b)
    values = eids[positions]
    d_owner, d_positions = gather_ranges(c, d)
    removed = d_positions[level_diff[d_positions] < 0]
    if removed.shape[0]:
        keep = ~np.isin(values, level_eids[removed])
        owner, values = owner[keep], values[keep]
    added = d_positions[level_diff[d_positions] > 0]
    if added.shape[0]:
        owner = np.concatenate([owner, d_owner[level_diff[d_positions] > 0]])
        values = np.concatenate([values, level_eids[added]])
        order = np.argsort(owner, kind="stable")
        owner, values = owner[order], values[order]
    return owner, values.astype(np.int32)


def merge_levels(
    lower: tuple[I32, F64, I32, I8],
    upper: tuple[I32, F64, I32, I8],
    *,
    compiled: bool | None = None,
) -> tuple[I32, F64, I32, I8]:
    """The level equal to applying ``upper`` on top of ``lower``: entries of both in order,
    diffs of an entry in both summed, zeros dropped."""
    compiled = COMPILED if compiled is None else compiled
    if compiled:
        v, t, e, diff = compiled_merge_levels(*lower, *upper)
        return v, t, e, diff
    v, t, e, diff = (np.concatenate([x, y]) for x, y in zip(lower, upper, strict=True))
    order = np.lexsort((e, t, v))
    v, t, e, diff = v[order], t[order], e[order], diff[order]
    if not v.shape[0]:
        return v, t, e, diff
    starts = np.flatnonzero(
        np.concatenate([[True], (v[1:] != v[:-1]) | (t[1:] != t[:-1]) | (e[1:] != e[:-1])])
    )
    summed = np.add.reduceat(diff.astype(np.int64), starts)
    kept = starts[summed != 0]
    return v[kept], t[kept], e[kept], summed[summed != 0].astype(np.int8)


def compact(
    offsets: Offsets,
    times: F64,
    eids: I32,
    level: tuple[I32, F64, I32, I8],
    keys: int,
    *,
    compiled: bool | None = None,
) -> tuple[I64, F64, I32]:
    """The compacted level with the delta level merged in, over ``keys`` vertices."""
    compiled = COMPILED if compiled is None else compiled
    if compiled:
        new_offsets, new_times, new_eids = compiled_compact(offsets, times, eids, *level, keys)
        return new_offsets, new_times, new_eids
    counts = np.diff(offsets)
    vertex = np.repeat(np.arange(counts.shape[0], dtype=np.int32), counts)
    lv, lt, le, ld = level
    keep = ~np.isin(eids, le[ld < 0])
    vertex = np.concatenate([vertex[keep], lv[ld > 0]])
    t = np.concatenate([times[keep], lt[ld > 0]])
    e = np.concatenate([eids[keep], le[ld > 0]])
    order = np.lexsort((e, t, vertex))
    new_offsets = np.zeros(keys + 1, np.int64)
    np.cumsum(np.bincount(vertex, minlength=keys), out=new_offsets[1:])
    return new_offsets, t[order], e[order].astype(np.int32)


def warm() -> None:
    """Load (or compile) the kernels for the types the index passes, before the first epoch."""
    if not ENABLED:
        return
    v, t, e, d = np.zeros(1, np.int32), np.zeros(1), np.zeros(1, np.int32), np.ones(1, np.int8)
    offsets = np.array([0, 1], np.int64)
    bounds = ranges(offsets, t, v, t, d, v, t, t)
    propose(e, t, e, t, d, bounds)
    compact(offsets, t, e, (v, t, e, d), 1)
    entry_order(v, t, e)
    merge_levels((v, t, e, d), (v, t, e, d))


if AVAILABLE:
    from monitor.index.levels import gallop

    @njit(cache=True, nogil=True, inline="always")
    def _entry_less(v1, t1, e1, v2, t2, e2):  # type: ignore[no-untyped-def]
        """Whether entry 1 comes before entry 2."""
        if v1 != v2:
            return v1 < v2
        if t1 != t2:
            return t1 < t2
        return e1 < e2

    @njit(cache=True, nogil=True, inline="always")
    def _time_bound(times, lo, hi, needle, right):  # type: ignore[no-untyped-def]
        while lo < hi:
            mid = (lo + hi) >> 1
            if times[mid] < needle or (right and times[mid] == needle):
                lo = mid + 1
            else:
                hi = mid
        return lo

    @njit(cache=True, nogil=True, inline="always")
    def _entry_bound(vertex, times, lo, hi, v, needle, right):  # type: ignore[no-untyped-def]
        while lo < hi:
            mid = (lo + hi) >> 1
            w = vertex[mid]
            if w < v or (w == v and (times[mid] < needle or (right and times[mid] == needle))):
                lo = mid + 1
            else:
                hi = mid
        return lo

    @njit(cache=True, nogil=True)
    def compiled_ranges(offsets, times, level_vertex, level_times, level_diff, order, at, lo, hi):  # type: ignore[no-untyped-def]
        """:func:`ranges` (``at``: the queries' vertices), the queries taken in ``order`` (by
        vertex): a vertex's entries in the level are found galloping on from the previous
        vertex's (the level is walked once), its CSR segment's offsets are read in ascending
        order; then two binary searches by time in each, and the count."""
        n = at.shape[0]
        keys = offsets.shape[0] - 1
        m = level_vertex.shape[0]
        a = np.zeros(n, np.int64)
        b = np.zeros(n, np.int64)
        c = np.zeros(n, np.int64)
        d = np.zeros(n, np.int64)
        counts = np.zeros(n, np.int64)
        previous = np.int64(-1)
        first = last = 0
        for j in range(n):
            i = order[j]
            v = np.int64(at[i])
            low, high = lo[i], hi[i]
            if not low <= high or v < 0:
                continue
            if v < keys:
                start, end = np.int64(offsets[v]), np.int64(offsets[v + 1])
                a[i] = _time_bound(times, start, end, low, False)
                b[i] = _time_bound(times, a[i], end, high, True)
            if m:
                if v != previous:
                    first = gallop(level_vertex, last if v > previous else 0, m, v)
                    last = gallop(level_vertex, first, m, v + 1)
                    previous = v
                c[i] = _time_bound(level_times, first, last, low, False)
                d[i] = _time_bound(level_times, c[i], last, high, True)
            count = b[i] - a[i]
            for q in range(c[i], d[i]):
                count += level_diff[q]
            counts[i] = count
        return a, b, c, d, counts

    @njit(cache=True, nogil=True)
    def compiled_propose(eids, times, level_eids, level_times, level_diff, a, b, c, d):  # type: ignore[no-untyped-def]
        """:func:`propose`: per query one merge of its compacted range with its level range
        by ``(time, eid)``: an entry the level removes is skipped, one it adds is taken."""
        n = a.shape[0]
        total = 0
        for i in range(n):
            total += (b[i] - a[i]) + (d[i] - c[i])
        owner = np.empty(total, np.int64)
        values = np.empty(total, np.int32)
        k = 0
        for i in range(n):
            p, q = a[i], c[i]
            while p < b[i] or q < d[i]:
                if q >= d[i] or (
                    p < b[i]
                    and (
                        times[p] < level_times[q]
                        or (times[p] == level_times[q] and eids[p] < level_eids[q])
                    )
                ):
                    owner[k] = i
                    values[k] = eids[p]
                    k += 1
                    p += 1
                    continue
                same = p < b[i] and times[p] == level_times[q] and eids[p] == level_eids[q]
                if level_diff[q] > 0:
                    owner[k] = i
                    values[k] = level_eids[q]
                    k += 1
                q += 1
                if same:
                    p += 1
        return owner[:k], values[:k]

    @njit(cache=True, nogil=True)
    def compiled_merge_levels(v1, t1, e1, d1, v2, t2, e2, d2):  # type: ignore[no-untyped-def]
        """:func:`merge_levels` in one two-way merge."""
        n, m = v1.shape[0], v2.shape[0]
        v = np.empty(n + m, np.int32)
        t = np.empty(n + m, np.float64)
        e = np.empty(n + m, np.int32)
        diff = np.empty(n + m, np.int8)
        i = j = k = 0
        while i < n or j < m:
            if j >= m or (i < n and _entry_less(v1[i], t1[i], e1[i], v2[j], t2[j], e2[j])):
                v[k], t[k], e[k], diff[k] = v1[i], t1[i], e1[i], d1[i]
                i += 1
                k += 1
                continue
            s = d2[j]
            if i < n and v1[i] == v2[j] and t1[i] == t2[j] and e1[i] == e2[j]:
                s += d1[i]
                i += 1
            if s != 0:
                v[k], t[k], e[k], diff[k] = v2[j], t2[j], e2[j], s
                k += 1
            j += 1
        return v[:k], t[:k], e[:k], diff[:k]

    @njit(cache=True, nogil=True)
    def compiled_compact(offsets, times, eids, lv, lt, le, ld, keys):  # type: ignore[no-untyped-def]
        """:func:`compact`: the segments of vertices the level does not touch copied as
        blocks (their offsets shifted), each touched one merged with its level entries."""
        old_keys = offsets.shape[0] - 1
        stored = times.shape[0]
        total = stored
        for q in range(ld.shape[0]):
            total += ld[q]
        new_offsets = np.empty(keys + 1, np.int64)
        new_times = np.empty(total, np.float64)
        new_eids = np.empty(total, np.int32)
        new_offsets[0] = 0
        k = np.int64(0)  # next position written
        v = 0  # next vertex whose offsets are not written
        q = 0
        m = lv.shape[0]
        while v < keys:
            touched = lv[q] if q < m else keys
            # vertices v .. touched-1: their segments as one block, offsets shifted
            start = np.int64(offsets[min(v, old_keys)])
            end = np.int64(offsets[min(touched, old_keys)])
            shift = k - start
            new_times[k : k + end - start] = times[start:end]
            new_eids[k : k + end - start] = eids[start:end]
            inside = min(touched, old_keys)
            if inside > v:  # a slice: one vectorized loop
                new_offsets[v + 1 : inside + 1] = offsets[v + 1 : inside + 1] + shift
            new_offsets[max(inside, v) + 1 : touched + 1] = end + shift
            k += end - start
            if touched == keys:
                break
            p = end
            stop = np.int64(offsets[touched + 1]) if touched < old_keys else p
            while p < stop or (q < m and lv[q] == touched):
                level_here = q < m and lv[q] == touched
                if not level_here or (
                    p < stop and (times[p] < lt[q] or (times[p] == lt[q] and eids[p] < le[q]))
                ):
                    new_times[k] = times[p]
                    new_eids[k] = eids[p]
                    k += 1
                    p += 1
                    continue
                if p < stop and times[p] == lt[q] and eids[p] == le[q]:
                    p += 1  # removed (a level entry equal to a stored one is its removal)
                elif ld[q] > 0:
                    new_times[k] = lt[q]
                    new_eids[k] = le[q]
                    k += 1
                q += 1
            new_offsets[touched + 1] = k
            v = touched + 1
        return new_offsets, new_times[:k], new_eids[:k]

else:  # pragma: no cover - numba is a dependency
    compiled_ranges = compiled_propose = None
    compiled_merge_levels = compiled_compact = None
