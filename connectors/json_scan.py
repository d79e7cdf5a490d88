"""Flat JSON records read into an Arrow table by one compiled pass: the fast path's first reader.

Event records are flat objects of a few keys: strings, integers, decimals, ``true``, ``false``,
``null``. :func:`read_table` reads a block of them with one numba loop over the bytes (a key
table, each value's kind and where it is or what it is worth), then builds each column with a
few loops over the rows: about 250 ns a record against pyarrow's 700 on the payments stream.
The table is the one ``pyarrow.json`` would give for the block with time-like strings read as
strings (:mod:`connectors.json_arrow`), so :class:`~connectors.arrow_records.TableDecoder` stays
the one place of the rules.

It takes only what it reads exactly as ``orjson`` reads it, and says None to anything else, so
that pyarrow and then the slow path decide it:

- a block with no backslash and no control byte but its line breaks (a string's bytes are then
  its text, running to the next quote; the block is known to be UTF-8 already);
- integers of at most 18 digits (an ``int64``) and decimals whose digits make less than
  ``2**53`` with a power of ten of at most 22 either way, which one multiplication or division
  of two exact doubles rounds correctly (Clinger's fast path; every amount in cents is one);
- one object a line, nothing but spaces around its tokens, no key given twice;
- a column holding one kind of value and nulls, or integers and decimals (read as doubles, as
  Arrow reads them); an object, an array, ``NaN`` or a column of mixed kinds is None.

Where it disagrees with pyarrow, it agrees with ``orjson``: the integer ``-0`` among decimals
is 0.0 (pyarrow reads -0.0, and :mod:`connectors.json_arrow` sends such a batch the slow way).
Its working arrays (13 bytes a value, a byte a key of a record) are kept for the thread's next
block. Without numba (``SGM_NUMBA=0``) it is never used and pyarrow reads every block.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from core.compiled import AVAILABLE, ENABLED, njit

COMPILED = ENABLED

# A value's kind (``ABSENT``: the record has no such key).
ABSENT, NULL, FALSE, TRUE, INT, FLOAT, STRING = range(7)

# What a scan says of the block.
_TAKEN, _REFUSED, _WIDER = 0, 1, 2

#: Distinct keys a block starts with room for (four times as many at each overflow, to 64).
_WIDTH = 16
_MAX_WIDTH = 64

#: The working arrays grow by this many values, or records, at a time.
_GRAIN = 1 << 14
_ROWS = 1 << 10

_POWERS = np.array([10.0**k for k in range(23)])

if AVAILABLE:

    @njit(cache=True, nogil=True, inline="always")
    def _blank(data, i, end):  # type: ignore[no-untyped-def]
        while i < end and data[i] == 32:
            i += 1
        return i

    @njit(cache=True, nogil=True, inline="always")
    def _quote(data, i, end):  # type: ignore[no-untyped-def]
        """The next quote at or after ``i`` (``end`` where the line has none)."""
        while i < end and data[i] != 34:
            i += 1
        return i

    @njit(cache=True, nogil=True, inline="always")
    def _same(data, a0, a1, b0, b1):  # type: ignore[no-untyped-def]
        if a1 - a0 != b1 - b0:
            return False
        for j in range(a1 - a0):  # noqa: SIM110 (a loop numba compiles; no generator)
            if data[a0 + j] != data[b0 + j]:
                return False
        return True

    @njit(cache=True, nogil=True, inline="always")
    def _literal(data, i, end, word):  # type: ignore[no-untyped-def]
        if end - i < word.shape[0]:
            return False
        for j in range(word.shape[0]):  # noqa: SIM110 (as above)
            if data[i + j] != word[j]:
                return False
        return True

    @njit(cache=True, nogil=True, inline="always")
    def _number(data, i, end, powers):  # type: ignore[no-untyped-def]
        """The number at ``i``: (its end, kind, integer, double); kind ``ABSENT`` where it is
        not one this scanner reads exactly."""
        negative = data[i] == 45
        if negative:
            i += 1
        if i >= end or data[i] < 48 or data[i] > 57:
            return i, 0, 0, 0.0
        mantissa, digits, scale = 0, 0, 0
        if data[i] == 48:
            i += 1  # (a digit after a leading zero ends the number: the record is refused)
        else:
            while i < end and 48 <= data[i] <= 57:
                mantissa = mantissa * 10 + (data[i] - 48)
                digits += 1
                i += 1
        fraction = i < end and data[i] == 46
        if fraction:
            i += 1
            if i >= end or data[i] < 48 or data[i] > 57:
                return i, 0, 0, 0.0
            while i < end and 48 <= data[i] <= 57:
                mantissa = mantissa * 10 + (data[i] - 48)
                if mantissa:
                    digits += 1
                scale -= 1
                i += 1
        exponent = i < end and (data[i] == 101 or data[i] == 69)
        if exponent:
            i += 1
            sign = 1
            if i < end and (data[i] == 43 or data[i] == 45):
                sign = -1 if data[i] == 45 else 1
                i += 1
            if i >= end or data[i] < 48 or data[i] > 57:
                return i, 0, 0, 0.0
            power = 0
            while i < end and 48 <= data[i] <= 57:
                if power < 10_000:
                    power = power * 10 + (data[i] - 48)
                i += 1
            scale += sign * power
        if digits > 18:
            return i, 0, 0, 0.0  # the digits may not fit: pyarrow or orjson reads it
        if not (fraction or exponent):
            return i, 4, -mantissa if negative else mantissa, 0.0
        if mantissa == 0:
            value = 0.0
        elif mantissa >= 2**53 or scale > 22 or scale < -22:
            return i, 0, 0, 0.0
        elif scale >= 0:
            value = float(mantissa) * powers[scale]
        else:
            value = float(mantissa) / powers[-scale]
        return i, 5, 0, -value if negative else value

    @njit(cache=True, nogil=True, error_model="numpy")
    def _scan(data, starts, ends, firsts, slots, kinds, values, doubles, stops, keys, seen, powers):  # type: ignore[no-untyped-def]
        """Each record's values: ``firsts[r] + slots[r, k]`` the value of key ``k`` (``slots``
        -1: none; a record has at most ``width`` values, which its byte counts), each
        value's kind, integer (a string's start), double and a string's end; ``keys`` the
        distinct keys' starts and ends, ``seen`` the kinds of each (bits). The text holds no
        backslash and no control byte but newlines, so a string is every byte to the next
        quote. Returns (what it says, how many keys)."""
        true = np.array([116, 114, 117, 101], np.uint8)
        false = np.array([102, 97, 108, 115, 101], np.uint8)
        null = np.array([110, 117, 108, 108], np.uint8)
        width = slots.shape[1]
        previous = np.full(width, -1, np.int64)  # the last record's key at each place
        known, pair = 0, 0
        for r in range(starts.shape[0]):
            i, end = _blank(data, starts[r] + 1, ends[r]), ends[r]  # (after its "{")
            firsts[r] = pair
            for k in range(known):
                slots[r, k] = -1
            place = 0
            if i < end and data[i] == 125:
                i += 1
            else:
                while True:
                    if i >= end or data[i] != 34:
                        return 1, known
                    k0, k1, key = i + 1, -1, -1
                    if place < width and previous[place] >= 0:
                        # Most records name the same keys in the same order as the last one.
                        guess = previous[place]
                        k1 = k0 + keys[guess, 1] - keys[guess, 0]
                        fits = k1 < end and data[k1] == 34
                        if fits and _same(data, keys[guess, 0], keys[guess, 1], k0, k1):
                            key = guess
                    if key < 0:
                        k1 = _quote(data, k0, end)
                        if k1 == end:
                            return 1, known
                        for k in range(known):
                            if _same(data, keys[k, 0], keys[k, 1], k0, k1):
                                key = k
                                break
                    if key < 0:
                        if known == width:
                            return 2, known
                        key = known
                        keys[key, 0], keys[key, 1] = k0, k1
                        known += 1
                        for row in range(r + 1):
                            slots[row, key] = -1
                    if slots[r, key] >= 0:
                        return 1, known  # a key given twice
                    if place < width:
                        previous[place] = key
                    place += 1
                    i = _blank(data, k1 + 1, end)
                    if i >= end or data[i] != 58:
                        return 1, known
                    i = _blank(data, i + 1, end)
                    if i >= end:
                        return 1, known
                    byte = data[i]
                    if byte == 34:
                        close = _quote(data, i + 1, end)  # (at the line's end: refused
                        kind = 6  # below, as nothing follows it)
                        values[pair], stops[pair] = i + 1, close
                        i = close + 1
                    elif byte == 45 or 48 <= byte <= 57:
                        i, kind, integer, double = _number(data, i, end, powers)
                        if kind == 0:
                            return 1, known
                        if kind == 4:  # (``doubles`` may share ``values``' bytes)
                            values[pair] = integer
                        else:
                            doubles[pair] = double
                    elif byte == 116 and _literal(data, i, end, true):
                        kind = 3
                        i += 4
                    elif byte == 102 and _literal(data, i, end, false):
                        kind = 2
                        i += 5
                    elif byte == 110 and _literal(data, i, end, null):
                        kind = 1
                        i += 4
                    else:
                        return 1, known  # an object, an array, NaN, anything else
                    kinds[pair] = kind
                    seen[key] |= 1 << kind
                    slots[r, key] = pair - firsts[r]
                    pair += 1
                    i = _blank(data, i, end)
                    if i < end and data[i] == 44:
                        i = _blank(data, i + 1, end)
                        continue
                    if i < end and data[i] == 125:
                        i += 1
                        break
                    return 1, known
            if _blank(data, i, end) != end:
                return 1, known  # text after the object
        return 0, known

    @njit(cache=True, nogil=True)
    def _census(data):  # type: ignore[no-untyped-def]
        """How many bytes of ``data`` are a backslash or a control byte other than a newline,
        and how many are colons (one pass the compiler vectorises)."""
        odd, colons = 0, 0
        for j in range(np.uint64(data.shape[0])):
            byte = data[j]
            odd += ((byte < 32) & (byte != 10)) | (byte == 92)
            colons += byte == 58
        return odd, colons

    @njit(cache=True, nogil=True)
    def _numbers(firsts, slot, kinds, values, doubles, ints, floats, valid):  # type: ignore[no-untyped-def]
        """A number column: integers to ``ints``, or every number as a double to ``floats``
        where that is given (non-empty); ``valid`` where a number is."""
        as_double = floats.shape[0] > 0
        for r in range(slot.shape[0]):
            pair = firsts[r] + slot[r] if slot[r] >= 0 else -1
            kind = kinds[pair] if pair >= 0 else 0
            valid[r] = kind > 1
            if as_double:
                floats[r] = doubles[pair] if kind == 5 else (values[pair] if kind == 4 else 0)
            else:
                ints[r] = values[pair] if kind == 4 else 0

    @njit(cache=True, nogil=True)
    def _flags(firsts, slot, kinds, truth, valid):  # type: ignore[no-untyped-def]
        for r in range(slot.shape[0]):
            pair = firsts[r] + slot[r] if slot[r] >= 0 else -1
            kind = kinds[pair] if pair >= 0 else 0
            valid[r] = kind > 1
            truth[r] = kind == 3

    @njit(cache=True, nogil=True)
    def _spans(firsts, slot, kinds, values, stops, first, stop, valid):  # type: ignore[no-untyped-def]
        for r in range(slot.shape[0]):
            pair = firsts[r] + slot[r] if slot[r] >= 0 else -1
            string = pair >= 0 and kinds[pair] == 6
            valid[r] = string
            first[r] = values[pair] if string else 0
            stop[r] = stops[pair] if string else 0

    @njit(cache=True, nogil=True)
    def _gather(data, starts, stops, offsets, out):  # type: ignore[no-untyped-def]
        """``data[starts[i]:stops[i]]`` at ``out[offsets[i]:]``, for every ``i``."""
        for i in range(starts.shape[0]):
            at = np.uint64(offsets[i])
            first = np.uint64(starts[i])
            for j in range(np.uint64(stops[i] - starts[i])):
                out[at + j] = data[first + j]


class _Scratch(threading.local):
    """The scan's working arrays, kept for the next block of the same thread (fresh ones
    cost more in page faults than the scan itself)."""

    def __init__(self) -> None:
        self.values = np.empty(0, np.int64)
        self.slots = np.empty((0, 0), np.int8)
        self.firsts = np.empty(0, np.int32)

    def arrays(self, pairs: int, rows: int, width: int) -> tuple[Any, ...]:
        """Room for ``pairs`` values (13 bytes each: a double shares its integer's bytes) and
        ``rows`` records of ``width`` keys (a byte each, and 4 a record)."""
        if self.values.shape[0] < pairs:
            room = -(-pairs // _GRAIN) * _GRAIN
            self.values = np.empty(room, np.int64)
            self.kinds = np.empty(room, np.int8)
            self.stops = np.empty(room, np.int32)
        if self.slots.shape[0] < rows or self.slots.shape[1] != width:
            self.slots = np.empty((-(-rows // _ROWS) * _ROWS, width), np.int8)
            self.firsts = np.empty(self.slots.shape[0], np.int32)
        doubles = self.values.view(np.float64)
        slots, firsts = self.slots[:rows], self.firsts[:rows]
        return firsts, slots, self.kinds, self.values, doubles, self.stops


_scratch = _Scratch()


def forget() -> None:
    """Drop this thread's working arrays (a benchmark measures what a batch allocates)."""
    _scratch.__init__()  # type: ignore[misc]


def read_table(
    text: bytes, starts: npt.NDArray[np.intp], ends: npt.NDArray[np.intp]
) -> pa.Table | None:
    """The table of the records at ``text[starts[i]:ends[i]]`` (each starts with ``{``);
    None where this scanner does not read them (see the module's docstring)."""
    if not COMPILED or not starts.shape[0] or len(text) >= 2**31:
        return None
    data = np.frombuffer(text, np.uint8)
    odd, colons = _census(data)
    if odd:
        return None  # an escape, a tab or a control byte somewhere: pyarrow reads the block
    starts, ends = starts.astype(np.int64), ends.astype(np.int64)
    room = colons + 1  # every pair has its colon
    width = _WIDTH
    while True:
        firsts, slots, kinds, values, doubles, stops = _scratch.arrays(room, starts.shape[0], width)
        keys = np.zeros((width, 2), np.int64)
        seen = np.zeros(width, np.int64)
        said, known = _scan(
            data, starts, ends, firsts, slots, kinds, values, doubles, stops, keys, seen, _POWERS
        )
        if said != _WIDER or width >= _MAX_WIDTH:
            break
        width *= 4
    if said != _TAKEN:
        return None
    columns = []
    for k in range(known):
        column = _column(data, firsts, slots[:, k], int(seen[k]), kinds, values, doubles, stops)
        if column is None:
            return None
        columns.append(column)
    names = [text[keys[k, 0] : keys[k, 1]].decode() for k in range(known)]
    return pa.table(columns, names=names)


_NUMBERS = (1 << INT) | (1 << FLOAT)
_FLAGS = (1 << TRUE) | (1 << FALSE)


def _column(
    data: npt.NDArray[np.uint8],
    firsts: npt.NDArray[np.int32],
    slot: npt.NDArray[np.int8],
    seen: int,
    kinds: npt.NDArray[np.int8],
    values: npt.NDArray[np.int64],
    doubles: npt.NDArray[np.float64],
    stops: npt.NDArray[np.int64],
) -> pa.Array | None:
    """One key's column, typed as Arrow types it; None where its kinds do not make one."""
    n = slot.shape[0]
    seen &= ~((1 << ABSENT) | (1 << NULL))
    if not seen:
        return pa.nulls(n)
    valid = np.empty(n, np.bool_)
    if seen == 1 << STRING:
        first, stop = np.empty(n, np.int64), np.empty(n, np.int64)
        _spans(firsts, slot, kinds, values, stops, first, stop, valid)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(stop - first, out=offsets[1:])
        if offsets[-1] >= 2**31:
            return None
        out = np.empty(int(offsets[-1]), np.uint8)
        _gather(data, first, stop, offsets, out)
        buffers = [pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(out)]
        return _array(pa.string(), valid, buffers)
    if not seen & ~_NUMBERS:
        if seen == 1 << INT:
            ints, floats = np.empty(n, np.int64), np.empty(0, np.float64)
            _numbers(firsts, slot, kinds, values, doubles, ints, floats, valid)
            return _array(pa.int64(), valid, [pa.py_buffer(ints)])
        floats = np.empty(n, np.float64)
        _numbers(firsts, slot, kinds, values, doubles, np.empty(0, np.int64), floats, valid)
        return _array(pa.float64(), valid, [pa.py_buffer(floats)])
    if not seen & ~_FLAGS:
        truth = np.empty(n, np.bool_)
        _flags(firsts, slot, kinds, truth, valid)
        bits = pa.py_buffer(np.packbits(truth, bitorder="little"))
        return _array(pa.bool_(), valid, [bits])
    return None  # kinds Arrow would not put in one column


def _array(kind: pa.DataType, valid: npt.NDArray[np.bool_], buffers: list[pa.Buffer]) -> pa.Array:
    nulls = valid.shape[0] - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(kind, valid.shape[0], [validity, *buffers], null_count=nulls)


def warm() -> None:
    """Load (or compile, the first time on a machine) the scanner's loops for the types it
    passes: one block of every kind of column. Once per process."""
    global _warm
    if _warm or not COMPILED:
        return
    _warm = True
    text = b'{"a": "b", "c": -1.5, "d": 2, "e": true, "f": null, "g": 1}\n{"g": 2.5}'
    cut = text.index(b"\n")
    read_table(text, np.array([0, cut + 1]), np.array([cut, len(text)]))
    forget()


_warm = False
