"""Stable match ids: the same query, vertices and events always give the same id.

``match_id`` is 16 lowercase hex digits of a 64-bit hash of the query's name, the external
vertex ids of the binding in head order and, for a query with edge variables, the external ids
of its events in order. It depends on nothing else (not on the epoch, the worker, the dense ids
or the process), so a consumer can deduplicate alerts or join a ``-1`` to its ``+1`` across
restarts and workers. The hash is fixed: splitmix64 (:func:`~monitor.index.hashtable.mix`)
over each id (an integer as its 64-bit value, a string as its UTF-8 bytes by
:func:`~monitor.index.texts.hash_rows`, each kind with its own tag), chained column by column.
Tests pin known values; changing it changes every consumer's ids.

With numba, each column is hashed and chained in one compiled pass over the rows
(:func:`chain_integers`, :func:`chain_hashes`), and the hashes written as hex in one more
(:func:`compiled_hex`): about 9 ns a 4-clique's row, against 110 for the numpy functions below,
which stay as the fallback (``SGM_NUMBA=0``) and the reference the tests compare it with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, ENABLED, njit
from monitor.index.hashtable import U64, mix
from monitor.index.idmap import INT_ID_TAG, STR_ID_TAG
from monitor.index.texts import hash_rows, padded, string_places

_INT_TAG = INT_ID_TAG
_STR_TAG = STR_ID_TAG


@dataclass(frozen=True)
class Hashed:
    """A column of ids given by their hashes already (events' ids hashed from the stored bytes
    by :func:`~monitor.index.id_columns.id_hashes`, never decoded to Python strings)."""

    hashes: U64


#: Each byte's two lowercase hex digits, as the ``uint16`` whose bytes in memory they are.
_PAIRS = np.array([int.from_bytes(b"%02x" % i, "little") for i in range(256)], np.uint16)


def match_ids(
    query: str,
    columns: Sequence[npt.NDArray[np.generic] | Hashed],
    rows: int,
    *,
    compiled: bool | None = None,
) -> npt.NDArray[np.bytes_]:
    """The ids of ``rows`` matches of ``query`` whose external ids are ``columns``
    (vertices, then event ids), as 16 ASCII bytes each (``S16``: sinks write them as they
    are); ``compiled`` chooses the implementation (by default numba's where it is in use)."""
    compiled = COMPILED if compiled is None else compiled
    return hex_ids(match_hashes(query, columns, rows, compiled=compiled), compiled=compiled)


def hex_ids(h: U64, *, compiled: bool | None = None) -> npt.NDArray[np.bytes_]:
    """Hashes as the ids :func:`match_ids` writes."""
    if COMPILED if compiled is None else compiled:
        out: npt.NDArray[np.bytes_] = compiled_hex(h).view("S16")
        return out
    return hex_digits(h)


def match_hashes(
    query: str,
    columns: Sequence[npt.NDArray[np.generic] | Hashed],
    rows: int,
    *,
    compiled: bool | None = None,
) -> U64:
    """The 64-bit hashes whose hex digits :func:`match_ids` writes."""
    seed = _string_hashes(np.array([query], dtype=object))[0]
    h = np.full(rows, seed, np.uint64)
    if COMPILED if compiled is None else compiled:
        for column in columns:
            if isinstance(column, Hashed):
                chain_hashes(h, column.hashes)
            elif column.dtype.kind in "iu":
                chain_integers(h, column.astype(np.int64, copy=False))
            else:
                chain_hashes(h, id_hashes(column))
        return h
    for column in columns:
        h = mix(h ^ (column.hashes if isinstance(column, Hashed) else id_hashes(column)))
    return h


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
    data, starts, lengths = string_places(strings.tolist())
    return hash_rows(padded(data, starts, lengths), lengths) ^ _STR_TAG


def hex_digits(h: U64) -> npt.NDArray[np.bytes_]:
    """Each hash as 16 lowercase hex digits (whole-array: one table lookup per byte)."""
    raw = h.astype(">u8").view(np.uint8)
    out: npt.NDArray[np.bytes_] = _PAIRS[raw].view("S16").reshape(-1)
    return out


COMPILED = ENABLED

if AVAILABLE:
    from monitor.index.hashtable import mix_one

    @njit(cache=True, nogil=True)
    def chain_integers(h, column):  # type: ignore[no-untyped-def]
        """``h`` chained with the hash of each integer id of ``column``, in place."""
        for i in range(h.shape[0]):
            v = mix_one(np.uint64(column[i]) ^ np.uint64(0x6A09E667F3BCC908))
            h[i] = mix_one(h[i] ^ v)

    @njit(cache=True, nogil=True)
    def chain_hashes(h, hashes):  # type: ignore[no-untyped-def]
        """``h`` chained with ``hashes`` (of string ids, say), in place."""
        for i in range(h.shape[0]):
            h[i] = mix_one(h[i] ^ hashes[i])

    @njit(cache=True, nogil=True)
    def compiled_hex(h):  # type: ignore[no-untyped-def]
        """Each hash as 16 lowercase hex digits: a byte's two digits at a time (unsigned
        indices: no wraparound checks)."""
        rows = np.uint64(h.shape[0])
        out = np.empty(rows * np.uint64(8), np.uint16)
        for i in range(rows):
            x = h[i]
            at = i * np.uint64(8) + np.uint64(7)
            for _ in range(8):
                out[at] = _PAIRS[x & np.uint64(255)]
                x >>= np.uint64(8)
                at -= np.uint64(1)
        return out


def warm() -> None:
    """Load (or compile, the first time on a machine) the compiled ids before the first
    epoch."""
    if COMPILED:
        h = np.zeros(1, np.uint64)
        chain_integers(h, np.zeros(1, np.int64))
        chain_hashes(h, h.copy())
        compiled_hex(h)
