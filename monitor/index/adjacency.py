"""A multi-version adjacency: one relation in one direction, ``key -> sorted values``.

Three levels, as the paper's multi-version index:

- *compacted*: CSR over dense keys (``offsets``, and ``targets`` sorted within each key), 4 bytes
  per stored pair plus 4 per key (8 once the CSR holds :data:`NARROW_OFFSETS` pairs or more);
- *committed*: a :class:`~monitor.index.levels.Level` of the changes since the last compaction,
  merged into the compacted level when it grows past ``compaction_ratio`` of it (amortized, as the
  per-vertex LSM lists of the paper);
- *uncommitted*: the changes of the epoch in flight, relative to the committed state.

A :class:`Cut` chooses what a reader sees: ``OLD`` (compacted + committed, the state before the
epoch) or ``NEW`` (also the epoch's changes). :meth:`Adjacency.view` returns an
:class:`AdjacencyView` whose ``count``, ``propose`` and ``contains`` take whole arrays of keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.index import kernels
from monitor.index.kernels import Offsets, contains
from monitor.index.levels import (
    I8,
    I32,
    I64,
    Level,
    gather_ranges,
    merge,
    pack,
    unpack,
)
from monitor.plan.cut import Cut

#: CSR offsets are ``int32`` below this many pairs (2**30: a binary search's ``lo + hi`` over
#: them never overflows 32 bits).
NARROW_OFFSETS = 1 << 30


def csr_offsets(counts: npt.NDArray[np.integer]) -> Offsets:
    """The CSR offsets of keys with ``counts`` values each (``keys + 1`` entries)."""
    total = int(counts.sum()) if counts.shape[0] else 0
    offsets = np.zeros(counts.shape[0] + 1, np.int32 if total < NARROW_OFFSETS else np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


@dataclass(frozen=True)
class Probe:
    """Adjacency keys and the range ``[lo, hi)`` of each one's pairs in a view's level (None:
    the level is empty): what a stage finds once per extender, counts with, and proposes from
    for the prefixes that extender wins."""

    keys: npt.NDArray[np.integer]
    lo: I64 | None
    hi: I64 | None

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def ranges(self) -> tuple[I64, I64]:
        """The level's range of each key (empty ones where the view has no level)."""
        if self.lo is None or self.hi is None:
            none = np.zeros(self.keys.shape[0], np.int64)
            return none, none
        return self.lo, self.hi

    def __getitem__(self, rows: npt.NDArray[np.integer] | npt.NDArray[np.bool_] | slice) -> Probe:
        lo, hi = self.lo, self.hi
        return Probe(
            self.keys[rows], None if lo is None else lo[rows], None if hi is None else hi[rows]
        )


#: The ranges a count passes where its probe has no level's (never read).
_NO_RANGES: I64 = np.zeros(0, np.int64)


