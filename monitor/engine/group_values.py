"""The values an aggregate keeps per group, whole-array per batch of binding changes.

- :class:`PairCounts`: the (group, value) pairs of a distinct count with their multiplicities,
  found by a 64-bit hash of the pair;
- :class:`Multiset`: (group, value) pairs sorted by group then value, for ``min`` and ``max``;
- :class:`Sums`: running sums, exact for decimal amounts.

Each reports what a batch changed so that :class:`~monitor.engine.aggregates.AggregateState`
updates its counts and tells the groups whose conditions changed; each can renumber its groups
when the state forgets those without bindings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.index.hashtable import SlotTable, mix
from monitor.index.unique import first_rows

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


class PairCounts:
    """The (group, value) pairs of a distinct count with their multiplicities, by pair id: the
    pair's group, value and multiplicity in columns (16 bytes a pair), found by a
    :class:`~monitor.index.hashtable.SlotTable` of a 64-bit hash of both (one compiled probe
    per pair of a batch, comparing the pair itself: exact; 7 to 14 bytes a pair). A pair whose
    multiplicity falls to 0 keeps its id (found again if it comes back) until such pairs
    outnumber the others; then they are dropped and the table rebuilt."""

    #: Pairs at multiplicity 0 are dropped once there are more of them than this and than
    #: the others.
    compact_min = 1 << 16

    def __init__(self) -> None:
        self.groups = np.empty(0, np.int32)
        self.values: I64 = np.empty(0, np.int64)
        self.counts = np.empty(0, np.uint32)
        self._live = 0
        self._table = SlotTable()

    def __len__(self) -> int:
        """The pairs with a positive multiplicity."""
        return self._live

    @property
    def nbytes(self) -> int:
        arrays = (self.groups, self.values, self.counts)
        return sum(int(a.nbytes) for a in arrays) + self._table.nbytes

    def renumber(self, new: I64) -> None:
        """Each pair's group ``g`` becomes ``new[g]`` (the pairs at 0 dropped): hashed again."""
        live = self.counts > 0
        self._rebuild(new[self.groups[live]], self.values[live], self.counts[live])

    def apply(self, groups: I64, values: I64, diffs: I64) -> PairChange:
        """As :meth:`Multiset.apply`, for ``int64`` values (hashes of ids)."""
        if groups.shape[0] and int(groups.max()) >= 1 << 31:
            raise OverflowError("a distinct count past 2**31 groups")
        values = values.astype(np.int64, copy=False)
        hashes = _pair_hashes(groups, values)
        first, inverse = first_rows(hashes.view(np.int64))
        net, keep = _net(inverse, diffs, first.shape[0])
        first = first[keep]
        owners, mine, hashes = groups[first].astype(np.int32), values[first], hashes[first]
        ids = self._table.find_pairs(hashes, self.groups, self.values, (owners, mine))
        found = ids >= 0
        before = np.zeros(first.shape[0], np.int64)
        before[found] = self.counts[ids[found]]
        after = before + net
        if (after < 0).any():
            raise ValueError("a binding was retracted from a group that did not hold it")
        self.counts[ids[found]] = after[found]
        fresh = np.flatnonzero(~found)
        if fresh.shape[0]:
            known = int(self.groups.shape[0])
            self.groups = np.concatenate([self.groups, owners[fresh]])
            self.values = np.concatenate([self.values, mine[fresh]])
            self.counts = np.concatenate([self.counts, after[fresh].astype(np.uint32)])
            new = np.arange(known, known + fresh.shape[0], dtype=np.int32)
            self._table.add(hashes[fresh], new, lambda: self._entries(known))
        self._live += int(((before == 0) & (after > 0)).sum() - ((before > 0) & (after == 0)).sum())
        dead = int(self.counts.shape[0]) - self._live
        if dead > max(self.compact_min, self._live):
            live = self.counts > 0
            self._rebuild(self.groups[live], self.values[live], self.counts[live])
        return PairChange(owners.astype(np.int64), before > 0, after > 0)

    def _entries(self, below: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int32]]:
        """The hashes and ids of the pairs below id ``below`` (to place them in a new table)."""
        hashes = _pair_hashes(self.groups[:below], self.values[:below])
        return hashes, np.arange(below, dtype=np.int32)

    def _rebuild(
        self, groups: npt.NDArray[np.integer], values: I64, counts: npt.NDArray[Any]
    ) -> None:
        self.groups = groups.astype(np.int32)
        self.values, self.counts = values, counts.astype(np.uint32)
        self._live = int(self.groups.shape[0])
        self._table = SlotTable()
        ids = np.arange(self._live, dtype=np.int32)
        self._table.add(_pair_hashes(self.groups, values), ids, _none)


