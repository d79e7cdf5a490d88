"""An open-addressing hash table of dense ids, probed and filled with array operations.

The table holds ``int32`` ids (``-1``: empty) in a power-of-two array; a key's home is its
64-bit hash masked to the table, and a key that finds its home taken tries the next position
(linear probing). The table stores no keys: a probe asks the caller whether the id found there
has the key looked for (``equal``), so two keys with the same hash are simply two positions of
one probe sequence and can never be merged. Ids are never removed.

Every step works on all pending keys at once: the loop runs once per probe *length* (short at a
load factor of at most 0.7), never once per key. 4 bytes per position, at least 1/0.7 positions
per id.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from monitor.index.levels import I32, I64

U64 = npt.NDArray[np.uint64]
#: ``equal(rows, ids)``: whether key ``rows[i]`` (of the keys looked up) is the key of ``ids[i]``.
Equal = Callable[[I64, I32], npt.NDArray[np.bool_]]
MAX_LOAD = 0.7


class SlotTable:
    """Hashes of keys -> ids; the keys themselves live with the caller."""

    __slots__ = ("_count", "table")

    def __init__(self) -> None:
        self.table: I32 = np.full(16, -1, np.int32)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes)

    def find(self, hashes: U64, equal: Equal) -> I32:
        """The id of each key (``-1``: absent), given the keys' hashes."""
        mask = np.uint64(self.table.shape[0] - 1)
        pos = (hashes & mask).astype(np.int64)
        found = np.full(hashes.shape[0], -1, np.int32)
        rows = np.arange(hashes.shape[0], dtype=np.int64)
        while rows.shape[0]:
            ids = self.table[pos[rows]]
            filled = ids >= 0
            hit = np.zeros(rows.shape[0], np.bool_)
            if filled.any():
                hit[filled] = equal(rows[filled], ids[filled])
            found[rows[hit]] = ids[hit]
            rows = rows[filled & ~hit]
            pos[rows] = (pos[rows] + 1) & int(mask)
        return found

    def add(self, hashes: U64, ids: I32, existing: Callable[[], tuple[U64, I32]]) -> None:
        """Insert keys known to be absent and pairwise different. When the table must grow,
        ``existing()`` gives the hashes and ids of every key already in it."""
        count = self._count + ids.shape[0]
        if count > MAX_LOAD * self.table.shape[0]:
            capacity = self.table.shape[0]
            while count > MAX_LOAD * capacity:
                capacity *= 2
            old_hashes, old_ids = existing()
            self.table = np.full(capacity, -1, np.int32)
            self._place(old_hashes, old_ids)
        self._place(hashes, ids)
        self._count = count

    def _place(self, hashes: U64, ids: I32) -> None:
        """Put each id at the first empty position of its probe sequence; of ids that reach
        one empty position together, the first takes it and the others probe on."""
        mask = self.table.shape[0] - 1
        pos = (hashes & np.uint64(mask)).astype(np.int64)
        pending = np.arange(ids.shape[0], dtype=np.int64)
        while pending.shape[0]:
            at = pos[pending]
            free = self.table[at] < 0
            _, first = np.unique(at[free], return_index=True)
            winners = pending[np.flatnonzero(free)[first]]
            self.table[pos[winners]] = ids[winners]
            placed = np.zeros(ids.shape[0], np.bool_)
            placed[winners] = True
            pending = pending[~placed[pending]]
            pos[pending] = (pos[pending] + 1) & mask


def mix(values: U64) -> U64:
    """A 64-bit finalizer (splitmix64): spreads the bits of ``values`` over the whole word."""
    z = values.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z
