"""Numbered ids: strings that are a prefix and a number (``tx-91``), as that number.

Event ids are mostly a constant prefix and a counter: transaction ids (``tx-91``), positions
(``payments.jsonl:1204``). Such an id costs its text and an end offset as text, 14 bytes for
``tx-1234567``; as a number and its prefix's code, 4 or 5 bytes (:class:`~monitor.index.idmap.
IdMap` keeps the numbers while every string id is numbered, with up to 255 prefixes: Kafka
positions ``payments:0@1204`` have one a partition). A string is *numbered* when it ends
in a run of 1 to :data:`MAX_DIGITS` decimal digits written canonically (no leading zero but
``0`` itself), the prefix being everything before that run, so the number and the prefix give
back exactly the string: ``tx-007`` and ``abc`` are not numbered, ``123`` is (empty prefix).
Parsing and formatting work on padded rows (:mod:`monitor.index.texts`), a loop per digit
position, never per string.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, ENABLED, njit
from monitor.index.levels import I64
from monitor.index.texts import U8

#: Digits of the numbers kept (below 10**18, so every one fits in ``int64``).
MAX_DIGITS = 18
#: The longest prefix kept (a file's path and a colon); longer ones keep their text.
MAX_PREFIX = 256
ZERO = ord("0")
_POWERS = 10 ** np.arange(MAX_DIGITS, dtype=np.int64)


def split(rows: U8, lengths: I64) -> tuple[npt.NDArray[np.bool_], I64, I64]:
    """Of every padded row: whether it is numbered, where its number starts (the length of its
    prefix) and the number (meaningless where it is not numbered)."""
    n, width = rows.shape
    inside = np.arange(width) < lengths[:, None]
    other = inside & ((rows < ZERO) | (rows > ZERO + 9))  # the bytes that are not digits
    starts = np.where(other.any(axis=1), width - np.argmax(other[:, ::-1], axis=1), 0)
    digits = lengths - starts
    ok = (digits >= 1) & (digits <= MAX_DIGITS) & (starts <= MAX_PREFIX)
    leading = rows[np.arange(n), np.minimum(starts, width - 1)] if width else np.zeros(n)
    ok &= (digits == 1) | (leading != ZERO)
    numbers = np.zeros(n, np.int64)
    if bool(ok.any()):
        for j in range(int(starts[ok].min()), min(width, int(lengths[ok].max()))):
            taking = (j >= starts) & (j < lengths) & ok
            numbers = np.where(taking, numbers * 10 + (rows[:, j].astype(np.int64) - ZERO), numbers)
    return ok, starts.astype(np.int64), numbers


def prefixes_of(rows: U8, starts: I64) -> tuple[list[bytes], I64]:
    """The distinct prefixes of padded rows (``rows[i, :starts[i]]``) and each row's index
    into them."""
    width = int(starts.max()) if starts.shape[0] else 0
    if width == 0:
        return [b""], np.zeros(starts.shape[0], np.int64)
    heads = np.where(np.arange(width) < starts[:, None], rows[:, :width], 0).astype(np.uint8)
    keyed = np.concatenate([heads, starts.astype("<u8").view(np.uint8).reshape(-1, 8)], 1)
    _, first, inverse = np.unique(
        np.ascontiguousarray(keyed).view(f"V{keyed.shape[1]}").reshape(-1),
        return_index=True,
        return_inverse=True,
    )
    found = [rows[i, : int(starts[i])].tobytes() for i in first.tolist()]  # a few prefixes
    return found, inverse.reshape(-1).astype(np.int64)


def digit_counts(numbers: I64) -> I64:
    """Decimal digits of each number (``0`` has one)."""
    return np.maximum(np.searchsorted(_POWERS, numbers, side="right"), 1).astype(np.int64)


def format_rows(
    prefixes: Sequence[bytes],
    codes: I64,
    numbers: I64,
    width: int | None = None,
    *,
    compiled: bool = ENABLED,
) -> tuple[U8, I64]:
    """The padded rows of ``prefixes[codes[i]] + str(numbers[i])`` and their lengths (the
    inverse of :func:`split`); ``width`` at least the longest (default: it, rounded up to 8)."""
    sizes = np.array([len(p) for p in prefixes], np.int64)
    heads = np.zeros((len(prefixes), max(int(sizes.max()), 1)), np.uint8)
    for i, prefix in enumerate(prefixes):  # a few prefixes, not a row each
        heads[i, : len(prefix)] = np.frombuffer(prefix, np.uint8)
    digits = digit_counts(numbers)
    lengths = sizes[codes] + digits
    if width is None:
        longest = int(lengths.max()) if lengths.shape[0] else 0
        width = max(8, -(-longest // 8) * 8)
    out = np.zeros((numbers.shape[0], width), np.uint8)
    if numbers.shape[0]:  # a prefix longer than the rows' width is none of theirs
        cut = min(width, heads.shape[1])
        out[:, :cut] = heads[codes, :cut]
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
