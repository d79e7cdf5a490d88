"""The loops of the time index (:mod:`monitor.index.time_index`), compiled and in numpy.

Entries are ``(vertex, time, eid)`` triples, ordered by vertex, then time, then eid (an event's
time and ends never change, and an eid is one event: the order is total and stable). A level
holds such entries sorted, each with a diff; the compacted level (the *base*) is one too, all
of its diffs ``+1``, so that compacting is one merge, linear in the entries (a CSR over the
vertices was also linear in them: a million accounts, 7-12 ms a compaction against 1-2).

Each operation has a compiled loop (one pass, binary searches and merges over the sorted
arrays) and a numpy version, the fallback where numba is off and the reference the tests
compare with (:data:`~core.compiled.ENABLED` chooses).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, ENABLED, njit
from monitor.index.levels import I8, I32, I64, gather_ranges

F64 = npt.NDArray[np.float64]

#: Whether the compiled loops run (a call's ``compiled`` argument overrides it).
COMPILED = ENABLED


def time_ranks(times: F64, eids: I32) -> I64:
    """Each entry's rank by ``(time, eid)``: a stable sort of the times in eid order (an
    epoch's times come in a few sorted runs, which a stable sort merges)."""
    n = eids.shape[0]
    by_eid = None if n < 2 or bool((eids[1:] > eids[:-1]).all()) else np.argsort(eids)
    by_time = np.argsort(times if by_eid is None else times[by_eid], kind="stable")
    if by_eid is not None:
        by_time = by_eid[by_time]
    rank = np.empty(n, np.int64)
    rank[by_time] = np.arange(n, dtype=np.int64)
    return rank


def entry_order(vertex: I32, times: F64, eids: I32, ranks: I64 | None = None) -> I64:
    """The permutation that sorts entries by ``(vertex, time, eid)``: one sort of
    ``vertex << 32 | rank`` (unique keys; ``ranks``: :func:`time_ranks`, which both time
    orders of the same events share). A third of ``np.lexsort``'s time on an epoch's
    changes."""
    rank = time_ranks(times, eids) if ranks is None else ranks
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
    base: tuple[I32, F64],
    level: tuple[I32, F64, I8],
    vertices: npt.NDArray[np.integer],
    lo: F64,
    hi: F64,
    *,
    compiled: bool | None = None,
) -> tuple[I64, I64, I64, I64, I64]:
    """Per query ``(vertices[i], lo[i], hi[i])``: the range ``[a, b)`` of the base's entries
    of the vertex with a time in ``[lo, hi]`` (``base``: its vertices and times), ``[c, d)``
    of the level's (its vertices, times and diffs), and how many entries are present in them
    (``b - a`` and the diffs of ``[c, d)``). A query with a NaN bound has empty ranges."""
    compiled = COMPILED if compiled is None else compiled
    if compiled:
        asked = np.flatnonzero((lo <= hi) & (vertices >= 0))  # no NaN, no empty range
        order = asked[np.argsort(vertices[asked])]
        return compiled_ranges(*base, *level, order, vertices, lo, hi)  # type: ignore[no-any-return]
    v = vertices.astype(np.int64)
    valid = (lo <= hi) & (v >= 0)
    bounds = []
    for vertex, times in (base, level[:2]):
        first = np.where(valid, np.searchsorted(vertex, v, side="left"), 0).astype(np.int64)
        last = np.where(valid, np.searchsorted(vertex, v, side="right"), 0).astype(np.int64)
        start = segment_bounds(times, first, last, lo, right=False)
        bounds += [start, segment_bounds(times, start, last, hi, right=True)]
    a, b, c, d = bounds
    running = np.zeros(level[2].shape[0] + 1, np.int64)
    np.cumsum(level[2], out=running[1:])
    return a, b, c, d, (b - a) + running[d] - running[c]


def propose(
    eids: I32,
    times: F64,
    level_eids: I32,
    level_times: F64,
    level_diff: I8,
    bounds: tuple[I64, I64, I64, I64],
    *,
    compiled: bool | None = None,
) -> tuple[I64, I32]:
    """``(owner, eid)`` of every entry present in each query's ranges (``eids`` and ``times``:
    the base's): those of the base the level does not remove, and those it adds; each
    query's together."""
    a, b, c, d = bounds
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
    floor: float = -np.inf,
    *,
    compiled: bool | None = None,
) -> tuple[I32, F64, I32, I8]:
    """The level equal to applying ``upper`` on top of ``lower``: entries of both in order,
    diffs of an entry in both summed, zeros dropped, and so are entries with a time below
    ``floor``."""
    compiled = COMPILED if compiled is None else compiled
    if compiled:
        v, t, e, diff = compiled_merge_levels(*lower, *upper, np.float64(floor))
        return v, t, e, diff
    v, t, e, diff = (np.concatenate([x, y]) for x, y in zip(lower, upper, strict=True))
    above = t >= floor
    v, t, e, diff = v[above], t[above], e[above], diff[above]
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


