"""The partitioned vertex dictionary: external ids (``int`` or ``str``) <-> global dense ids.

No process holds the whole dictionary. An external id belongs to the shard its stable hash
names (an integer's 64-bit value mixed, a string's UTF-8 bytes hashed: the same in every
process and every run); that shard numbers it in its own
:class:`~monitor.index.dictionary.VertexDictionary` (local id ``l``) and the id the engine reads
is ``l * S + s``. So the vertex's adjacencies live on the shard that numbered it (``g % S``)
under the local key ``g // S``, dense on every shard, whatever the external ids look like.

The driver encodes an epoch's columns in one round (:meth:`PartitionedVertices.encode`) and
decodes a batch of global ids in one round, each distinct id once
(:meth:`PartitionedVertices.decode`). Comparisons such as ``a < b`` read the external order
(integers by value, strings lexicographically, every integer before every string): the
distinct ids compared are decoded and ranked among themselves
(:meth:`PartitionedVertices.ranks`).

A shard keeps its dictionary durable as entries appended per epoch
(:meth:`ShardVertices.added`, the single process's :meth:`VertexDictionary.export` blob).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from core.errors import InputError
from monitor.index.dictionary import MAX_VERTICES, VertexDictionary, integer_ids
from monitor.index.hashtable import mix
from monitor.index.levels import I32, I64
from monitor.index.texts import hash_rows, padded, string_places, unique_strings
from monitor.index.unique import first_appearances

if TYPE_CHECKING:
    from monitor.distributed.shard_calls import Shards

#: External ids as the input has them: ``int64``, or ``object`` (``int`` and ``str``).
External = npt.NDArray[Any]


def owners(column: External, shards: int) -> I64:
    """The shard each external id belongs to: its stable 64-bit hash modulo ``shards``."""
    if column.dtype == np.int64:
        return (mix(column.view(np.uint64)) % np.uint64(shards)).astype(np.int64)
    hashes = np.empty(column.shape[0], np.uint64)
    is_int, ints = integer_ids(column)
    if is_int.any():
        hashes[is_int] = mix(ints.view(np.uint64))
    if not is_int.all():
        strings = [v if type(v) is str else str(v) for v in column[~is_int].tolist()]
        buffer, starts, lengths = string_places(strings)
        hashes[~is_int] = hash_rows(padded(buffer, starts, lengths), lengths)
    return (hashes % np.uint64(shards)).astype(np.int64)


class ShardVertices:
    """Shard ``shard`` of ``shards``'s part of the dictionary."""

    def __init__(self, shard: int, shards: int) -> None:
        self.shard = shard
        self.shards = shards
        self.dictionary = VertexDictionary()
        #: Entries below this local id are durable (written with an epoch).
        self.exported = 0

    def __len__(self) -> int:
        return len(self.dictionary)

    def encode(self, values: External, add: npt.NDArray[np.bool_]) -> I32:
        """Global ids of external ids this shard owns (new ones numbered where ``add``; -1
        for an unknown id not added)."""
        local = np.empty(values.shape[0], np.int32)
        if add.all():
            local[:] = self.dictionary.encode(values, add=True)
        else:
            local[add] = self.dictionary.encode(values[add], add=True)
            local[~add] = self.dictionary.encode(values[~add], add=False)
        if len(self.dictionary) * self.shards > MAX_VERTICES:
            raise InputError(f"more than {MAX_VERTICES} distinct vertices over all shards")
        out: I32 = np.where(local >= 0, local * self.shards + self.shard, -1).astype(np.int32)
        return out

    def decode(self, ids: npt.NDArray[np.integer]) -> External:
        """External ids of global ids this shard numbered."""
        return self.dictionary.decode(ids.astype(np.int64) // self.shards)

    def added(self) -> tuple[int, bytes] | None:
        """The entries numbered since the last call (None: none): the first one's local id,
        and a blob for :meth:`restore`; they count as durable from now on."""
        start = self.exported
        if len(self.dictionary) == start:
            return None
        blob = self.dictionary.export(start)
        self.exported = len(self.dictionary)
        return start, blob

    def restore(self, blobs: Sequence[bytes]) -> None:
        """Load the entries of :meth:`added` blobs, in the order they were written."""
        for blob in blobs:
            self.dictionary.restore(blob)
        self.exported = len(self.dictionary)


class PartitionedVertices:
    """The driver's side: each batch of ids routed to its shards in one round."""

    def __init__(self, shards: Shards) -> None:
        self.shards = shards

    def encode(
        self, columns: Sequence[External], add: Sequence[npt.NDArray[np.bool_]]
    ) -> list[I32]:
        """Global ids of external id columns (new vertices numbered where ``add``; -1 for an
        unknown vertex not added), every column in one round."""
        count = self.shards.count
        requests: list[list[tuple[External, npt.NDArray[np.bool_]]]] = [[] for _ in range(count)]
        where: list[list[tuple[int, int, npt.NDArray[np.intp]]]] = []
        for column, adding in zip(columns, add, strict=True):
            owner = owners(column, count)
            rows = np.argsort(owner, kind="stable")
            bounds = np.searchsorted(owner[rows], np.arange(count + 1))
            mine = []
            for s in range(count):
                part = rows[bounds[s] : bounds[s + 1]]
                if part.shape[0]:
                    mine.append((s, len(requests[s]), part))
                    requests[s].append((column[part], adding[part]))
            where.append(mine)
        answers = self.shards.call("encode_ids", [(r,) if r else None for r in requests])
        out = []
        for column, mine in zip(columns, where, strict=True):
            ids = np.empty(column.shape[0], np.int32)
            for s, j, part in mine:
                ids[part] = answers[s][j]
            out.append(ids)
        return out

    def decode(self, columns: Sequence[npt.NDArray[np.integer]]) -> list[External]:
        """External ids of global id columns, each distinct id sent once, in one round:
        ``int64`` columns when every id is an integer, else ``object``."""
        values, inverse = self._distinct(columns)
        return _split(values[inverse], columns)

    def ranks(self, columns: Sequence[npt.NDArray[np.integer]]) -> list[I64]:
        """Keys ordering the vertices of ``columns`` as their external ids are ordered
        (comparable within one call): the distinct ids decoded and ranked among themselves."""
        values, inverse = self._distinct(columns)
        if values.dtype == np.int64:
            return _split(values[inverse], columns)
        is_int, int_values = integer_ids(values)
        rank = np.empty(values.shape[0], np.int64)
        ints, strings = np.flatnonzero(is_int), np.flatnonzero(~is_int)
        rank[ints] = np.argsort(np.argsort(int_values, kind="stable"))
        # Python's order of str (code points), as the single process's dictionary sorts them.
        _, string_rank = unique_strings(values[strings])
        rank[strings] = string_rank + ints.shape[0]
        return _split(rank[inverse], columns)

    def _distinct(self, columns: Sequence[npt.NDArray[np.integer]]) -> tuple[External, I64]:
        """The external ids of the distinct global ids of ``columns`` (one round), and where
        each row of the columns, one after the other, is among them."""
        if not sum(c.shape[0] for c in columns):
            return np.empty(0, np.int64), np.empty(0, np.int64)
        distinct, inverse = first_appearances(np.concatenate(columns))  # (hashed: no sort)
        count = self.shards.count
        owner = distinct.astype(np.int64) % count
        parts = [np.flatnonzero(owner == s) for s in range(count)]
        answers = self.shards.call(
            "decode_ids", [(distinct[p],) if p.shape[0] else None for p in parts]
        )
        ints = all(a.dtype == np.int64 for a in answers if a is not None)
        values: External = np.empty(distinct.shape[0], np.int64 if ints else object)
        for part, answer in zip(parts, answers, strict=True):
            if answer is not None:
                values[part] = answer
        return values, inverse


def _split(rows: npt.NDArray[Any], columns: Sequence[npt.NDArray[Any]]) -> list[Any]:
    """``rows`` (the columns' rows one after the other) cut back into columns."""
    bounds = np.cumsum([0] + [c.shape[0] for c in columns]).tolist()
    return [rows[lo:hi] for lo, hi in pairwise(bounds)]
