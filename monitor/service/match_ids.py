"""Stable match ids: the same query, vertices and events always give the same id.

``match_id`` is 16 lowercase hex digits of a 64-bit hash of the query's name, the external
vertex ids of the binding in head order and, for a query with edge variables, the external ids
of its events in order. It depends on nothing else (not on the epoch, the worker, the dense ids
or the process), so a consumer can deduplicate alerts or join a ``-1`` to its ``+1`` across
restarts and workers. The hash is fixed: splitmix64 (:func:`~monitor.index.hashtable.mix`)
over each id (an integer as its 64-bit value, a string as its UTF-8 bytes by
:func:`~monitor.index.texts.hash_rows`, each kind with its own tag), chained column by column.
Tests pin known values; changing it changes every consumer's ids.

With numba, integer columns are hashed, chained and written as hex in one compiled pass over the
rows (:func:`compiled_ids`); the numpy functions below are the fallback (``SGM_NUMBA=0``) and the
reference the tests compare it with.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from monitor.index.hashtable import U64, mix
from monitor.index.texts import hash_rows, pack_strings, padded

_INT_TAG = np.uint64(0x6A09E667F3BCC908)
_STR_TAG = np.uint64(0xBB67AE8584CAA73B)
#: Each byte's two lowercase hex digits, as the ``uint16`` whose bytes in memory they are.
_PAIRS = np.array([int.from_bytes(b"%02x" % i, "little") for i in range(256)], np.uint16)


def match_ids(
    query: str,
    columns: Sequence[npt.NDArray[np.generic]],
    rows: int,
    *,
    compiled: bool | None = None,
) -> npt.NDArray[np.bytes_]:
    """The ids of ``rows`` matches of ``query`` whose external ids are ``columns``
    (vertices, then event ids), as 16 ASCII bytes each (``S16``: sinks write them as they
    are); ``compiled`` chooses the implementation (by default numba's where it is in use)."""
    seed = _string_hashes(np.array([query], dtype=object))[0]
    if COMPILED if compiled is None else compiled:
        values = np.empty((len(columns), rows), np.uint64)
        raw = np.zeros(len(columns), np.bool_)
        for k, column in enumerate(columns):
            raw[k] = column.dtype.kind in "iu"
            values[k] = column.astype(np.int64).view(np.uint64) if raw[k] else id_hashes(column)
        out: npt.NDArray[np.bytes_] = compiled_ids(seed, values, raw).view("S16").reshape(-1)
        return out
    h = np.full(rows, seed, np.uint64)
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
    """Each hash as 16 lowercase hex digits (whole-array: one table lookup per byte)."""
    raw = h.astype(">u8").view(np.uint8)
    out: npt.NDArray[np.bytes_] = _PAIRS[raw].view("S16").reshape(-1)
    return out


try:
    from numba import njit
except ImportError:  # pragma: no cover - numba is a dependency; numpy is the fallback
    COMPILED = False
else:
    COMPILED = os.environ.get("SGM_NUMBA", "1").strip().lower() not in ("0", "false", "no", "off")

_DIGITS = np.frombuffer(b"0123456789abcdef", np.uint8).copy()

if COMPILED:

    @njit(cache=True, nogil=True, inline="always")
    def _splitmix(z):  # type: ignore[no-untyped-def]
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
        return z

    @njit(cache=True, nogil=True)
    def compiled_ids(seed, values, raw):  # type: ignore[no-untyped-def]
        """Per row: ``seed`` chained with each column's hash (``values``: an integer's 64 bits
        where ``raw`` says so, hashed here, else the hash already), as 16 hex digits."""
        columns, rows = values.shape
        out = np.empty((rows, 16), np.uint8)
        digits = _DIGITS
        for i in range(rows):
            h = np.uint64(seed)
            for k in range(columns):
                v = values[k, i]
                if raw[k]:
                    v = _splitmix(v ^ np.uint64(0x6A09E667F3BCC908))
                h = _splitmix(h ^ v)
            for j in range(16):
                out[i, 15 - j] = digits[np.uint64(h >> np.uint64(4 * j)) & np.uint64(15)]
        return out


def warm() -> None:
    """Load (or compile, the first time on a machine) the compiled ids before the first
    epoch."""
    if COMPILED:
        compiled_ids(np.uint64(0), np.zeros((1, 1), np.uint64), np.ones(1, np.bool_))