def _none() -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int32]]:
    return np.empty(0, np.uint64), np.empty(0, np.int32)


def _net(
    inverse: npt.NDArray[np.intp], diffs: I64, pairs: int
) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Each pair's net change in a batch (``inverse``: each row's pair), of those it changes,
    and which pairs those are."""
    net = np.zeros(pairs, np.int64)
    np.add.at(net, inverse.reshape(-1), diffs)
    keep = net != 0
    changed: I64 = net[keep]
    return changed, keep


def _merged(
    keys: npt.NDArray[Any], counts: npt.NDArray[Any], unique: npt.NDArray[Any], net: I64
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_], I64, I64]:
    """Where each of ``unique`` (sorted) goes among ``keys`` (sorted), whether it is there, and
    its multiplicity before and after adding ``net``; the pairs found are updated in
    ``counts``. A multiplicity below 0 means a binding retracted that was never there."""
    at = np.searchsorted(keys, unique)
    found = at < keys.shape[0]
    found[found] = keys[at[found]] == unique[found]
    before = np.zeros(unique.shape[0], np.int64)
    before[found] = counts[at[found]]
    after = before + net
    if (after < 0).any():
        raise ValueError("a binding was retracted from a group that did not hold it")
    counts[at[found]] = after[found]
    return at, found, before, after


def _pair_hashes(groups: npt.NDArray[np.integer], values: I64) -> npt.NDArray[np.uint64]:
    hashes: npt.NDArray[np.uint64] = mix(mix(groups.astype(np.uint64)) ^ values.view(np.uint64))
    return hashes


@dataclass
class PairChange:
    """What a batch changed in a :class:`Multiset`: per pair touched, its group and whether it
    was present before and is after."""

    groups: I64
    before: npt.NDArray[np.bool_]
    after: npt.NDArray[np.bool_]


class Multiset:
    """(group, value) pairs with positive multiplicities, sorted by group then value."""

    def __init__(self, value_type: type[np.generic]) -> None:
        self.dtype = np.dtype([("g", np.int64), ("v", value_type)])
        self.keys = np.empty(0, self.dtype)
        self.counts: I64 = np.empty(0, np.int64)

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.counts.nbytes)

    def apply(self, groups: I64, values: npt.NDArray[Any], diffs: I64) -> PairChange:
        """Add ``diffs`` to the multiplicities of the pairs; a pair that reaches 0 is removed.
        A multiplicity below 0 means a binding retracted that was never there: an error."""
        rows = np.empty(groups.shape[0], self.dtype)
        rows["g"], rows["v"] = groups, values
        unique, inverse = np.unique(rows, return_inverse=True)
        net, keep = _net(inverse, diffs, unique.shape[0])
        unique = unique[keep]
        at, found, before, after = _merged(self.keys, self.counts, unique, net)
        self.keys = np.insert(self.keys, at[~found], unique[~found])
        self.counts = np.insert(self.counts, at[~found], after[~found])
        if (after == 0).any():
            live = self.counts > 0
            self.keys, self.counts = self.keys[live], self.counts[live]
        return PairChange(unique["g"].astype(np.int64), before > 0, after > 0)

    def renumber(self, new: I64) -> None:
        """Each pair's group ``g`` becomes ``new[g]``, an order-keeping map: still sorted."""
        self.keys["g"] = new[self.keys["g"]]

    def ends(self, groups: I64) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[np.bool_]]:
        """Each group's least and greatest value, and whether it has any."""
        held = self.keys["g"]
        lo = np.searchsorted(held, groups, "left")
        hi = np.searchsorted(held, groups, "right")
        some = hi > lo
        values = self.keys["v"]
        least = np.zeros(groups.shape[0], values.dtype)
        greatest = np.zeros(groups.shape[0], values.dtype)
        least[some], greatest[some] = values[lo[some]], values[hi[some] - 1]
        return least, greatest, some