def warm() -> None:
    """Load (or compile) the kernels for the types the index passes, before the first epoch."""
    if not ENABLED:
        return
    v, t, e, d = np.zeros(1, np.int32), np.zeros(1), np.zeros(1, np.int32), np.ones(1, np.int8)
    bounds = ranges((v, t), (v, t, d), v, t, t)
    propose(e, t, e, t, d, bounds[:4])
    entry_order(v, t, e)
    merge_levels((v, t, e, d), (v, t, e, d))


if AVAILABLE:
    from monitor.index.levels import gallop, lower_bound

    @njit(cache=True, nogil=True, inline="always")
    def _entry_less(v1, t1, e1, v2, t2, e2):  # type: ignore[no-untyped-def]
        """Whether entry 1 comes before entry 2."""
        if v1 != v2:
            return v1 < v2
        if t1 != t2:
            return t1 < t2
        return e1 < e2

    @njit(cache=True, nogil=True, inline="always")
    def _upper_bound(array, lo, hi, needle):  # type: ignore[no-untyped-def]
        """The first position in ``array[lo:hi]`` (sorted) whose value is ``> needle``."""
        while lo < hi:
            mid = (lo + hi) >> 1
            if array[mid] <= needle:
                lo = mid + 1
            else:
                hi = mid
        return lo

    @njit(cache=True, nogil=True, inline="always")
    def _seek(array, lo, hi, needle):  # type: ignore[no-untyped-def]
        """The first position from ``lo`` whose value is ``>= needle``: eight steps one by
        one (the next queried vertex is mostly a few entries on), then galloping."""
        end = min(lo + 8, hi)
        while lo < end and array[lo] < needle:
            lo += 1
        if lo < end or lo == hi:
            return lo
        return gallop(array, lo, hi, needle)

    @njit(cache=True, nogil=True)
    def compiled_ranges(bv, bt, lv, lt, ld, order, at, lo, hi):  # type: ignore[no-untyped-def]
        """:func:`ranges` (``at``: the queries' vertices), the queries in ``order`` (by vertex;
        the others find nothing): a vertex's entries in the base and in the level are found
        seeking on from the previous vertex's (each is walked once), then two binary searches
        by time in each, and the count."""
        n = at.shape[0]
        a = np.zeros(n, np.int64)
        b = np.zeros(n, np.int64)
        c = np.zeros(n, np.int64)
        d = np.zeros(n, np.int64)
        counts = np.zeros(n, np.int64)
        size, m = bv.shape[0], lv.shape[0]
        previous = np.int64(-1)
        first = last = level_first = level_last = 0
        for j in range(order.shape[0]):
            i = order[j]
            v = np.int64(at[i])
            low, high = lo[i], hi[i]  # ``order`` holds the queries with a range only
            if v != previous:
                ascending = v > previous
                first = _seek(bv, last if ascending else 0, size, v)
                last = _seek(bv, first, size, v + 1)
                level_first = _seek(lv, level_last if ascending else 0, m, v)
                level_last = _seek(lv, level_first, m, v + 1)
                previous = v
            a[i] = lower_bound(bt, first, last, low)
            b[i] = _upper_bound(bt, a[i], last, high)
            c[i] = lower_bound(lt, level_first, level_last, low)
            d[i] = _upper_bound(lt, c[i], level_last, high)
            count = b[i] - a[i]
            for q in range(c[i], d[i]):
                count += ld[q]
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
    def compiled_merge_levels(v1, t1, e1, d1, v2, t2, e2, d2, floor):  # type: ignore[no-untyped-def]
        """:func:`merge_levels`: per entry of the upper level, the lower level's entries before
        it copied in a tight loop (``floor`` decided without a branch), then the entry."""
        n, m = v1.shape[0], v2.shape[0]
        v = np.empty(n + m, np.int32)
        t = np.empty(n + m, np.float64)
        e = np.empty(n + m, np.int32)
        diff = np.empty(n + m, np.int8)
        i = k = 0
        for j in range(m + 1):
            p = n
            if j < m:
                p = i
                while p < n and _entry_less(v1[p], t1[p], e1[p], v2[j], t2[j], e2[j]):
                    p += 1
            for q in range(i, p):
                v[k], t[k], e[k], diff[k] = v1[q], t1[q], e1[q], d1[q]
                k += t1[q] >= floor
            i = p
            if j == m:
                break
            s = d2[j]
            if i < n and v1[i] == v2[j] and t1[i] == t2[j] and e1[i] == e2[j]:
                s += d1[i]
                i += 1
            if s != 0 and t2[j] >= floor:
                v[k], t[k], e[k], diff[k] = v2[j], t2[j], e2[j], s
                k += 1
        return v[:k], t[:k], e[:k], diff[:k]

else:  # pragma: no cover - numba is a dependency
    compiled_ranges = compiled_propose = None
    compiled_merge_levels = None