class AdjacencyView:
    """The adjacency as one cut sees it: a compacted CSR plus one delta level on top of it.

    Every ``+1`` pair of ``delta`` is absent from the CSR and every ``-1`` pair is present in it.
    """

    __slots__ = ("delta", "offsets", "targets")

    def __init__(self, offsets: Offsets, targets: I32, delta: Level) -> None:
        self.offsets = offsets
        self.targets = targets
        self.delta = delta

    def probe(self, keys: npt.NDArray[np.integer]) -> Probe:
        """``keys`` with the ranges of their pairs in the level, found once for counting and
        proposing."""
        if not len(self.delta):
            return Probe(keys, None, None)
        lo, hi = self.delta.key_ranges(keys)
        return Probe(keys, lo, hi)

    def count(self, keys: npt.NDArray[np.integer] | Probe) -> I64:
        """Number of values of each key."""
        probe = keys if isinstance(keys, Probe) else self.probe(keys)
        keys = probe.keys
        if kernels.KERNELS == "numba":
            lo, hi = probe.lo, probe.hi
            if lo is None or hi is None:  # (no level: the ranges are not read)
                lo = hi = _NO_RANGES
            counted: I64 = kernels.compiled_count(
                self.offsets, keys, self.delta.running, lo, hi, lo is not _NO_RANGES
            )
            return counted
        counts: I64 = (self.offsets[keys + 1] - self.offsets[keys]).astype(np.int64)
        if probe.lo is not None and probe.hi is not None:
            counts = counts + (self.delta.running[probe.hi] - self.delta.running[probe.lo])
        return counts

    def propose(self, keys: npt.NDArray[np.integer] | Probe) -> tuple[I64, I32]:
        """All values of every key: ``(owner, value)`` with ``owner`` indexing ``keys``, each
        key's values together (compiled: in order, one merge of its CSR segment and its level
        pairs; numpy: the segment's, then the level's additions)."""
        if kernels.KERNELS != "numba":
            return self._numpy_propose(keys.keys if isinstance(keys, Probe) else keys)
        probe = keys if isinstance(keys, Probe) else self.probe(keys)
        lo, hi = probe.ranges()
        owner: I64
        values: I32
        owner, values = kernels.compiled_propose(
            self.offsets, self.targets, self.delta.pairs, self.delta.diff, probe.keys, lo, hi
        )
        return owner, values

    def _numpy_propose(self, keys: npt.NDArray[np.integer]) -> tuple[I64, I32]:
        """:meth:`propose` in whole-array steps (the fallback and the tests' reference)."""
        owner, positions = gather_ranges(self.offsets[keys], self.offsets[keys + 1])
        values = self.targets[positions]
        if not len(self.delta):
            return owner, values
        if self.delta.removals:
            removed = self.delta.lookup(pack(keys[owner], values)) < 0
            owner, values = owner[~removed], values[~removed]
        lo, hi = self.delta.key_ranges(keys)
        d_owner, d_pos = gather_ranges(lo, hi)
        added = self.delta.diff[d_pos] > 0
        if added.any():
            _, d_values = unpack(self.delta.pairs[d_pos[added]])
            owner = np.concatenate([owner, d_owner[added]])
            values = np.concatenate([values, d_values])
        return owner, values

    def contains(
        self, keys: npt.NDArray[np.integer] | Probe, values: npt.NDArray[np.integer]
    ) -> npt.NDArray[np.bool_]:
        """For each ``(keys[i], values[i])``, whether the pair is present (the intersection:
        :mod:`monitor.index.kernels`; many values of one key, as a unary relation's check
        has, through a mask of that key's values). A :class:`Probe` of the keys gives their
        ranges in the level, which the compiled kernel then does not search again."""
        probe = keys if isinstance(keys, Probe) else None
        keys = keys.keys if isinstance(keys, Probe) else keys
        n = int(keys.shape[0])
        if n >= MASK_MIN and keys[0] == keys[-1] and (keys == keys[0]).all():
            found = self._masked(int(keys[0]), values)
            if found is not None:
                return found
        if probe is not None and kernels.KERNELS == "numba":
            lo, hi = probe.ranges()
            ranged: npt.NDArray[np.bool_] = kernels.compiled_contains(
                self.offsets, self.targets, self.delta.pairs, self.delta.diff, keys, values, lo, hi
            )
            return ranged
        return contains(
            self.offsets,
            self.targets,
            self.delta.pairs,
            self.delta.diff,
            keys,
            values,
        )

    def _masked(self, key: int, values: npt.NDArray[np.integer]) -> npt.NDArray[np.bool_] | None:
        """:meth:`contains` of ``values`` for one ``key``: a mask over the ids up to the
        largest (None where it would be larger than :data:`MASK_SPAN` per value)."""
        segment = self.targets[self.offsets[key] : self.offsets[key + 1]]
        added = removed = segment[:0]
        if len(self.delta):
            lo, hi = self.delta.key_ranges(np.array([key], np.int64))
            _, level = unpack(self.delta.pairs[int(lo[0]) : int(hi[0])])
            diff = self.delta.diff[int(lo[0]) : int(hi[0])]
            added, removed = level[diff > 0], level[diff < 0]
        top = max(int(a.max()) for a in (segment, added, values) if a.shape[0])
        if top + 1 > MASK_SPAN * values.shape[0]:
            return None
        mask = np.zeros(top + 1, np.bool_)
        mask[segment] = True
        mask[removed] = False
        mask[added] = True
        found: npt.NDArray[np.bool_] = mask[values]
        return found


#: Below this many values of one key, :meth:`AdjacencyView.contains` searches each.
MASK_MIN = 4096
#: A mask of one key's values costs a byte per id up to the largest: used while that is at most
#: this many per value looked up.
MASK_SPAN = 64