#: The most decimals a sum keeps exactly; the bound of its scaled integers.
MAX_DECIMALS = 9
_SCALED_BOUND = 2**62


class Sums:
    """Running sums per group, exact for decimal amounts: kept as integers in units of
    ``10**-exponent`` (cents: 2), the exponent the least that writes every value so far
    exactly, while it is at most :data:`MAX_DECIMALS` and the sums stay below ``2**62``; as
    ``float64`` after that (say, a value of ``1/3``). A float running sum would drift
    (``120.71`` read back as ``120.70999999999967``) and flip a condition at its threshold. A
    binding whose event lacks the field adds nothing."""

    def __init__(self) -> None:
        self.scaled: I64 = np.zeros(0, np.int64)
        self.exponent = 0
        self.floats: F64 | None = None

    @property
    def nbytes(self) -> int:
        return int(self.scaled.nbytes if self.floats is None else self.floats.nbytes)

    def keep(self, live: npt.NDArray[np.bool_]) -> None:
        n = live.shape[0]
        if self.floats is not None:
            self.floats = self.floats[:n][live]
        else:
            self.scaled = self.scaled[:n][live]

    def grow(self, size: int) -> None:
        if self.floats is not None:
            self.floats = grown(self.floats, size)
        else:
            self.scaled = grown(self.scaled, size)

    def add(self, groups: I64, values: F64, diffs: I64) -> None:
        values = np.nan_to_num(np.asarray(values, np.float64), nan=0.0)
        if self.floats is None:
            exponent = _decimals(values, self.exponent)
            if exponent is not None:
                ints = np.round(values * 10.0**exponent).astype(np.int64)
                step = 10 ** (exponent - self.exponent)
                held = int(np.abs(self.scaled).max()) if self.scaled.shape[0] else 0
                if held * step + int(np.abs(ints).sum()) < _SCALED_BOUND:
                    self.scaled *= step
                    self.exponent = exponent
                    np.add.at(self.scaled, groups, ints * diffs)
                    return
            self.floats = self.scaled / 10.0**self.exponent
        np.add.at(self.floats, groups, diffs * values)

    def values(self, groups: I64) -> F64:
        if self.floats is not None:
            return self.floats[groups]
        out: F64 = self.scaled[groups] / 10.0**self.exponent
        return out


def _decimals(values: F64, least: int) -> int | None:
    """The least exponent from ``least`` up that writes every value as an integer of
    ``10**-exponent`` exactly (below 2**53), or None."""
    for exponent in range(least, MAX_DECIMALS + 1):
        scaled = np.round(values * 10.0**exponent)
        if (np.abs(scaled) < 2.0**53).all() and (scaled / 10.0**exponent == values).all():
            return exponent
    return None


def renumbered(live: npt.NDArray[np.bool_]) -> I64:
    """For each id, its number among the ``live`` ones (order kept; meaningless for the
    others)."""
    new: I64 = np.cumsum(live, dtype=np.int64) - 1
    return new


def grown(array: npt.NDArray[Any], size: int) -> npt.NDArray[Any]:
    grown = np.zeros(size, array.dtype)
    grown[: array.shape[0]] = array
    return grown
