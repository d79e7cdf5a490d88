"""Dense ids for tuples of vertices: the keys of the adjacencies of relations of arity >= 3.

An adjacency proposes one position of a relation keyed by the values at all its other positions.
For a binary relation that key is one vertex; for arity ``k >= 3`` it is a tuple of ``k - 1``
vertices, which :class:`TupleKeys` maps to a dense key id. Tuples are folded left to right:
``(x1, x2)`` is packed into one ``int64`` and mapped to an id, that id is packed with ``x3``, and so
on, each fold with its own hash table. Key id 0 is never handed out: it
stands for "no such tuple", whose adjacency row stays empty.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from monitor.index import hashtable
from monitor.index.hashtable import U64, SlotTable, mix
from monitor.index.levels import I32, I64, grow, pack
from monitor.index.unique import unique_inverse


class _Fold:
    """One fold: ``(left id, next vertex)`` -> id, and back: the packed pair of each id in
    ``pairs`` (ids from 1), found through a :class:`~monitor.index.hashtable.SlotTable` of the
    packed pair's hash, which compares the pair itself."""

    def __init__(self) -> None:
        #: The pairs' hash; with :func:`~monitor.index.hashtable.mix`, lookups hash and probe in
        #: one compiled pass (:meth:`SlotTable.find_packed`).
        self.hash = mix
        self.table = SlotTable()
        self.pairs: I64 = np.zeros(1, np.int64)
        self._size = 1

    @property
    def size(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return self.table.nbytes + int(self.pairs.nbytes)

    def encode(self, left: I32, right: I32, add: bool) -> I32:
        """The id of each pair (``-1`` where ``left`` is): one probe per pair, no sort of the
        pairs first; the missing pairs, each once, get the next ids in order."""
        valid = left >= 0
        if self.hash is hashtable.mix:
            ids = self.table.find_packed(self.pairs, left, right)
        else:
            packed = pack(np.where(valid, left, 0), right)
            ids = self.table.find_values(self.hash(packed.view(np.uint64)), self.pairs, packed)
            ids[~valid] = -1
        if not add:
            return ids
        missing = np.flatnonzero((ids < 0) & valid)
        if missing.shape[0]:
            fresh, inverse = unique_inverse(pack(left[missing], right[missing]))
            ids[missing] = self._add(fresh, self.hash(fresh.view(np.uint64)))[inverse]
        return ids

    def decode(self, ids: I32) -> tuple[I32, I32]:
        """The left id and the vertex of each id's pair."""
        pairs = self.pairs[ids]
        return (pairs >> 32).astype(np.int32), (pairs & 0xFFFFFFFF).astype(np.int32)

    def _add(self, fresh: I64, hashes: U64) -> I32:
        """New ids for ``fresh``, distinct packed pairs unknown so far (``hashes``: theirs)."""
        start = self._size
        new = self._grow(fresh.shape[0])
        self.pairs[new] = fresh
        everything = np.arange(1, start, dtype=np.int32)
        self.table.add(
            hashes, new, lambda: (self.hash(self.pairs[everything].view(np.uint64)), everything)
        )
        return new

    def _grow(self, n: int) -> I32:
        """``n`` new ids; the pairs grow by an eighth (amortized copies)."""
        start, self._size = self._size, self._size + n
        if self._size > self.pairs.shape[0]:
            grow(self, "pairs", max(self._size, self.pairs.shape[0] * 9 // 8, 1024))
        return np.arange(start, self._size, dtype=np.int32)


class TupleKeys:
    """Tuples of ``width >= 2`` dense vertex ids <-> dense key ids (from 1; 0 means none)."""

    def __init__(self, width: int) -> None:
        if width < 2:
            raise ValueError("TupleKeys needs tuples of at least two vertices")
        self.width = width
        self._folds = [_Fold() for _ in range(width - 1)]

    @property
    def size(self) -> int:
        """One more than the largest key id handed out (the number of adjacency rows needed)."""
        return self._folds[-1].size

    @property
    def nbytes(self) -> int:
        return sum(f.nbytes for f in self._folds)

    def encode(self, columns: Sequence[I32], add: bool = True) -> I32:
        """Key id of each tuple; unknown tuples get new ids, or 0 if not ``add``."""
        ids = columns[0].astype(np.int32)
        for fold, column in zip(self._folds, columns[1:], strict=True):
            ids = fold.encode(ids, column, add)
        return np.where(ids < 0, np.int32(0), ids).astype(np.int32)

    def decode(self, keys: I64 | I32) -> list[I32]:
        """The tuple of each key id, as ``width`` columns."""
        columns: list[I32] = []
        ids = keys.astype(np.int32)
        for fold in reversed(self._folds):
            ids, vertex = fold.decode(ids)
            columns.append(vertex)
        columns.append(ids)
        return columns[::-1]
