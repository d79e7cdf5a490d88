"""The byte layout of an id map's ids (:meth:`~monitor.index.idmap.IdMap.export`), which the
event state stores and a compaction's new map reads back.

Little-endian, that of the vertex dictionary's export: ``n`` (u32); per id a kind byte (0 int,
1 str); per id the ``int64`` value (0 for strings); per string its UTF-8 length (u32); the UTF-8
bytes, one string after the other.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from monitor.index.levels import I64
from monitor.index.texts import U8, padded


def pack(
    kinds: npt.NDArray[np.bool_], ints: I64, lengths: npt.NDArray[np.uint32], texts: bytes
) -> bytes:
    """The blob of ids of these kinds (True: a string), integer values (any for strings) and
    strings (their lengths, their bytes one after the other)."""
    head = np.uint32(kinds.shape[0]).astype("<u4").tobytes()
    values = ints.astype("<i8").tobytes()
    sizes = lengths.astype("<u4").tobytes()
    return b"".join([head, kinds.astype(np.uint8).tobytes(), values, sizes, texts])


def runs(blob: bytes, chunk: int) -> Iterator[tuple[I64 | None, U8 | None, I64 | None]]:
    """The ids of a blob in order, by runs of one kind of at most ``chunk`` ids: integer values
    as ``(values, None, None)``, strings as ``(None, padded rows, lengths)``."""
    n = int(np.frombuffer(blob, "<u4", 1)[0])
    kinds = np.frombuffer(blob, np.uint8, n, 4).astype(np.bool_)
    ints = np.frombuffer(blob, "<i8", n, 4 + n).astype(np.int64)
    lengths = np.frombuffer(blob, "<u4", int(kinds.sum()), 4 + 9 * n).astype(np.int64)
    offset = 4 + 9 * n + 4 * lengths.shape[0]
    if offset + int(lengths.sum()) != len(blob):
        raise ValueError(f"event id blob of {len(blob)} bytes does not hold {n} ids")
    text = np.frombuffer(blob, np.uint8, len(blob) - offset, offset)
    starts = np.zeros(lengths.shape[0], np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    changes = np.flatnonzero(kinds[1:] != kinds[:-1]) + 1
    edges = sorted({0, n, *changes.tolist(), *range(0, n, chunk)})
    nth_string: I64 = np.cumsum(kinds, dtype=np.int64) - kinds
    for lo, hi in itertools.pairwise(edges):
        if kinds[lo]:
            i, j = int(nth_string[lo]), int(nth_string[lo]) + hi - lo
            yield None, padded(text, starts[i:j], lengths[i:j]), lengths[i:j]
        else:
            yield ints[lo:hi], None, None
