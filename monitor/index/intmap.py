"""Maps from ``int64`` keys to dense ``int32`` ids, with array operations only.

Two sorted runs: a large one and a small recent one, merged into the large one when it grows
past an eighth of it, so adding a batch costs a binary search plus an amortized merge.
"""

from __future__ import annotations

import numpy as np

from monitor.index.levels import I32, I64, search


class IntMap:
    """``int64`` key -> ``int32`` id; ids are given by the caller, keys never removed."""

    __slots__ = ("_big_ids", "_big_keys", "_recent_ids", "_recent_keys")

    def __init__(self) -> None:
        self._big_keys: I64 = np.empty(0, np.int64)
        self._big_ids: I32 = np.empty(0, np.int32)
        self._recent_keys: I64 = np.empty(0, np.int64)
        self._recent_ids: I32 = np.empty(0, np.int32)

    def __len__(self) -> int:
        return int(self._big_keys.shape[0] + self._recent_keys.shape[0])

    @property
    def nbytes(self) -> int:
        return int(
            self._big_keys.nbytes
            + self._big_ids.nbytes
            + self._recent_keys.nbytes
            + self._recent_ids.nbytes
        )

    def find(self, keys: I64) -> I32:
        """The id of each key, or -1 where the key is unknown."""
        ids = _find(self._big_keys, self._big_ids, keys)
        if self._recent_keys.shape[0]:
            missing = ids < 0
            if missing.any():
                ids[missing] = _find(self._recent_keys, self._recent_ids, keys[missing])
        return ids

    def add(self, keys: I64, ids: I32) -> None:
        """Insert unknown, unique, sorted keys with their ids."""
        pos = np.searchsorted(self._recent_keys, keys)
        self._recent_keys = np.insert(self._recent_keys, pos, keys)
        self._recent_ids = np.insert(self._recent_ids, pos, ids)
        if self._recent_keys.shape[0] * 8 > self._big_keys.shape[0]:
            pos = np.searchsorted(self._big_keys, self._recent_keys)
            self._big_keys = np.insert(self._big_keys, pos, self._recent_keys)
            self._big_ids = np.insert(self._big_ids, pos, self._recent_ids)
            self._recent_keys = np.empty(0, np.int64)
            self._recent_ids = np.empty(0, np.int32)

    def items(self) -> tuple[I64, I32]:
        """Every key (sorted) and its id."""
        if not self._recent_keys.shape[0]:
            return self._big_keys, self._big_ids
        pos = np.searchsorted(self._big_keys, self._recent_keys)
        return (
            np.insert(self._big_keys, pos, self._recent_keys),
            np.insert(self._big_ids, pos, self._recent_ids),
        )


def _find(sorted_keys: I64, ids: I32, keys: I64) -> I32:
    if not sorted_keys.shape[0]:
        return np.full(keys.shape[0], -1, np.int32)
    pos = np.minimum(search(sorted_keys, keys), sorted_keys.shape[0] - 1)
    found: I32 = np.where(sorted_keys[pos] == keys, ids[pos], np.int32(-1)).astype(np.int32)
    return found
