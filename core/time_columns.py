"""A column of ISO-8601 ``ts`` texts read at once, bit for bit as :func:`parse_time` reads each.

A batch decoder holds the ``ts`` strings of many records as one Arrow string array: a value
buffer of UTF-8 bytes and an offsets buffer, value ``i`` being ``data[offsets[i]:offsets[i + 1]]``.
:func:`parse_time_texts` reads that layout with whole-array numpy work, no Python call per value:
the values are grouped by shape (length, and whether the last byte is ``Z``), each group is copied
into a matrix of one text a row, and each two-digit field is one lookup of its two bytes in a
table of 65,536 entries (255 for a pair that is not two ASCII digits).

It recognises one *canonical* shape, the one writers emit::

    YYYY-MM-DDTHH:MM:SS[.f{1,6}](Z|+HH:MM|-HH:MM)

ASCII digits only; an upper-case ``T`` and ``Z``; year 0001-9999, month 01-12, a day within the
month (29 February in leap years only), hour 00-23, minute and second 00-59, an offset of at most
23:59. For every such text the milliseconds are bit for bit those of :func:`parse_time`: its
``datetime.timestamp()`` divides the whole microseconds since the epoch by 10**6 with Python's
correctly rounded ``int / int``, and so does :func:`_seconds` here (IEEE division below 2**53
microseconds, where it is exact on both sides; integer round-half-even beyond). No canonical time
is past 10,000 years of 1970: they lie from ``0001-01-01T00:00:00+23:59`` (-62,135,683,140,000
ms) to ``9999-12-31T23:59:59.999999-23:59`` (253,402,387,140,000 ms), the limit is
315,576,000,000,000, so :func:`parse_time` accepts every one.

Everything else is *not canonical*: ``ms`` is NaN and the caller passes the text to
:func:`parse_time`, which returns its time or raises :class:`~core.errors.InputError`. Python
3.11's ``fromisoformat`` accepts far more than the canonical shape, and some of it is read in ways
this module would rather not copy: any character in place of ``T``, a ``,`` before the fraction,
an empty fraction (``00:00:00.Z``), one stray character before the offset (``00:00:00 Z``), 7 or
more fraction digits cut (not rounded) to microseconds, basic format (``20261202T101500Z``),
``+HH``, ``+HHMM`` and ``+HH:MM:SS.ffffff`` offsets, and offset minutes of 60 or more (``+00:99``
is 99 minutes). Those are rare in a stream; the fallback keeps them exact at a Python call each.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

Bytes = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

_US = 10**6
#: Below this many microseconds both sides of the division are exact floats.
_EXACT_US = 2**53
#: Where the fraction's digits start: after ``YYYY-MM-DDTHH:MM:SS.``.
_FRACTION_AT = 20
#: The separators of the date and time, by column.
_MARKS = ((4, ord("-")), (7, ord("-")), (10, ord("T")), (13, ord(":")), (16, ord(":")))
#: The canonical shapes, by ``2 * length + (last byte is Z)``: (fraction digits, Z).
_LAYOUTS = {
    2 * (19 + (digits + 1 if digits else 0) + (1 if utc else 6)) + utc: (digits, utc)
    for digits in range(7)
    for utc in (True, False)
}
#: Values longer than every canonical shape share one key.
_TOO_LONG = 33
#: Values read at a time: their temporaries stay in the processor's cache.
_CHUNK = 1 << 15


def _pairs() -> Bytes:
    """Two ASCII digits read as one little-endian 16-bit word -> their value 0-99; else 255."""
    digit = np.arange(10)
    table = np.full(1 << 16, 255, dtype=np.uint8)
    table[(digit[:, None] + ord("0")) | ((digit[None, :] + ord("0")) << 8)] = (
        10 * digit[:, None] + digit[None, :]
    )
    return table


def _days_from_civil(year: Ints, month: Ints, day: Ints) -> Ints:
    """Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's ``days_from_civil``)."""
    year = year - (month <= 2)
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * np.where(month > 2, month - 3, month + 9) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days: Ints = era * 146_097 + day_of_era - 719_468
    return days


_PAIR = _pairs()
#: By ``100 * pair + pair`` (up to 255 * 101, so an invalid pair still indexes): whether the year
#: is a leap year (as 256, the offset of its row in the month tables), days from 1970 to 1 January.
_YEARS = np.arange(256 * 101, dtype=np.int64)
_LEAP_ROW = np.where((_YEARS % 4 == 0) & ((_YEARS % 100 != 0) | (_YEARS % 400 == 0)), 256, 0)
_YEAR_DAYS = _days_from_civil(_YEARS, np.ones_like(_YEARS), np.ones_like(_YEARS))
#: By ``leap row + month`` (month 0-255): days in the month (0: no such month), days before it.
_MONTH_DAYS = np.zeros(512, dtype=np.int64)
_MONTH_DAYS[1:13] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
_MONTH_DAYS[257:269] = _MONTH_DAYS[1:13] + (np.arange(1, 13) == 2)
_MONTH_START = np.zeros(512, dtype=np.int64)
_MONTH_START[2:13] = np.cumsum(_MONTH_DAYS[1:12])
_MONTH_START[258:269] = np.cumsum(_MONTH_DAYS[257:268])


