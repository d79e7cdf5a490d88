"""Numbered ids: strings that are a prefix and a number (``tx-91``), as that number.

Event ids are mostly a constant prefix and a counter: transaction ids (``tx-91``), positions
(``payments.jsonl:1204``). Such an id costs its text and an end offset as text, 14 bytes for
``tx-1234567``; as a number under its map's one prefix, 4 bytes (:class:`~monitor.index.idmap.
IdMap` keeps the numbers while every string id is numbered). A string is *numbered* when it ends
in a run of 1 to :data:`MAX_DIGITS` decimal digits written canonically (no leading zero but
``0`` itself), the prefix being everything before that run, so the number and the prefix give
back exactly the string: ``tx-007`` and ``abc`` are not numbered, ``123`` is (empty prefix).
Parsing and formatting work on padded rows (:mod:`monitor.index.texts`), a loop per digit
position, never per string.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, ENABLED, njit
from monitor.index.levels import I64
from monitor.index.texts import U8

#: Digits of the numbers kept (below 10**18, so every one fits in ``int64``).
MAX_DIGITS = 18
#: The longest prefix kept; longer ones keep their text.
MAX_PREFIX = 64
ZERO = ord("0")
_POWERS = 10 ** np.arange(MAX_DIGITS, dtype=np.int64)


def parse(rows: U8, lengths: I64, prefix: bytes | None) -> tuple[bytes, I64] | None:
    """The prefix and the number of every padded row, or None unless every row is numbered
    with one prefix (``prefix`` when given, else the first row's)."""
    if not rows.shape[0]:
        return (prefix or b""), np.empty(0, np.int64)
    if prefix is None:
        prefix = prefix_of(rows[0, : int(lengths[0])].tobytes())
        if prefix is None:
            return None
    ok, numbers = numbers_of(rows, lengths, prefix)
    return (prefix, numbers) if bool(ok.all()) else None


def prefix_of(text: bytes) -> bytes | None:
    """The prefix of one numbered string (None: it is not numbered)."""
    digits = len(text) - len(text.rstrip(b"0123456789"))
    if not 1 <= digits <= MAX_DIGITS or len(text) - digits > MAX_PREFIX:
        return None
    if digits > 1 and text[-digits] == ZERO:
        return None
    return text[:-digits]


def numbers_of(rows: U8, lengths: I64, prefix: bytes) -> tuple[npt.NDArray[np.bool_], I64]:
    """Which padded rows are ``prefix`` and a number (:func:`prefix_of`), and that number."""
    n, width = rows.shape
    at = len(prefix)
    digits = lengths - at
    ok = (digits >= 1) & (digits <= MAX_DIGITS)
    if at >= width or not bool(ok.any()):
        return np.zeros(n, np.bool_), np.zeros(n, np.int64)
    ok &= (rows[:, :at] == np.frombuffer(prefix, np.uint8)).all(axis=1)
    ok &= (digits == 1) | (rows[:, at] != ZERO)
    numbers = np.zeros(n, np.int64)
    for j in range(at, min(width, at + MAX_DIGITS)):
        inside = j < lengths
        digit = rows[:, j].astype(np.int64) - ZERO
        ok &= ~inside | ((digit >= 0) & (digit <= 9))
        numbers = np.where(inside, numbers * 10 + digit, numbers)
    return ok, numbers


def digit_counts(numbers: I64) -> I64:
    """Decimal digits of each number (``0`` has one)."""
    return np.maximum(np.searchsorted(_POWERS, numbers, side="right"), 1).astype(np.int64)


def format_rows(
    prefix: bytes, numbers: I64, width: int | None = None, *, compiled: bool = ENABLED
) -> tuple[U8, I64]:
    """The padded rows of ``prefix + str(number)`` and their lengths (the inverse of
    :func:`parse`); ``width`` at least the longest (default: it, rounded up to 8 bytes)."""
    digits = digit_counts(numbers)
    lengths = len(prefix) + digits
    if width is None:
        longest = int(lengths.max()) if lengths.shape[0] else 0
        width = max(8, -(-longest // 8) * 8)
    out = np.zeros((numbers.shape[0], width), np.uint8)
    out[:, : len(prefix)] = np.frombuffer(prefix, np.uint8)
    if compiled:  # a loop per row: ~10x the digit-by-digit scatter below
        _write_digits(numbers.astype(np.int64), lengths, out)
        return out, lengths
    rest = numbers.astype(np.int64, copy=True)
    rows = np.arange(numbers.shape[0])
    for k in range(int(digits.max()) if digits.shape[0] else 0):  # the k-th digit from the end
        has = digits > k
        out[rows[has], lengths[has] - 1 - k] = ZERO + rest[has] % 10
        rest //= 10
    return out, lengths


if AVAILABLE:

    @njit(cache=True, nogil=True)
    def _write_digits(numbers, lengths, out):  # type: ignore[no-untyped-def]
        """The digits of ``numbers[i]`` end row ``i`` of ``out`` at ``lengths[i]``."""
        for i in range(numbers.shape[0]):
            rest, j = numbers[i], lengths[i] - 1
            while True:
                out[i, j] = ZERO + rest % 10
                rest //= 10
                j -= 1
                if rest == 0:
                    break
