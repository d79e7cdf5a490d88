"""Stable match ids: the same query, vertices and events always give the same id.

``match_id`` is 16 lowercase hex digits of a 64-bit hash of the query's name, the external
vertex ids of the binding in head order and, for a query with edge variables, the external ids
of its events in order. It depends on nothing else (not on the epoch, the worker, the dense ids
or the process), so a consumer can deduplicate alerts or join a ``-1`` to its ``+1`` across
restarts and workers. The hash is fixed: splitmix64 (:func:`~monitor.index.hashtable.mix`)
over each id (an integer as its 64-bit value, a string as its UTF-8 bytes by
:func:`~monitor.index.texts.hash_rows`, each kind with its own tag), chained column by column.
Tests pin known values; changing it changes every consumer's ids.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from monitor.index.hashtable import U64, mix
from monitor.index.texts import hash_rows, pack_strings, padded

_INT_TAG = np.uint64(0x6A09E667F3BCC908)
_STR_TAG = np.uint64(0xBB67AE8584CAA73B)
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def match_ids(
    query: str, columns: Sequence[npt.NDArray[np.generic]], rows: int
) -> npt.NDArray[np.bytes_]:
    """The ids of ``rows`` matches of ``query`` whose external ids are ``columns``
    (vertices, then event ids), as 16 ASCII bytes each (``S16``: sinks write them as they
    are)."""
    h = np.full(rows, _string_hashes(np.array([query], dtype=object))[0], np.uint64)
    for column in columns:
        h = mix(h ^ id_hashes(column))
    return hex_digits(h)


def id_hashes(column: npt.NDArray[np.generic]) -> U64:
    """A 64-bit hash per id of a column of ``int`` and ``str`` ids."""
    if column.dtype.kind in "iu":
        return mix(column.astype(np.int64).view(np.uint64) ^ _INT_TAG)
    out = np.zeros(column.shape[0], np.uint64)
    strings = np.fromiter((type(v) is str for v in column), np.bool_, column.shape[0])
    if strings.any():
        out[strings] = _string_hashes(column[strings])
    ints = ~strings
    if ints.any():
        out[ints] = mix(column[ints].astype(np.int64).view(np.uint64) ^ _INT_TAG)
    return out


def _string_hashes(strings: npt.NDArray[np.generic]) -> U64:
    data, lengths = pack_strings(strings.tolist())
    starts = np.cumsum(lengths) - lengths
    return hash_rows(padded(data, starts, lengths), lengths) ^ _STR_TAG


def hex_digits(h: U64) -> npt.NDArray[np.bytes_]:
    """Each hash as 16 lowercase hex digits (whole-array: no formatting per value)."""
    raw = h.astype(">u8").view(np.uint8).reshape(-1, 8)
    digits = np.empty((h.shape[0], 16), np.uint8)
    digits[:, 0::2] = _HEX[raw >> 4]
    digits[:, 1::2] = _HEX[raw & 15]
    out: npt.NDArray[np.bytes_] = digits.view("S16").reshape(-1)
    return out
