"""Sorted delta levels: sets of signed changes to a compacted adjacency, and their merging.

A level holds *pairs* ``(key, value)`` packed into one ``int64`` as ``key << 32 | value`` (both
are dense ids below 2**31, so the packed form sorts by key, then value) and, for each pair, a
``diff`` of +1 (pair added relative to the level below) or -1 (pair removed). Pairs are unique and
sorted. Every operation takes and returns whole arrays.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, ENABLED, njit
from monitor.index.unique import Ints, T, unique_inverse

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]
S = TypeVar("S", bound=np.generic)

VALUE_BITS = 32
VALUE_MASK = (1 << VALUE_BITS) - 1


def pack(keys: npt.NDArray[np.integer], values: npt.NDArray[np.integer]) -> I64:
    """Pairs packed into sortable ``int64``: ``key << 32 | value``."""
    return (keys.astype(np.int64) << VALUE_BITS) | values.astype(np.int64)


def unpack(packed: I64) -> tuple[I64, I32]:
    """The keys and values of packed pairs."""
    return packed >> VALUE_BITS, (packed & VALUE_MASK).astype(np.int32)


@dataclass(frozen=True)
class Level:
    """Unique sorted packed pairs with their diffs, and the running sum of diffs.

    ``running[i]`` is the sum of ``diff[:i]``, so the net change of the pairs of key ``k`` is
    ``running[hi] - running[lo]`` for the range ``[lo, hi)`` of ``k``.
    """

    pairs: I64
    diff: I8
    running: I64
    #: Whether any pair is removed (-1): an insert-only level needs no lookup on propose.
    removals: bool = False

    @classmethod
    def empty(cls) -> Level:
        return cls(np.empty(0, np.int64), np.empty(0, np.int8), np.zeros(1, np.int64))

    @classmethod
    def of(cls, pairs: I64, diff: I8) -> Level:
        """A level from unique sorted pairs and their (non-zero) diffs."""
        running = np.zeros(pairs.shape[0] + 1, np.int64)
        np.cumsum(diff, out=running[1:])
        return cls(pairs, diff, running, bool((diff < 0).any()))

    def __len__(self) -> int:
        return int(self.pairs.shape[0])

    def key_ranges(
        self, keys: npt.NDArray[np.integer], *, compiled: bool = ENABLED
    ) -> tuple[I64, I64]:
        """For each key, the range ``[lo, hi)`` of its pairs (empty, ``lo == hi``, for a key
        the level does not hold): compiled, a lookup in the level's table of keys
        (:attr:`table`) once as many keys are asked for as it has pairs, else one
        pass of binary searches (:func:`compiled_key_ranges`); in numpy, two ``searchsorted``
        calls. The table is built once the keys asked for, over all calls, are as many as
        the level's pairs: a committed level is probed by every stage of every epoch until
        the next compaction, in calls of fewer keys each."""
        asked = self.__dict__.get("_asked", 0) + int(keys.shape[0])
        self.__dict__["_asked"] = asked  # (not a field: the level's pairs do not change)
        if compiled and ("table" in self.__dict__ or asked >= len(self)):
            found: tuple[I64, I64] = compiled_table_ranges(*self.table, keys)
            return found
        unique, inverse = distinct(keys, len(self))
        if compiled:
            lo, hi = compiled_key_ranges(self.pairs, unique)
        else:
            k = unique.astype(np.int64) << VALUE_BITS
            lo = np.searchsorted(self.pairs, k, side="left").astype(np.int64)
            hi = np.searchsorted(self.pairs, k + (1 << VALUE_BITS), side="left").astype(np.int64)
        return (lo, hi) if inverse is None else (lo[inverse], hi[inverse])

    @functools.cached_property
    def table(self) -> tuple[I32, I32, I32]:
        """The level's keys in an open-addressing hash table (slots of key, -1 where empty,
        and the range of its pairs), built once, at the first large lookup: a key's range is
        then a probe or two, ~30 ns, where a binary search among a level's ten thousand pairs
        takes ~150 (the intersection of a round trip's first hop looks up 77M keys on 800k
        events)."""
        built: tuple[I32, I32, I32] = compiled_key_table(self.pairs)
        return built

    def lookup(self, packed: I64) -> I8:
        """For each packed pair, its diff in this level, or 0 where the level does not hold it."""
        if not len(self):
            return np.zeros(packed.shape[0], np.int8)
        pos = search(self.pairs, packed)
        pos_c = np.minimum(pos, len(self) - 1)
        hit = self.pairs[pos_c] == packed
        return np.where(hit, self.diff[pos_c], np.int8(0)).astype(np.int8)


def gather_ranges(lo: I64, hi: I64) -> tuple[I64, I64]:
    """Flatten ranges: for each position inside ``[lo[i], hi[i])``, the owner ``i`` and position.

    This is the vectorized form of ``for i: for p in range(lo[i], hi[i])``.
    """
    lengths = hi - lo
    total = int(lengths.sum())
    owner = np.repeat(np.arange(lengths.shape[0], dtype=np.int64), lengths)
    if total == 0:
        return owner, np.empty(0, np.int64)
    starts = np.zeros(lengths.shape[0], np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    positions = np.arange(total, dtype=np.int64) + np.repeat(lo - starts, lengths)
    return owner, positions


def merge(lower: Level, upper: Level, *, compiled: bool = ENABLED) -> Level:
    """The level equal to applying ``upper`` on top of ``lower``: diffs summed, zeros dropped.

    Linear in ``len(lower)`` plus ``len(upper) log len(lower)``: compiled, one pass that copies
    the runs of ``lower`` between ``upper``'s pairs and sums the running diffs as it goes (an
    epoch's few thousand pairs into a level of a hundred thousand: ~5x the numpy way); in numpy,
    matches found by binary search and new pairs inserted.
    """
    if not len(upper):
        return lower
    if not len(lower):
        return upper
    if compiled:
        pairs, diff, running = compiled_merge(lower.pairs, lower.diff, upper.pairs, upper.diff)
        return Level(pairs, diff, running, bool((diff < 0).any()))
    pos = np.searchsorted(lower.pairs, upper.pairs)
    pos_c = np.minimum(pos, len(lower) - 1)
    hit = lower.pairs[pos_c] == upper.pairs
    diff = lower.diff.copy()
    np.add.at(diff, pos_c[hit], upper.diff[hit])
    fresh = ~hit
    pairs = np.insert(lower.pairs, pos[fresh], upper.pairs[fresh])
    diff = np.insert(diff, pos[fresh], upper.diff[fresh])
    keep = diff != 0
    if not keep.all():
        pairs, diff = pairs[keep], diff[keep]
    return Level.of(pairs, diff)


#: Below this many needles a binary search each is cheaper than sorting them first.
SORTED_SEARCH_MIN = 1024
#: Below this many elements a haystack sits in the caches, and random searches miss too little
#: to pay for sorting the needles (measured: 1M needles into 100k keys, 170 ms either way;
#: into 1M keys, 470 ms random against 250 ms sorted).
SORTED_SEARCH_HAYSTACK = 1 << 18


def distinct(keys: Ints[T], haystack: int) -> tuple[Ints[T], npt.NDArray[np.intp] | None]:
    """The sorted distinct keys and where each key is among them (None: ``keys`` as they are,
    sorted and distinct already, too few to be worth it, or searched in a ``haystack`` too
    small to miss the caches).
    Binary searches for sorted needles walk the haystack in order: for millions of random
    needles in a large array they are several times faster, cache misses being most of a
    search."""
    if keys.shape[0] < SORTED_SEARCH_MIN or haystack < SORTED_SEARCH_HAYSTACK:
        return keys, None
    if (keys[1:] > keys[:-1]).all():  # sorted and distinct already (np.unique's output)
        return keys, None
    return unique_inverse(keys)


def search(haystack: npt.NDArray[np.integer], needles: I64) -> npt.NDArray[np.intp]:
    """``np.searchsorted(haystack, needles)``, with the needles searched in sorted order."""
    unique, inverse = distinct(needles, haystack.shape[0])
    found = np.searchsorted(haystack, unique)
    return found if inverse is None else found[inverse]


#: Whether :func:`grow` resizes in place. Python 3.14 changed the reference counts that
#: ``ndarray.resize``'s check reads (numpy issues 30265 and 30991: aliases missed by some
#: numpy versions, spurious refusals by others), so from 3.14 on columns are copied.
IN_PLACE = sys.version_info < (3, 14)


def grow(owner: object, name: str, capacity: int, fill: object = 0) -> None:
    """Grow the array ``owner.<name>`` to ``capacity`` entries, the new ones ``fill``: in place
    (numpy's ``resize``, a ``realloc``: the old entries are neither copied nor paged in again,
    5x faster than a copy for a 20 MB column) where nothing else references the array, else as
    :func:`resized` copies it. A copy into fresh memory page-faults every page of the column:
    for the event store's columns at 5M events that was 20-340 ms a growth, by how the kernel
    could back it."""
    size = getattr(owner, name).shape[0]
    if capacity <= size:
        return
    if IN_PLACE:
        try:
            # No local reference: refcheck counts the attribute's and the call's only.
            getattr(owner, name).resize(capacity, refcheck=True)
        except ValueError:  # a view or another reference: copying is the safe way
            pass
        else:
            if fill != 0:  # resize zero-fills
                getattr(owner, name)[size:] = fill
            return
    setattr(owner, name, resized(getattr(owner, name), capacity, fill))


def resized(array: npt.NDArray[S], capacity: int, fill: object = 0) -> npt.NDArray[S]:
    """``array`` at the start of a new array of ``capacity`` entries (cut if longer), the rest
    ``fill``: how every growing column of the index grows."""
    kept = min(array.shape[0], capacity)
    if fill == 0:  # calloc'd: the tail's pages are zero until written, never filled here
        out = np.zeros(capacity, dtype=array.dtype)
    else:
        out = np.empty(capacity, dtype=array.dtype)
        out[kept:] = fill
    out[:kept] = array[:kept]
    return out


def inverse_permutation(old_of_new: I32, *held: I32) -> I32:
    """For a renumbering that keeps some old numbers (``old_of_new``: the old number of each
    new one), the new number of each old one, -1 for those not kept; long enough to be indexed
    by every number ``held`` (the arrays to renumber)."""
    size = max((int(a.max()) + 1 for a in (old_of_new, *held) if a.shape[0]), default=0)
    new_of_old = np.full(size, -1, np.int32)
    new_of_old[old_of_new] = np.arange(old_of_new.shape[0], dtype=np.int32)
    return new_of_old


def warm() -> None:
    """Load (or compile, the first time on a machine) the key ranges for the key types the
    engine passes, before the first epoch."""
    if ENABLED:
        table = compiled_key_table(np.zeros(0, np.int64))
        for keys in (np.zeros(1, np.int32), np.zeros(1, np.int64)):
            compiled_key_ranges(np.zeros(0, np.int64), keys)
            compiled_table_ranges(*table, keys)
        one = Level.of(np.ones(1, np.int64), np.ones(1, np.int8))
        merge(one, one)


if AVAILABLE:

    @njit(cache=True, nogil=True, inline="always")
    def lower_bound(array, lo, hi, needle):  # type: ignore[no-untyped-def]
        """The first position in ``array[lo:hi]`` (sorted) whose value is ``>= needle``."""
        while lo < hi:
            mid = (lo + hi) >> 1
            if array[mid] < needle:
                lo = mid + 1
            else:
                hi = mid
        return lo

    @njit(cache=True, nogil=True, inline="always")
    def gallop(array, lo, hi, needle):  # type: ignore[no-untyped-def]
        """:func:`lower_bound` for a needle expected near ``lo``: steps of 1, 2, 4, ... from
        ``lo``, then a binary search within the last step (``log`` of the distance)."""
        step = 1
        while lo + step <= hi and array[lo + step - 1] < needle:
            lo += step
            step <<= 1
        return lower_bound(array, lo, min(lo + step, hi), needle)

    @njit(cache=True, nogil=True)
    def compiled_merge(lower_pairs, lower_diff, upper_pairs, upper_diff):  # type: ignore[no-untyped-def]
        """:func:`merge`'s pairs, diffs and running sums in one pass: for each pair of the
        upper level, the run of lower pairs before it copied (found by galloping from the
        last one), then the pair itself, its diff summed with an equal lower pair's; zero
        diffs dropped."""
        n, m = lower_pairs.shape[0], upper_pairs.shape[0]
        pairs = np.empty(n + m, np.int64)
        diff = np.empty(n + m, np.int8)
        running = np.empty(n + m + 1, np.int64)
        running[0] = 0
        total = 0
        k = 0
        i = 0
        for j in range(m + 1):
            end = n if j == m else gallop(lower_pairs, i, n, upper_pairs[j])
            for at in range(i, end):
                d = lower_diff[at]
                pairs[k] = lower_pairs[at]
                diff[k] = d
                total += d
                k += 1
                running[k] = total
            i = end
            if j == m:
                break
            pair = upper_pairs[j]
            d = upper_diff[j]
            if i < n and lower_pairs[i] == pair:
                d += lower_diff[i]
                i += 1
            if d != 0:
                pairs[k] = pair
                diff[k] = d
                total += d
                k += 1
                running[k] = total
        return pairs[:k], diff[:k], running[: k + 1]

    @njit(cache=True, nogil=True, inline="always")
    def _slot(key, mask):  # type: ignore[no-untyped-def]
        """A key's first slot in a table of ``mask + 1`` slots (Fibonacci hashing)."""
        return np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask

    @njit(cache=True, nogil=True)
    def compiled_key_table(level_pairs):  # type: ignore[no-untyped-def]
        """:attr:`Level.table`: each distinct key of the sorted pairs with its range, in
        twice as many slots as keys or more (a power of two), linear probing."""
        n = level_pairs.shape[0]
        count = 0
        previous = np.int64(-1)
        for i in range(n):
            key = level_pairs[i] >> VALUE_BITS
            if key != previous:
                count += 1
                previous = key
        size = 16
        while size < 2 * count:
            size <<= 1
        mask = np.int64(size - 1)
        keys = np.full(size, -1, np.int32)  # (keys and positions are below 2**31: 12 B a slot)
        lo = np.zeros(size, np.int32)
        hi = np.zeros(size, np.int32)
        previous = np.int64(-1)
        slot = np.int64(0)
        for i in range(n):
            key = level_pairs[i] >> VALUE_BITS
            if key != previous:
                previous = key
                slot = _slot(key, mask)
                while keys[slot] != -1:
                    slot = (slot + 1) & mask
                keys[slot] = np.int32(key)
                lo[slot] = np.int32(i)
            hi[slot] = np.int32(i + 1)
        return keys, lo, hi

    @njit(cache=True, nogil=True)
    def compiled_table_ranges(table_keys, table_lo, table_hi, keys):  # type: ignore[no-untyped-def]
        """For each key, its range in the level from its table (0, 0 for a key not held); a
        key equal to the one before is not looked up again."""
        n = keys.shape[0]
        mask = np.int64(table_keys.shape[0] - 1)
        lo = np.empty(n, np.int64)
        hi = np.empty(n, np.int64)
        previous = np.int64(-1)
        first = last = np.int64(0)
        for i in range(n):
            key = np.int64(keys[i])
            if key != previous:
                previous = key
                first = last = np.int64(0)
                slot = _slot(key, mask)
                while True:
                    held = table_keys[slot]
                    if held == key:
                        first, last = np.int64(table_lo[slot]), np.int64(table_hi[slot])
                        break
                    if held == -1:
                        break
                    slot = (slot + 1) & mask
            lo[i] = first
            hi[i] = last
        return lo, hi

    @njit(cache=True, nogil=True)
    def compiled_key_ranges(level_pairs, keys):  # type: ignore[no-untyped-def]
        """For each key, the range ``[lo, hi)`` of its pairs among a level's sorted packed
        pairs, in one pass (``Level.key_ranges``'s numpy path is the reference): the start by
        binary search, or galloping on from the previous key's range when the keys ascend
        (sorted needles walk the level once), and the end galloping on from the start (a key
        holds few pairs)."""
        n = keys.shape[0]
        size = level_pairs.shape[0]
        lo = np.empty(n, np.int64)
        hi = np.empty(n, np.int64)
        previous = np.int64(-1)
        first = last = 0
        for i in range(n):
            key = np.int64(keys[i])
            if key != previous:
                start = key << VALUE_BITS
                if previous >= 0 and key > previous:
                    first = gallop(level_pairs, last, size, start)
                else:
                    first = lower_bound(level_pairs, 0, size, start)
                last = gallop(level_pairs, first, size, (key + 1) << VALUE_BITS)
                previous = key
            lo[i] = first
            hi[i] = last
        return lo, hi
