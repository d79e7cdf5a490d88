"""parse_time_texts against parse_time, value by value: the oracle is ``datetime.fromisoformat``.

Every canonical value must be bit for bit parse_time's milliseconds; every other one NaN; no text
that parse_time refuses may be canonical. Texts come from canonical times over the whole range of
years, from canonical times with one byte changed, inserted or dropped, and from random text.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core import time_columns
from core.errors import InputError
from core.time_columns import _seconds, parse_time_strings, parse_time_texts
from core.times import parse_time

EDGES = [
    "1970-01-01T00:00:00Z",
    "1970-01-01T00:00:00.000000+00:00",
    "1970-01-01T00:00:00-00:00",
    "1969-12-31T23:59:59.999999Z",
    "1970-01-01T00:00:00.000001Z",
    "0001-01-01T00:00:00+23:59",
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00-23:59",
    "9999-12-31T23:59:59.999999-23:59",
    "9999-12-31T23:59:59.999999+23:59",
    "2000-02-29T12:00:00Z",
    "1600-02-29T12:00:00Z",
    "2024-02-29T23:59:59.9+05:30",
    "2023-02-28T23:59:59Z",
    "2023-04-30T00:00:00Z",
    "2023-12-31T23:59:59.99999Z",
    "1685-06-01T00:00:00.123456Z",
    "2255-06-01T00:00:00.654321Z",
    "2024-03-01T00:00:00Z",
    "2000-12-31T23:59:59.75-01:00",
    "1500-06-15T03:04:05.678901Z",
    "1000-01-01T00:00:00.000001Z",
    "3000-07-04T12:34:56.789012-07:00",
    "0500-03-15T01:02:03.4+02:00",
]
JUNK = [
    "",
    "\x00",
    "2023-02-29T00:00:00Z",
    "1900-02-29T00:00:00Z",
    "1800-02-29T00:00:00Z",
    "2100-02-29T00:00:00Z",
    "2023-04-31T00:00:00Z",
    "2023-02-30T00:00:00Z",
    "2023-13-01T00:00:00Z",
    "2023-00-01T00:00:00Z",
    "2023-01-00T00:00:00Z",
    "0000-01-01T00:00:00Z",
    "2023-01-01T24:00:00Z",
    "2023-01-01T23:60:00Z",
    "2023-01-01T23:59:60Z",
    "2023-01-01T00:00:00+24:00",
    "2023-01-01T00:00:00-24:00",
    "2023-01-01T00:00:00+00:60",
    "2023-01-01T00:00:00+00:99",
    "2023-01-01T00:00:00",
    "2023-01-01T00:00:00.123",
    "2023-01-01 00:00:00Z",
    "2023-01-01t00:00:00Z",
    "2023-01-01T00:00:00z",
    "2023-01-01T00:00:00 Z",
    "2023-01-01T00:00:00\x00Z",
    "2023-01-01T00:00:00.Z",
    "2023-01-01T00:00:00,5Z",
    "2023-01-01T00:00:00.1234567Z",
    "2023-01-01T00:00:00.12345678+01:00",
    "2023-01-01T00:00:00+0100",
    "2023-01-01T00:00:00+01",
    "2023-01-01T00:00:00+01:00:30",
    "2023-01-01T00:00:00+1:00",
    "2023-01-01T00:00Z",
    "20230101T000000Z",
    "2023-01-01T00:00:0٣Z",
    "٢023-01-01T00:00:00Z",
    "2023-01-01T00:00:00Z ",
    " 2023-01-01T00:00:00Z",
    "+2023-01-01T00:00:00Z",
    "2023-01-01T00:00:00.5+01:00Z",
    "2x23-01-01T00:00:00Z",
    "20x3-01-01T00:00:00Z",
    "2023-01-01T00:00:00.1x3Z",
    "2023-01-01T00:00:00.12xZ",
    "2023-01-01T00:00:00.١Z",
    "2023-01-01T00:00:00+01x00",
    "2023-01-01T00:00:00,01:00",
    "2023-01-01T00:00:00+0x:00",
]
#: Bytes that make near misses: separators, digits, the letters of the shape, NUL, a non-ASCII
#: digit (two bytes in UTF-8).
NEAR = "0123456789-:T.Zt z,+\x00٣/"


def check(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """parse_time_strings agrees with parse_time on every value; returns its result."""
    ms, canonical = parse_time_strings(values)
    assert ms.dtype == np.float64 and canonical.dtype == np.bool_
    assert ms.shape == canonical.shape == (len(values),)
    for text, got, ok in zip(values, ms.tolist(), canonical.tolist(), strict=True):
        try:
            want = parse_time(text)
        except InputError:
            assert not ok, f"{text!r} is refused by parse_time but canonical ({got!r})"
            assert math.isnan(got)
            continue
        if ok:
            bits = np.array([got, want]).view(np.int64)
            assert bits[0] == bits[1], f"{text!r}: {got!r}, parse_time {want!r}"
        else:
            assert math.isnan(got), f"{text!r} is not canonical but has {got!r}"
    return ms, canonical


@st.composite
def canonical_texts(draw: st.DrawFn) -> str:
    """A text of the canonical shape: any instant of years 1-9999, 0-6 fraction digits, Z or an
    offset of at most 23:59."""
    moment = draw(st.datetimes(min_value=datetime.min, max_value=datetime.max))
    digits = draw(st.integers(0, 6))
    fraction = "." + f"{moment.microsecond:06d}"[:digits] if digits else ""
    if draw(st.booleans()):
        zone = "Z"
    else:
        zone = draw(st.sampled_from("+-")) + f"{draw(st.integers(0, 23)):02d}:"
        zone += f"{draw(st.integers(0, 59)):02d}"
    return moment.replace(microsecond=0).isoformat() + fraction + zone


@st.composite
def near_misses(draw: st.DrawFn) -> str:
    """A canonical text with one character replaced, inserted or dropped, or cut short."""
    text = draw(canonical_texts())
    at = draw(st.integers(0, len(text)))
    char = draw(st.sampled_from(NEAR))
    edit = draw(st.sampled_from(["replace", "insert", "drop", "cut"]))
    if edit == "replace":
        return text[:at] + char + text[at + 1 :]
    if edit == "insert":
        return text[:at] + char + text[at:]
    if edit == "drop":
        return text[:at] + text[at + 1 :]
    return text[:at]


@settings(max_examples=300)
@given(st.lists(canonical_texts(), max_size=30))
def test_canonical_times_are_exactly_parse_time(values: list[str]) -> None:
    _, canonical = check(values)
    assert canonical.all()


def test_edges_are_canonical_and_exact() -> None:
    ms, canonical = check(EDGES)
    assert canonical.all()
    assert ms[0] == 0.0 and not np.signbit(ms[0])
    assert ms[3] == -0.001


def test_junk_is_not_canonical() -> None:
    _, canonical = check(JUNK)
    assert not canonical.any()


@settings(max_examples=500)
@given(st.lists(st.one_of(near_misses(), canonical_texts(), st.text(max_size=40)), max_size=30))
@example(["2023-01-01T00:00:00Z", "", "2023-01-01T00:00:00+01:00", "x", "2023-01-01T00:00:00Z"])
def test_mixed_texts_agree_with_parse_time(values: list[str]) -> None:
    check(values)


@given(st.lists(st.text(st.characters(codec="ascii"), max_size=34), max_size=30))
def test_random_ascii_agrees_with_parse_time(values: list[str]) -> None:
    check(values)


@settings(max_examples=300)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 13), st.integers(27, 32))))
def test_month_ends_agree_with_parse_time(dates: list[tuple[int, int, int]]) -> None:
    check([f"{year:04d}-{month:02d}-{day:02d}T23:59:59.5+01:00" for year, month, day in dates])
    leap_days = check([f"{year:04d}-02-29T00:00:00Z" for year, _, _ in dates])[1]
    assert leap_days.tolist() == [
        year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) and 0 < year < 10_000
        for year, _, _ in dates
    ]


@settings(max_examples=300)
@given(st.integers(-(2**58), 2**58))
@example(2**53 - 1)
@example(2**53)
@example(-(2**53))
def test_seconds_is_python_true_division(us: int) -> None:
    got = _seconds(np.array([us], dtype=np.int64))[0]
    assert np.float64(got).view(np.int64) == np.float64(us / 10**6).view(np.int64)


def test_a_canonical_time_is_never_past_the_limit() -> None:
    ms, canonical = check(["0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59.999999-23:59"])
    assert canonical.all()
    assert ms.tolist() == [-62_135_683_140_000.0, 253_402_387_140_000.0]
    assert max(abs(ms)) < 10_000 * 365.25 * 86_400_000


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_arrow_buffers_are_the_layout(kind: pa.DataType) -> None:
    values = [*EDGES, None, *JUNK]
    whole = pa.array(values, type=kind)
    array = whole.slice(3, len(values) - 5)
    _, offset_buffer, data_buffer = array.buffers()
    offset_type = np.int32 if kind == pa.string() else np.int64
    offsets = np.frombuffer(offset_buffer, dtype=offset_type)[
        array.offset : array.offset + len(array) + 1
    ]
    data = np.frombuffer(data_buffer, dtype=np.uint8)
    ms, canonical = parse_time_texts(data, offsets)
    texts = [value or "" for value in values[3 : len(values) - 2]]
    want_ms, want_canonical = check(texts)
    assert canonical.tolist() == want_canonical.tolist()
    assert np.array_equal(ms, want_ms, equal_nan=True)
    assert canonical.sum() == len(EDGES) - 3


def test_chunks_read_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    values = [*EDGES, *JUNK] * 3
    whole_ms, whole_canonical = check(values)
    monkeypatch.setattr(time_columns, "_CHUNK", 4)
    ms, canonical = check(values)
    assert canonical.tolist() == whole_canonical.tolist()
    assert np.array_equal(ms, whole_ms, equal_nan=True)


def test_no_values() -> None:
    ms, canonical = parse_time_texts(np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    assert ms.shape == canonical.shape == (0,)


@pytest.mark.parametrize(
    "offsets", [[], [[0, 1]], [0, 30], [-1, 5], [5, 3]], ids=["empty", "2d", "past", "neg", "down"]
)
def test_offsets_outside_the_data_are_refused(offsets: list[int]) -> None:
    data = np.frombuffer(b"2023-01-01T00:00:00Z", dtype=np.uint8)
    with pytest.raises(ValueError, match="offsets must be"):
        parse_time_texts(data, np.array(offsets, dtype=np.int64))


def test_texts_need_not_start_at_zero() -> None:
    data = np.frombuffer(b"junk2023-01-01T00:00:00Z2023-01-01T01:00:00+01:00", dtype=np.uint8)
    ms, canonical = parse_time_texts(data, np.array([4, 24, 49], dtype=np.int32))
    assert canonical.tolist() == [True, True]
    assert ms.tolist() == [parse_time("2023-01-01T00:00:00Z")] * 2


def test_utc_is_the_same_instant() -> None:
    moment = datetime(2026, 12, 2, 10, 15, 0, 250000, tzinfo=UTC)
    ms, _ = parse_time_strings(["2026-12-02T10:15:00.25Z", "2026-12-02T11:15:00.25+01:00"])
    assert ms.tolist() == [moment.timestamp() * 1000.0] * 2
