"""Compiled byte placement for :mod:`connectors.json_rows`: each piece's bytes written straight
to their place in the output, one loop over the rows per piece.

The numpy assembly copies every piece into one padded ``rows x width`` matrix and selects the
kept bytes with a mask: it touches every padding byte twice and builds a mask as large as the
matrix. Here the row ends are computed first (the sum of the pieces' lengths), and each piece then
writes its bytes at ``pos[i]`` (the row's start plus the lengths of the pieces before it): a
constant, a run of each row of a byte matrix, a run of a flat buffer, or an integer's decimal
digits, which are written from the value itself (no digit matrix at all). Only the output's bytes
are written, once.

With numba absent, or ``SGM_NUMBA=0``, :mod:`connectors.json_rows` keeps the numpy assembly
(the tests run both and compare them with ``orjson``). Compiled code is cached on disk like the
engine's kernels (:mod:`monitor.index.kernels` says where).
"""

from __future__ import annotations

import numpy as np

from core.compiled import AVAILABLE, ENABLED, njit

COMPILED = ENABLED

#: Rows placed piece after piece before the next rows: their output (about a hundred bytes a row
#: for a triangle's record) stays in the cache while every piece writes into it.
BLOCK_ROWS = 2048

# The indices below are unsigned on purpose: numba checks every signed index for a negative
# value (Python's wraparound), which keeps the copy loops from being vectorised (about 7x
# slower on a triangle's records).

if AVAILABLE:

    @njit(cache=True, nogil=True)
    def place_constant(out, pos, lo, hi, text):  # type: ignore[no-untyped-def]
        """``text`` at ``pos[i]`` of rows ``lo:hi``, each ``pos[i]`` moved past it."""
        width = text.shape[0]
        for i in range(lo, hi):
            at = np.uint64(pos[i])
            for j in range(np.uint64(width)):
                out[at + j] = text[j]
            pos[i] += width

    @njit(cache=True, nogil=True)
    def place_runs(out, pos, lo, hi, cells, starts, lengths):  # type: ignore[no-untyped-def]
        """Row ``i``'s ``cells[i, starts[i]:starts[i] + lengths[i]]`` at ``pos[i]`` (a one-row
        ``cells`` is shared by every row)."""
        shared = cells.shape[0] == 1
        for i in range(lo, hi):
            row = cells[0] if shared else cells[i]
            at, first = np.uint64(pos[i]), np.uint64(starts[i])
            for j in range(np.uint64(lengths[i])):
                out[at + j] = row[first + j]
            pos[i] += lengths[i]

    @njit(cache=True, nogil=True)
    def place_flat(out, pos, lo, hi, data, starts, lengths):  # type: ignore[no-untyped-def]
        """Row ``i``'s ``data[starts[i]:starts[i] + lengths[i]]`` at ``pos[i]``."""
        for i in range(lo, hi):
            at, first = np.uint64(pos[i]), np.uint64(starts[i])
            for j in range(np.uint64(lengths[i])):
                out[at + j] = data[first + j]
            pos[i] += lengths[i]

    @njit(cache=True, nogil=True)
    def digit_counts(values):  # type: ignore[no-untyped-def]
        """The length of each value's decimal text, its ``-`` included."""
        n = values.shape[0]
        out = np.empty(n, np.int64)
        for i in range(n):
            v = values[i]
            length = 1
            if v < 0:
                length = 2
                magnitude = np.uint64(-(v + 1)) + np.uint64(1)
            else:
                magnitude = np.uint64(v)
            while magnitude >= np.uint64(10):
                magnitude //= np.uint64(10)
                length += 1
            out[i] = length
        return out

    @njit(cache=True, nogil=True)
    def place_integers(out, pos, lo, hi, values, lengths):  # type: ignore[no-untyped-def]
        """The decimal text of ``values[i]`` (``lengths[i]`` bytes; ``0``: nothing) at
        ``pos[i]``, written from its last digit back."""
        for i in range(lo, hi):
            length = lengths[i]
            if length == 0:
                continue
            v = values[i]
            if v < 0:
                out[pos[i]] = 45  # "-"
                magnitude = np.uint64(-(v + 1)) + np.uint64(1)
            else:
                magnitude = np.uint64(v)
            at = np.uint64(pos[i] + length)
            while True:  # at > 0: the row's text starts before it
                at -= np.uint64(1)
                out[at] = np.uint8(np.uint64(48) + magnitude % np.uint64(10))
                magnitude //= np.uint64(10)
                if magnitude == np.uint64(0):
                    break
            pos[i] += length


_warm = False


def warm() -> None:
    """Load (or compile, the first time on a machine) every kernel for the array layouts the
    assembly passes, so that the first epoch does not pay for it. Once per process."""
    global _warm
    if _warm or not COMPILED:
        return
    _warm = True
    out, text = np.zeros(8, np.uint8), np.zeros(2, np.uint8)
    zero, one = np.zeros(1, np.int64), np.ones(1, np.int64)
    for cells in (np.zeros((1, 2), np.uint8), np.broadcast_to(text, (1, 2))):
        place_runs(out, zero.copy(), 0, 1, cells, zero, one)
        place_constant(out, zero.copy(), 0, 1, cells[0])
    place_flat(out, zero.copy(), 0, 1, text, zero, one)
    place_integers(out, zero.copy(), 0, 1, one, digit_counts(one))
