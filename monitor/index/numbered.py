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

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, ENABLED, njit
from monitor.index.levels import I32, I64, grow
from monitor.index.texts import U8

#: Digits of the numbers kept (below 10**18, so every one fits in ``int64``).
MAX_DIGITS = 18
#: The longest prefix kept (a file's path and a colon); longer ones keep their text.
MAX_PREFIX = 256
ZERO = ord("0")
_POWERS = 10 ** np.arange(MAX_DIGITS, dtype=np.int64)


def split(
    rows: U8, lengths: I64, *, compiled: bool = ENABLED
) -> tuple[npt.NDArray[np.bool_], I64, I64]:
    """Of every padded row: whether it is numbered, where its number starts (the length of its
    prefix) and the number (meaningless where it is not numbered)."""
    n, width = rows.shape
    if compiled:  # a loop per row, back from its end: ~10x the column-by-column pass below
        ok = np.zeros(n, np.bool_)
        starts = np.zeros(n, np.int64)
        numbers = np.zeros(n, np.int64)
        _split_rows(rows, lengths.astype(np.int64, copy=False), ok, starts, numbers)
        return ok, starts, numbers
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
    if (starts == width).all() and (rows[:, :width] == rows[0, :width]).all():
        return [rows[0, :width].tobytes()], np.zeros(starts.shape[0], np.int64)  # one prefix
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


def warm() -> None:
    """Load (or compile, the first time on a machine) the digits' loop before the first
    epoch."""
    if ENABLED:
        _write_digits(np.zeros(1, np.int64), np.ones(1, np.int64), np.zeros((1, 8), np.uint8))
        split(np.zeros((1, 8), np.uint8), np.ones(1, np.int64))


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

    @njit(cache=True, nogil=True)
    def _split_rows(rows, lengths, ok, starts, numbers):  # type: ignore[no-untyped-def]
        """:func:`split` row by row: the trailing digit run of each row, and its number."""
        for i in range(rows.shape[0]):
            end = lengths[i]
            start = end
            while start > 0 and ZERO <= rows[i, start - 1] <= ZERO + 9:
                start -= 1
            starts[i] = start
            digits = end - start
            if digits < 1 or digits > MAX_DIGITS or start > MAX_PREFIX:
                continue
            if digits > 1 and rows[i, start] == ZERO:
                continue
            ok[i] = True
            value = 0
            for j in range(start, end):
                value = value * 10 + (rows[i, j] - ZERO)
            numbers[i] = value


