"""Routing: a batch's rows split by the shard of their keys, one round of requests, and the
answers put back in the batch's order.

A key of a binary relation is a global vertex id, which lives on shard ``id % S``; a key of a
relation of three or more ids is a tuple, which lives on the shard its hash names
(:func:`tuple_owners`). :func:`copies` gives each position's copy of a relation's tuples with the
shard of each; :func:`exchange` makes one round of a stage's requests; :func:`scattered` and
:func:`proposals` put the answers back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.distributed.shard_calls import Shards
from monitor.index.hashtable import mix
from monitor.index.levels import I32, I64


def copies(columns: Sequence[I32], shards: int) -> list[tuple[int, I64, list[I32], I32]]:
    """Each position's copy of a relation's tuples: ``(position, owning shards, key columns,
    values)``; a binary relation's forward (1: keyed by ``src``) and reverse (0: by ``dst``), a
    unary one's values under key 0, a wider one's at every position keyed by the others."""
    if len(columns) == 1:
        zeros = np.zeros(columns[0].shape[0], np.int32)
        return [(0, zeros.astype(np.int64), [zeros], columns[0])]
    if len(columns) == 2:
        src, dst = columns
        by_src, by_dst = (src % shards).astype(np.int64), (dst % shards).astype(np.int64)
        return [(1, by_src, [src], dst), (0, by_dst, [dst], src)]
    out = []
    for position in range(len(columns)):
        others = [c for p, c in enumerate(columns) if p != position]
        out.append((position, tuple_owners(others, shards), others, columns[position]))
    return out


def tuple_owners(columns: Sequence[npt.NDArray[np.integer]], shards: int) -> I64:
    """The shard each tuple of global ids belongs to (as a key of a relation of three or more
    ids): a stable hash of its ids, modulo ``shards``."""
    hashes = mix(columns[0].astype(np.uint64))
    for column in columns[1:]:
        hashes = mix(hashes ^ column.astype(np.uint64))
    return (hashes % np.uint64(shards)).astype(np.int64)


class Split:
    """A batch's rows grouped by the shard of their keys: :meth:`part` gives shard ``s``'s, in
    batch order. One comparison pass per shard (for a few shards, cheaper than a sort)."""

    def __init__(self, keys: npt.NDArray[np.integer], shards: int) -> None:
        self.n = int(keys.shape[0])
        if shards == 1:
            self.parts = [np.arange(self.n)]
        else:
            owner = keys % shards
            self.parts = [np.flatnonzero(owner == s) for s in range(shards)]

    def part(self, s: int) -> npt.NDArray[np.intp] | None:
        """Shard ``s``'s rows (None when it has none)."""
        rows = self.parts[s]
        return rows if rows.shape[0] else None


#: A request of a round: the view (relation, position, cut, and for an extension the other
#: extenders' views), the keys, and arrays beside the keys (the values to intersect, or the
#: other extenders' keys of the same prefixes).
Request = tuple[tuple[Any, ...], npt.NDArray[np.integer], tuple[npt.NDArray[Any], ...]]

#: Per request, per shard that holds any of its keys: the request's rows there and the answer.
Answers = list[list[tuple[npt.NDArray[np.intp], Any]]]


def exchange(shards: Shards, method: str, requests: Sequence[Request]) -> Answers:
    """One round: every request's keys split by shard, one call per shard carrying its part of
    every request (``method`` of a :class:`~monitor.distributed.shard.ShardIndex`, ``_many``)."""
    parts: list[list[tuple[Any, ...]]] = [[] for _ in range(shards.count)]
    where: list[list[tuple[int, int, npt.NDArray[np.intp]]]] = []
    for head, keys, extra in requests:
        split = Split(keys, shards.count)
        mine = []
        for s in range(shards.count):
            rows = split.part(s)
            if rows is not None:
                mine.append((s, len(parts[s]), rows))
                whole = rows.shape[0] == split.n  # (one shard holds them all: no gather)
                part = (keys if whole else keys[rows]).astype(np.int32)  # (4 bytes a key cross)
                parts[s].append((*head, part, *(x if whole else x[rows] for x in extra)))
        where.append(mine)
    answers = shards.call(f"{method}_many", [(p,) if p else None for p in parts])
    return [[(rows, answers[s][j]) for s, j, rows in mine] for mine in where]


def scattered(answers: list[tuple[npt.NDArray[np.intp], Any]], n: int, dtype: Any) -> Any:
    """Per-shard answers of one request put back in the batch's order."""
    if len(answers) == 1 and answers[0][0].shape[0] == n:
        return np.asarray(answers[0][1]).astype(dtype, copy=False)  # (one shard answered all)
    out = np.zeros(n, dtype)
    for rows, answer in answers:
        out[rows] = answer
    return out


def proposals(answers: list[tuple[npt.NDArray[np.intp], Any]], n: int) -> tuple[I64, I32]:
    """Per-shard proposals of one request of ``n`` keys as the single process makes them:
    ``(owner, value)`` with each owner's values together, owners in the batch's order. Each
    shard answers how many values each of its keys has, and the values; they are placed at
    their keys' offsets in one pass (no sort)."""
    if len(answers) == 1 and answers[0][0].shape[0] == n:  # (one shard answered all)
        count, values = answers[0][1]
        return np.repeat(np.arange(n, dtype=np.int64), count), values
    counts = np.zeros(n, np.int64)
    for rows, (count, _) in answers:
        counts[rows] = count
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    value = np.empty(int(offsets[-1]), np.int32)
    for rows, (count, values) in answers:
        if values.shape[0]:
            count = count.astype(np.int64)
            starts = np.cumsum(count) - count  # (each key's first value in this answer)
            at = np.arange(values.shape[0], dtype=np.int64) + np.repeat(
                offsets[rows] - starts, count
            )
            value[at] = values
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    return owner, value
