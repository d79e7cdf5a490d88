"""The compiled scanner of flat JSON records against pyarrow's reader and Python's own parsing.

Whatever the scanner reads must be the table pyarrow reads (time-like strings as strings), with
every number exactly as ``json.loads`` reads it; what it declines, pyarrow or the slow path
reads (``test_json_arrow.py`` runs the whole fast path with and without it). Plain records, the
ones it exists for, it must take."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pj
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import json_scan
from connectors.json_scan import read_table

pytestmark = pytest.mark.skipif(
    not json_scan.COMPILED, reason="numba is not in use (SGM_NUMBA=0 or absent)"
)


def scanned(text: bytes) -> pa.Table | None:
    """The scanner's table of ``text``, one record a line."""
    data = np.frombuffer(text, np.uint8)
    breaks = np.flatnonzero(data == 10)
    starts = np.concatenate([[0], breaks + 1]).astype(np.intp)
    ends = np.append(breaks, len(text)).astype(np.intp)
    return read_table(text, starts, ends)


def arrow(text: bytes) -> pa.Table:
    """pyarrow's table of ``text``, strings kept as strings (as the fast path reads it)."""
    options = pj.ReadOptions(use_threads=False, block_size=len(text) + 1)
    table = pj.read_json(pa.BufferReader(text), read_options=options)
    timelike = [f.name for f in table.schema if pa.types.is_temporal(f.type)]
    if not timelike:
        return table
    schema = pa.schema([(name, pa.string()) for name in timelike])
    parse = pj.ParseOptions(explicit_schema=schema)
    return pj.read_json(pa.BufferReader(text), read_options=options, parse_options=parse)


def same_as_arrow(text: bytes, table: pa.Table) -> None:
    expected = arrow(text)
    # (pyarrow's second reading puts the columns it reads as text first: order is not kept)
    assert sorted(zip(table.column_names, table.schema.types, strict=True)) == sorted(
        zip(expected.column_names, expected.schema.types, strict=True)
    )
    for name in table.column_names:
        got, want = table.column(name), expected.column(name)
        assert got.equals(want), name  # (-0.0 equals 0.0: pyarrow reads "-0" as -0.0,
        # where orjson reads 0 and the field is 0.0; test_numbers_are_read_exactly checks signs)


# Plain records: what the scanner must take ------------------------------------------------------

KEYS = st.sampled_from(["src", "dst", "ts", "amount", "op", "note", "é", "x y", "", "a:b"])
DIGITS = st.integers(0, 10**15 - 1)
DECIMALS = st.one_of(
    st.builds(lambda m, k: f"{m / 10**k:.{k}f}", DIGITS, st.integers(0, 7)),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(0, 10**15), st.integers(-22, 22)),
    st.builds(lambda m, e: f"{m}.5E+{e}", st.integers(0, 10**6), st.integers(0, 9)),
    st.sampled_from(["0.0", "-0.0", "0e0", "-0e-5", "1.0", "0.1", "123456789012345.6"]),
)
INTEGERS = st.one_of(
    st.integers(-(10**18) + 1, 10**18 - 1).map(str),
    st.sampled_from(["0", "-0", "7", "-1"]),
)
STRINGS = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters='"\\', min_codepoint=32),
    max_size=12,
).map(lambda s: json.dumps(s, ensure_ascii=False))
TIMES = st.sampled_from(['"2026-12-02T10:15:00Z"', '"2026-01-01"', '"12:00:00"'])


def plain_column() -> st.SearchStrategy[st.SearchStrategy[str]]:
    """A column's values: one kind of value, or integers and decimals, with nulls."""
    return st.sampled_from(
        [
            INTEGERS,
            DECIMALS,
            st.one_of(INTEGERS, DECIMALS),
            STRINGS,
            TIMES,
            st.sampled_from(["true", "false"]),
            st.just("null"),
        ]
    )


@st.composite
def plain_block(draw: st.DrawFn) -> bytes:
    keys = draw(st.lists(KEYS, min_size=1, max_size=6, unique=True))
    kinds = {key: draw(plain_column()) for key in keys}
    lines = []
    for _ in range(draw(st.integers(1, 12))):
        present = draw(st.lists(st.sampled_from(keys), unique=True, max_size=len(keys)))
        nulls = draw(st.lists(st.booleans(), min_size=len(present), max_size=len(present)))
        spaced = draw(st.sampled_from(["", " ", "  "]))
        pairs = [
            f"{json.dumps(key, ensure_ascii=False)}:{spaced}"
            + ("null" if null else draw(kinds[key]))
            for key, null in zip(present, nulls, strict=True)
        ]
        lines.append("{" + spaced + ("," + spaced).join(pairs) + spaced + "}" + spaced)
    return "\n".join(lines).encode()


@settings(max_examples=500, deadline=None)
@given(plain_block())
def test_plain_records_are_read_as_pyarrow_reads_them(text: bytes) -> None:
    table = scanned(text)
    assert table is not None, text
    same_as_arrow(text, table)


@settings(max_examples=500, deadline=None)
@given(st.one_of(DECIMALS, INTEGERS, st.floats(allow_nan=False, allow_infinity=False).map(repr)))
def test_numbers_are_read_exactly(number: str) -> None:
    """Each number the scanner takes is the one Python reads (a correctly rounded double, an
    exact integer)."""
    text = b'{"n": %s}' % number.encode()
    table = scanned(text)
    if table is None:
        return  # (beyond the exact fast path: pyarrow reads it)
    value = table.column("n")[0].as_py()
    expected = json.loads(number)
    assert type(value) is type(expected)
    assert value == expected
    if isinstance(value, float):
        assert np.float64(value).view(np.int64) == np.float64(expected).view(np.int64)