def parse_time_texts(
    data: Bytes, offsets: npt.NDArray[np.int64] | npt.NDArray[np.int32]
) -> tuple[npt.NDArray[np.float64], Bools]:
    """``(ms, canonical)`` of the UTF-8 texts ``data[offsets[i]:offsets[i + 1]]``.

    Where ``canonical[i]``, ``ms[i]`` is exactly ``parse_time`` of text ``i``; elsewhere it is NaN
    and the text is for ``parse_time`` to read or refuse. :class:`ValueError` if the offsets do
    not index into ``data`` in order.
    """
    data = np.asarray(data, dtype=np.uint8)
    bounds = np.asarray(offsets, dtype=np.int64)
    if bounds.ndim != 1 or len(bounds) == 0:
        raise ValueError(f"offsets must be one-dimensional with n + 1 entries, got {bounds.shape}")
    if len(bounds) > 1 and (
        bounds[0] < 0 or bounds[-1] > len(data) or bool(np.any(bounds[1:] < bounds[:-1]))
    ):
        raise ValueError(
            f"offsets must be non-decreasing within the {len(data)} bytes of data, "
            f"got {bounds[0]} to {bounds[-1]}"
        )
    start, end = bounds[:-1], bounds[1:]
    ms = np.full(len(start), np.nan)
    canonical = np.zeros(len(start), dtype=np.bool_)
    if len(data) == 0:
        return ms, canonical
    # One group per shape: the values of one length, ending in Z or not, have their fields at
    # the same columns.
    key = np.minimum(end - start, _TOO_LONG) * 2 + (data[np.maximum(end - 1, 0)] == ord("Z"))
    for code in np.flatnonzero(np.bincount(key)):
        if int(code) not in _LAYOUTS:
            continue
        digits, utc = _LAYOUTS[int(code)]
        windows = sliding_window_view(data, int(code) // 2)
        shape_rows = np.flatnonzero(key == code)
        for first in range(0, len(shape_rows), _CHUNK):
            rows = shape_rows[first : first + _CHUNK]
            valid, us = _microseconds(windows[start[rows]], digits, utc)
            rows = rows[valid]
            ms[rows] = _seconds(us[valid]) * 1000.0
            canonical[rows] = True
    return ms, canonical


def parse_time_strings(values: Sequence[str]) -> tuple[npt.NDArray[np.float64], Bools]:
    """:func:`parse_time_texts` of Python strings (encoded as UTF-8 into one buffer)."""
    encoded = [value.encode("utf-8", "surrogatepass") for value in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    return parse_time_texts(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)


def _microseconds(block: Bytes, digits: int, utc: bool) -> tuple[Bools, Ints]:
    """Which rows of ``block`` (one text a row, all of one shape: ``digits`` fraction digits, Z or
    a numeric offset) are canonical, and their microseconds since the epoch (meaningless where
    not canonical)."""
    width = block.shape[1]

    def pair(column: int) -> Bytes:
        words = np.ndarray((len(block),), "<u2", block, column, (width,))
        found: Bytes = _PAIR[words]
        return found

    valid = np.ones(len(block), dtype=np.bool_)
    for column, mark in _MARKS:
        valid &= block[:, column] == mark
    high, low, month, day = pair(0), pair(2), pair(5), pair(8)
    hour, minute, second = pair(11), pair(14), pair(17)
    year = high * np.int64(100) + low
    month_at = _LEAP_ROW[year] + month
    valid &= (high <= 99) & (low <= 99) & (year >= 1)
    valid &= (day >= 1) & (day <= _MONTH_DAYS[month_at])
    valid &= (hour <= 23) & (minute <= 59) & (second <= 59)

    micro = np.zeros(len(block), dtype=np.int64)
    if digits:
        valid &= block[:, _FRACTION_AT - 1] == ord(".")
        for place, column in enumerate(range(_FRACTION_AT, _FRACTION_AT + digits - 1, 2)):
            value = pair(column)
            valid &= value <= 99
            micro += value * np.int64(10 ** (4 - 2 * place))
        if digits % 2:
            value = block[:, _FRACTION_AT + digits - 1] - np.uint8(ord("0"))
            valid &= value <= 9
            micro += value * np.int64(10 ** (6 - digits))

    offset: Ints | int = 0
    if not utc:
        sign = block[:, width - 6]
        valid &= ((sign == ord("+")) | (sign == ord("-"))) & (block[:, width - 3] == ord(":"))
        hours, minutes = pair(width - 5), pair(width - 2)
        valid &= (hours <= 23) & (minutes <= 59)
        offset = (hours * np.int64(60) + minutes) * 60
        offset = np.where(sign == ord("-"), -offset, offset)

    days = _YEAR_DAYS[year] + _MONTH_START[month_at] + day - 1
    seconds = days * 86_400 + hour * np.int64(3_600) + minute * np.int64(60) + second - offset
    return valid, seconds * _US + micro


def _seconds(us: Ints) -> npt.NDArray[np.float64]:
    """``us / 10**6`` correctly rounded (half to even), as Python's ``int / int`` is.

    Below 2**53 both operands are exact floats and IEEE division rounds correctly. Beyond (more
    than 285 years from 1970), the float has 2**-u steps with u = 52 - floor(log2(whole seconds));
    the rounded count of those steps is found with integers (the whole seconds are at least 2**33
    there, so u <= 19 and the count stays within 2**53: nothing overflows) and scaled exactly by
    ``ldexp``.
    """
    size = np.abs(us)
    out = size.astype(np.float64) / float(_US)
    far = size >= _EXACT_US
    if np.any(far):
        whole, part = np.divmod(size[far], _US)
        _, exponent = np.frexp(whole.astype(np.float64))
        steps = (53 - exponent).astype(np.int64)
        count, rest = np.divmod(part << steps, _US)
        count += whole << steps
        count += (2 * rest > _US) | ((2 * rest == _US) & (count % 2 == 1))
        out[far] = np.ldexp(count.astype(np.float64), -steps.astype(np.int32))
    result: npt.NDArray[np.float64] = np.where(us < 0, -out, out)
    return result