class NumberedStrings:
    """The numbered string ids of an id map, by slot: each one's number (``uint32``, ``int64``
    once one passes 2**32) and, once there are two prefixes, its prefix's code (``uint8``)."""

    def __init__(self, capacity: int) -> None:
        self.prefixes: list[bytes] = []
        self._index: dict[bytes, int] = {}
        self.numbers: npt.NDArray[np.integer[Any]] = np.zeros(capacity, np.uint32)
        self.codes: npt.NDArray[np.uint8] | None = None

    def breakdown(self) -> dict[str, int]:
        out = {"numbers": int(self.numbers.nbytes)}
        if self.codes is not None:
            out["prefix codes"] = int(self.codes.nbytes)
        return out

    def subset(self, slots: npt.NDArray[np.integer], capacity: int) -> NumberedStrings:
        """The ids of ``slots`` in slots ``0 ..`` of a new store of ``capacity``."""
        out = NumberedStrings(0)
        out.prefixes, out._index = list(self.prefixes), dict(self._index)
        out.numbers = np.zeros(max(capacity, slots.shape[0]), self.numbers.dtype)
        out.numbers[: slots.shape[0]] = self.numbers[slots]
        if self.codes is not None:
            out.codes = np.zeros(out.numbers.shape[0], np.uint8)
            out.codes[: slots.shape[0]] = self.codes[slots]
        return out

    def grow(self, capacity: int) -> None:
        grow(self, "numbers", capacity)
        if self.codes is not None:
            grow(self, "codes", capacity)

    @property
    def several(self) -> bool:
        """Whether there are two prefixes or more (then only a table finds the ids)."""
        return len(self.prefixes) > 1

    def prefix_codes(
        self, rows: U8, starts: I64, ok: npt.NDArray[np.bool_], add: bool, most: int
    ) -> I64 | None:
        """The code of each numbered row's prefix, new prefixes added if ``add`` (None: more
        than ``most`` in all); -1 for rows not numbered or of a prefix unknown."""
        codes = np.full(rows.shape[0], -1, np.int64)
        at = np.flatnonzero(ok)
        every = at.shape[0] == rows.shape[0]  # then no copy of the rows
        found, inverse = prefixes_of(rows if every else rows[at], starts if every else starts[at])
        known = np.array([self._index.get(p, -1) for p in found], np.int64)
        for i in np.flatnonzero(known < 0).tolist() if add else []:
            if len(self.prefixes) == most:
                return None
            known[i] = self._index[found[i]] = len(self.prefixes)
            self.prefixes.append(found[i])
            if len(self.prefixes) == 2:  # the ids so far have the first prefix: code 0
                self.codes = np.zeros(self.numbers.shape[0], np.uint8)
        codes[at] = known[inverse]
        return codes

    def write(self, slots: I32, codes: I64, numbers: I64) -> None:
        if int(numbers.max()) > np.iinfo(self.numbers.dtype).max:
            self.numbers = self.numbers.astype(np.int64)
        self.numbers[slots] = numbers
        if self.codes is not None:
            self.codes[slots] = codes

    def ascending(self, numbers: I64, size: int) -> bool:
        """Whether ``numbers``, given slots ``size ..``, keep the numbers ascending by slot."""
        last = int(self.numbers[size - 1]) if size else -1
        return int(numbers[0]) > last and bool((numbers[1:] > numbers[:-1]).all())

    def search(self, numbers: I64, size: int) -> I32:
        """The slots of ``numbers`` (-1: absent) while slots ``0 .. size - 1`` hold ascending
        numbers of one prefix: a binary search each."""
        known = self.numbers
        # Needles of the numbers' own type (no copy of the numbers); larger ones are absent.
        fits = numbers <= np.iinfo(known.dtype).max
        at = np.searchsorted(known[:size], np.where(fits, numbers, 0).astype(known.dtype))
        hit = fits & (at < size)
        hit[hit] = known[at[hit]] == numbers[hit]
        return np.where(hit, at, -1).astype(np.int32)

    def same(self, codes: I64, numbers: I64) -> Callable[[I64, I32], npt.NDArray[np.bool_]]:
        """A hash table's ``equal``: whether key ``rows[i]`` is the id of slot ``s[i]``."""
        known, prefixes = self.numbers, self.codes
        if prefixes is None:
            return lambda rows, s: np.asarray(known[s] == numbers[rows], np.bool_)
        return lambda rows, s: (known[s] == numbers[rows]) & (prefixes[s] == codes[rows])

    def _codes(self, slots: npt.NDArray[np.integer]) -> I64:
        if self.codes is None:
            return np.zeros(slots.shape[0], np.int64)
        codes: I64 = self.codes[slots].astype(np.int64)
        return codes

    def rows(self, slots: npt.NDArray[np.integer]) -> tuple[U8, I64]:
        """The padded rows of ``slots``' strings and their lengths."""
        return format_rows(self.prefixes, self._codes(slots), self.numbers[slots].astype(np.int64))

    def lengths(self, slots: npt.NDArray[np.integer]) -> I64:
        """The lengths in bytes of ``slots``' strings."""
        sizes = np.array([len(p) for p in self.prefixes], np.int64)
        digits = digit_counts(self.numbers[slots].astype(np.int64))
        lengths: I64 = sizes[self._codes(slots)] + digits
        return lengths

    def texts(self, slots: I64, chunk: int) -> tuple[npt.NDArray[np.uint32], bytes]:
        """The lengths and the text, one after the other, of ``slots``' strings (formatted
        ``chunk`` at a time)."""
        parts = []
        for lo in range(0, slots.shape[0], chunk):
            rows, sizes = self.rows(slots[lo : lo + chunk])
            parts.append(rows[np.arange(rows.shape[1]) < sizes[:, None]].tobytes())
        return self.lengths(slots).astype("<u4"), b"".join(parts)
