"""Numbered ids (``tx-91`` kept as 91 under the map's one prefix): parsing against a regular
expression, and the id map against a dict while its strings are numbered, in and out of order,
past ``uint32``, mixed with integers and turned into text."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.compiled import AVAILABLE
from monitor.index.idmap import MAX_PREFIXES, IdMap
from monitor.index.numbered import MAX_DIGITS, MAX_PREFIX, format_rows, prefixes_of, split
from monitor.index.texts import pack_strings, padded
from tests.index.test_idmap import check_batches, column

texts = st.one_of(
    st.binary(max_size=12),
    st.builds(lambda p, n: p + str(n).encode(), st.binary(max_size=4), st.integers(0, 10**19)),
    st.sampled_from([b"tx-007", b"tx-0", b"0", b"00", b"a" * 70 + b"1", b"1" * 19, b"1" * 18]),
)


def oracle(text: bytes) -> tuple[bytes, int] | None:
    """A string is numbered when its (maximal) trailing digit run gives it back as a number."""
    found = re.fullmatch(rb"(.*?)([0-9]+)", text, re.DOTALL)
    if found is None:
        return None
    prefix, digits = found.groups()
    if len(digits) > MAX_DIGITS or len(prefix) > MAX_PREFIX or str(int(digits)).encode() != digits:
        return None
    return prefix, int(digits)


def rows_of(strings: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(t) for t in strings], np.int64)
    buffer = np.frombuffer(b"".join(strings) or b"\x00", np.uint8)
    return padded(buffer, np.cumsum(lengths) - lengths, lengths), lengths


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=12))
def test_split_agrees_with_a_regular_expression_and_formats_back(strings: list[bytes]) -> None:
    expected = [oracle(t) for t in strings]
    rows, lengths = rows_of(strings)
    ok, starts, numbers = split(rows, lengths, compiled=False)
    assert ok.tolist() == [e is not None for e in expected]
    if AVAILABLE:  # the compiled loop reads the same: numbered or not, where, which number
        fast = split(rows, lengths, compiled=True)
        assert fast[0].tolist() == ok.tolist()
        assert fast[1].tolist() == starts.tolist()
        assert fast[2][ok].tolist() == numbers[ok].tolist()
    got = [
        (bytes(r[:s]), n) for r, s, n in zip(rows, starts.tolist(), numbers.tolist(), strict=True)
    ]
    assert [g for g, e in zip(got, expected, strict=True) if e] == [e for e in expected if e]
    at = np.flatnonzero(ok)
    found, codes = prefixes_of(rows[at], starts[at])
    assert len(found) == len(set(found)) and [found[c] for c in codes] == [got[i][0] for i in at]
    back, back_lengths = format_rows(found, codes, numbers[at])
    assert [bytes(r[:n]) for r, n in zip(back, back_lengths.tolist(), strict=True)] == [
        strings[i] for i in at
    ]


def test_ascending_numbered_ids_keep_their_numbers_only() -> None:
    """``tx-0 .. tx-N`` given out in order: 4 bytes an id, no text and no hash table."""
    idmap = IdMap()
    for lo in range(0, 200_000, 50_000):
        idmap.encode(column([f"tx-{i}" for i in range(lo, lo + 50_000)]))
    parts = idmap.breakdown()
    assert parts["numbers"] <= 4 * 200_000 * 1.25 and parts["hash tables"] < 1000
    assert parts.get("text", 0) == 0 and "text ends" not in parts
    probe = [f"tx-{i}" for i in (199_999, 0, 77, 200_000)] + ["tx-077", "ty-77", "77", "tx-"]
    assert idmap.encode(column(probe), add=False).tolist() == [199_999, 0, 77, -1] + [-1] * 4
    assert idmap.decode(np.array([0, 77, 199_999])).tolist() == ["tx-0", "tx-77", "tx-199999"]
    assert idmap.nbytes < 200_000 * 6


def test_out_of_order_builds_the_table_and_past_uint32_widens() -> None:
    idmap = IdMap()
    idmap.encode(column([f"tx-{i}" for i in range(1000)]))
    assert idmap.breakdown()["hash tables"] < 1000
    late = ["tx-5000", "tx-2000", f"tx-{2**40}", "tx-3000"]
    slots = idmap.encode(column(late))
    assert slots.tolist() == [1000, 1001, 1002, 1003]
    assert idmap.breakdown()["hash tables"] >= 1004 * 5
    assert idmap.breakdown()["numbers"] >= 8 * 1004
    every = [f"tx-{i}" for i in range(1000)] + late
    assert idmap.encode(column(every[::-1]), add=False).tolist() == list(range(1004))[::-1]
    assert idmap.decode(np.arange(1004, dtype=np.int32)).tolist() == every


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(
            st.one_of(
                st.builds("tx-{}".format, st.integers(0, 40)),
                st.builds("tx-{}".format, st.integers(2**32 - 2, 2**32 + 2)),
                st.builds("ty-{}".format, st.integers(0, 40)),
                st.sampled_from(["tx-07", "ty-1", 5, -1, "", "tx-", "7"]),
            ),
            max_size=12,
        ),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.booleans(), min_size=6, max_size=6),
    st.sampled_from([64, 2]),
    st.booleans(),
)
def test_numbered_against_a_dict(
    batches: list[list[object]], adds: list[bool], bits: int, ascending: bool
) -> None:
    """Mostly numbered ids with one prefix, sometimes sorted per batch, sometimes an integer or
    a string that is not numbered (the map turns to text): the map is still a dict."""
    if ascending:
        batches = [sorted(b, key=lambda v: (type(v) is str, str(v))) for b in batches]
    check_batches(IdMap(hash_bits=bits), batches, adds[: len(batches)])


def test_a_non_numbered_id_turns_every_id_into_text() -> None:
    idmap = IdMap()
    first = [f"tx-{i}" for i in range(3000)]
    idmap.encode(column(first))
    idmap.encode(column([7, "not-numbered", "tx-3000"]))
    parts = idmap.breakdown()
    assert "numbers" not in parts and parts["text ends"] > 0
    every = [*first, 7, "not-numbered", "tx-3000"]
    assert idmap.encode(column(every), add=False).tolist() == list(range(3003))
    assert idmap.decode(np.arange(3003, dtype=np.int32)).tolist() == every
    restored = IdMap()
    restored.restore(idmap.export())
    assert restored.decode(np.arange(3003, dtype=np.int32)).tolist() == every


def test_packing_gives_the_rows_split_reads() -> None:
    buffer, lengths = pack_strings(["tx-12", "tx-3", "payments:1@0"])
    rows = padded(buffer, np.array([0, 5, 9]), lengths)
    ok, starts, numbers = split(rows, lengths)
    assert ok.all() and starts.tolist() == [3, 3, 11] and numbers.tolist() == [12, 3, 0]


def test_kafka_positions_keep_a_code_a_prefix() -> None:
    """Events without an id are named by their position, a prefix a partition: the ids stay
    numbers (and a byte for the prefix), found through the table (not in order across
    partitions), until there are more prefixes than a byte holds."""
    idmap = IdMap()
    positions = [f"payments:{p}@{o}" for o in range(2000) for p in (2, 0, 1)]
    slots = idmap.encode(column(positions))
    parts = idmap.breakdown()
    assert parts["prefix codes"] <= 6000 * 1.25 and parts.get("text", 0) == 0
    assert idmap.decode(slots).tolist() == positions
    assert idmap.encode(column(positions[::-1]), add=False).tolist() == slots[::-1].tolist()
    assert idmap.encode(column(["payments:3@0", "payments:0@2000"]), add=False).tolist() == [-1, -1]
    restored = IdMap()
    restored.restore(idmap.export())
    assert restored.decode(np.arange(6000, dtype=np.int32)).tolist() == positions
    many = [f"topic-{p}:0@1" for p in range(MAX_PREFIXES)]  # 258 prefixes in all: text
    idmap.encode(column(many))
    assert "prefix codes" not in idmap.breakdown() and idmap.breakdown()["text"] > 0
    every = positions + many
    assert idmap.encode(column(every), add=False).tolist() == list(range(len(every)))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10**18 - 1), max_size=30), st.binary(max_size=6))
def test_formatting_compiled_and_in_numpy_agree(numbers: list[int], prefix: bytes) -> None:
    values = np.array(numbers, np.int64)
    expected = [prefix + str(n).encode() for n in numbers]
    codes = np.zeros(len(numbers), np.int64)
    for compiled in (False, AVAILABLE):
        rows, lengths = format_rows([prefix], codes, values, compiled=compiled)
        assert [bytes(r[:n]) for r, n in zip(rows, lengths.tolist(), strict=True)] == expected


def test_prefixes_of_other_lengths_format_in_rows_of_their_own_width() -> None:
    prefixes = [b"/a/long/path/to/the/input/events.jsonl:", b"t-"]
    rows, lengths = format_rows(prefixes, np.array([1, 1]), np.array([5, 77]))
    texts = [bytes(row[:n]) for row, n in zip(rows, lengths.tolist(), strict=True)]
    assert rows.shape[1] == 8 and texts == [b"t-5", b"t-77"]
