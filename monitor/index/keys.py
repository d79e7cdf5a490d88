"""Dense ids for tuples of vertices: the keys of the adjacencies of relations of arity >= 3.

An adjacency proposes one position of a relation keyed by the values at all its other positions.
For a binary relation that key is one vertex; for arity ``k >= 3`` it is a tuple of ``k - 1``
vertices, which :class:`TupleKeys` maps to a dense key id. Tuples are folded left to right:
``(x1, x2)`` is packed into one ``int64`` and mapped to an id, that id is packed with ``x3``, and so
on, each fold with its own :class:`~monitor.index.intmap.IntMap`. Key id 0 is never handed out: it
stands for "no such tuple", whose adjacency row stays empty.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from monitor.index.intmap import IntMap
from monitor.index.levels import I32, I64, pack


class _Fold:
    """One fold: ``(left id, next vertex)`` -> id, and back."""

    def __init__(self) -> None:
        self.map = IntMap()
        self.left: I32 = np.zeros(1, np.int32)
        self.right: I32 = np.zeros(1, np.int32)

    @property
    def size(self) -> int:
        return int(self.left.shape[0])

    def encode(self, left: I32, right: I32, add: bool) -> I32:
        valid = left >= 0
        packed = pack(np.where(valid, left, 0), right)
        unique, inverse = np.unique(packed[valid], return_inverse=True)
        ids = self.map.find(unique)
        missing = ids < 0
        if add and missing.any():
            fresh = unique[missing]
            start = self.size
            new = np.arange(start, start + fresh.shape[0], dtype=np.int32)
            ids[missing] = new
            self.map.add(fresh, new)
            self.left = np.concatenate([self.left, (fresh >> 32).astype(np.int32)])
            self.right = np.concatenate([self.right, (fresh & 0xFFFFFFFF).astype(np.int32)])
        out = np.full(left.shape[0], -1, np.int32)
        out[valid] = ids[inverse.reshape(-1)]
        return out


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
        return sum(f.map.nbytes + f.left.nbytes + f.right.nbytes for f in self._folds)

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
            columns.append(fold.right[ids])
            ids = fold.left[ids]
        columns.append(ids)
        return columns[::-1]