def test_the_benchmark_stream_is_scanned() -> None:
    lines = [
        b'{"op":"insert","relation":"transfer","id":"tx-%d","src":%d,"dst":%d,'
        b'"amount":%d.%02d,"ts":%d}' % (i, i * 7 % 1000, i * 11 % 1000, i, i % 100, 17e11 + i)
        for i in range(2000)
    ]
    lines.append(b'{"op":"delete","relation":"transfer","id":"tx-3"}')
    text = b"\n".join(lines)
    table = scanned(text)
    assert table is not None
    same_as_arrow(text, table)


def test_more_keys_than_the_first_width() -> None:
    record = {f"k{i}": i for i in range(40)}
    text = json.dumps(record).encode() + b"\n" + json.dumps({"k39": 1.5, "z": "a"}).encode()
    table = scanned(text)
    assert table is not None
    same_as_arrow(text, table)


# What the scanner declines ----------------------------------------------------------------------

DECLINED = [
    b'{"a": "x\\"y"}',  # an escape
    b'{"a\\u0062": 1}',  # in a key
    b'{"a": "x\ty"}',  # a control byte in a string
    b'{"a":\t1}',  # a tab between tokens (JSON allows it; pyarrow reads it)
    b'{"a": "x\x00"}',
    b'{"a": 1, "a": 2}',  # a key given twice
    b'{"a": [1]}',
    b'{"a": {"b": 1}}',
    b'{"a": NaN}',
    b'{"a": Infinity}',
    b'{"a": -Infinity}',
    b'{"a": 1234567890123456789}',  # 19 digits
    b'{"a": 1e23}',  # beyond the exact powers of ten
    b'{"a": 12345678901234567.5}',  # digits beyond a double's
    b'{"a": 01}',
    b'{"a": 1.}',
    b'{"a": .5}',
    b'{"a": +1}',
    b'{"a": -}',
    b'{"a": 1e}',
    b'{"a": tru}',
    b'{"a": nul}',
    b'{"a": truex}',
    b'{"a": 1}{"a": 2}',
    b'{"a": 1} x',
    b'{"a": 1,}',
    b'{"a" 1}',
    b'{"a"x1}',
    b'{"a" "b": 1}',
    b"{a: 1}",
    b'{"a": 1',
    b'{"a": "open',
    b'{"a": "open}',
    b'{"a": 1, "b',
    b'{"a": 1}\n{"a": "x"}',  # a column of two kinds
    b'{"a": true}\n{"a": 1}',
    b'{"a": "x"}\n{"a": false}',
]


@pytest.mark.parametrize("text", DECLINED)
def test_what_it_does_not_read_exactly_it_declines(text: bytes) -> None:
    assert scanned(text) is None
    assert scanned(b'{"a": 5}\n' + text) is None  # (not only in the first record)


def test_a_null_column_and_absent_keys() -> None:
    text = b'{"a": null, "b": 1}\n{"b": null}\n{}\n{"c": "x"}'
    table = scanned(text)
    assert table is not None
    same_as_arrow(text, table)
    assert table.column("a").type == pa.null()


def values(table: pa.Table) -> dict[str, list[Any]]:
    return {name: table.column(name).to_pylist() for name in table.column_names}


def test_a_block_after_a_declined_one_reads_as_ever() -> None:
    """The scanner's working arrays outlive a block: a declined or wider block must leave
    nothing behind for the next."""
    first = scanned(b'{"a": 1, "b": "x"}\n{"b": "y"}')
    assert scanned(b'{"a": 1, "a": 2}') is None
    assert scanned(json.dumps({f"k{i}": i for i in range(30)}).encode()) is not None
    again = scanned(b'{"a": 1, "b": "x"}\n{"b": "y"}')
    assert first is not None and again is not None
    assert values(again) == values(first) == {"a": [1, None], "b": ["x", "y"]}


WARM = textwrap.dedent(
    """
    import json, sys
    from numba.core.registry import CPUDispatcher
    from connectors import json_scan
    from connectors.events import FieldTypes
    from connectors.json_lines import JsonLines

    def signatures():
        return {
            name: len(value.signatures)
            for name, value in vars(json_scan).items()
            if isinstance(value, CPUDispatcher)
        }

    decoder = JsonLines(sys.argv[1], "e", FieldTypes.of({"transfer": {}}), strict=False)
    before = signatures()
    with open(sys.argv[1], "rb") as lines:
        block = decoder.decode(lines.read(), 0, 0)
    after = signatures()
    print(json.dumps({"count": block.batch.count, "before": before, "after": after}))
    """
)


def test_the_json_decoder_loads_the_scanner_when_it_is_made(tmp_path: Path) -> None:
    """The scanner's loops are loaded when the JSON decoder is made, not in its first block
    (a fresh container would otherwise compile them inside the first epoch)."""
    path = tmp_path / "transfers.jsonl"
    lines = [
        b'{"relation":"transfer","id":"t%d","src":%d,"dst":%d,"amount":%d.5,"ts":%d,"ok":true}'
        % (i, i, i + 1, i, 1000 + i)
        for i in range(3000)
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    done = subprocess.run(
        [sys.executable, "-c", WARM, str(path)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["count"] == 3000
    assert sum(result["before"].values()) >= 5, result  # loaded, every kind of column
    assert result["after"] == result["before"], result