class Adjacency:
    """One relation in one direction, with its compacted, committed and uncommitted levels."""

    def __init__(self, compaction_ratio: float = 0.125, compaction_min: int = 4096) -> None:
        self.compaction_ratio = compaction_ratio
        self.compaction_min = compaction_min
        self._offsets: Offsets = np.zeros(2, np.int32)
        self._keys = 1
        self.targets: I32 = np.empty(0, np.int32)
        self.committed = Level.empty()
        self.uncommitted = Level.empty()
        self._new_delta: Level | None = None
        self.compactions = 0

    # -- shape -------------------------------------------------------------------------------

    @property
    def offsets(self) -> Offsets:
        """CSR offsets of the compacted level: ``keys + 1`` entries."""
        return self._offsets[: self._keys + 1]

    def ensure_keys(self, n: int) -> None:
        """Make keys ``0 .. n-1`` addressable (new keys have no values). Amortized O(1)."""
        if n <= self._keys:
            return
        if n + 1 > self._offsets.shape[0]:
            grown = np.empty(max(n + 1, 2 * self._offsets.shape[0]), self._offsets.dtype)
            grown[: self._keys + 1] = self._offsets[: self._keys + 1]
            self._offsets = grown
        self._offsets[self._keys + 1 : n + 1] = self._offsets[self._keys]
        self._keys = n

    @property
    def key_count(self) -> int:
        return self._keys

    def __len__(self) -> int:
        """Number of pairs in the committed state."""
        return int(self.targets.shape[0]) + int(self.committed.running[-1])

    @property
    def nbytes(self) -> int:
        """Bytes held by the compacted and committed levels."""
        return (
            self._offsets.itemsize * (self._keys + 1)
            + self.targets.nbytes
            + self.committed.pairs.nbytes
            + self.committed.diff.nbytes
            + self.committed.running.nbytes
        )

    # -- versions ----------------------------------------------------------------------------

    def view(self, cut: Cut) -> AdjacencyView:
        """The adjacency as read by an atom with this cut."""
        if cut is Cut.OLD or not len(self.uncommitted):
            return AdjacencyView(self.offsets, self.targets, self.committed)
        if self._new_delta is None:
            self._new_delta = merge(self.committed, self.uncommitted)
        return AdjacencyView(self.offsets, self.targets, self._new_delta)

    def stage(self, pairs: I64, diff: I8) -> None:
        """Set the epoch's changes: unique sorted packed pairs, +1 absent before, -1 present."""
        self.uncommitted = Level.of(pairs, diff)
        self._new_delta = None

    def commit(self) -> None:
        """Move the epoch's changes into the committed level; compact when it has grown."""
        if len(self.uncommitted):
            self.committed = self.view(Cut.NEW).delta
            self.uncommitted = Level.empty()
            self._new_delta = None
        threshold = max(self.compaction_min, self.compaction_ratio * self.targets.shape[0])
        if len(self.committed) > threshold:
            self.compact()

    def abort(self) -> None:
        """Forget the epoch's changes."""
        self.uncommitted = Level.empty()
        self._new_delta = None

    def compact(self) -> None:
        """Merge the committed level into the CSR. Linear in the number of stored pairs and
        keys: compiled, one pass merging each key's segment with its level pairs into the new
        offsets and targets; in numpy, the pairs without the removed ones, with the added ones
        inserted."""
        if not len(self.committed):
            return
        if kernels.KERNELS == "numba":  # every key's merge in one pass, sized by the net change
            level = self.committed
            total = int(self.targets.shape[0]) + int(level.running[-1])
            wide = total >= NARROW_OFFSETS
            offsets: Offsets = np.empty(self._keys + 1, np.int64 if wide else np.int32)
            targets = np.empty(total, np.int32)
            kernels.compiled_compact(
                self.offsets, self.targets, level.pairs, level.diff, offsets, targets
            )
            self._offsets, self.targets = offsets, targets
        else:
            new_keys, self.targets = unpack(self.pairs(Cut.OLD))
            self._offsets = csr_offsets(np.bincount(new_keys, minlength=self._keys))
        self.committed = Level.empty()
        self.compactions += 1

    def load(self, pairs: I64) -> None:
        """Replace everything by the unique sorted packed ``pairs`` (bulk load)."""
        keys, self.targets = unpack(pairs)
        n = max(self._keys, int(keys[-1]) + 1 if keys.shape[0] else 0)
        self._offsets = csr_offsets(np.bincount(keys, minlength=n))
        self._keys = n
        self.committed = Level.empty()
        self.uncommitted = Level.empty()
        self._new_delta = None

    def pairs(self, cut: Cut = Cut.OLD) -> I64:
        """Every stored pair under ``cut``, packed and sorted."""
        view = self.view(cut)
        keys = np.repeat(np.arange(self._keys, dtype=np.int64), np.diff(self.offsets))
        current = pack(keys, self.targets)
        if not len(view.delta):
            return current
        removed = view.delta.pairs[view.delta.diff < 0]
        current = current[~np.isin(current, removed, assume_unique=True)]
        added = view.delta.pairs[view.delta.diff > 0]
        return np.insert(current, np.searchsorted(current, added), added)
