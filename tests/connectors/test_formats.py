"""Record formats: every text and JSON form, id typing, every error with its message."""

from __future__ import annotations

import json
import re

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.edge_blocks import classify_edge_lines, parse_edge_block, parse_edge_lines
from connectors.formats import (
    _check_json_record,
    decode_json_record,
    decode_text_line,
    is_relation_name,
    parse_json_record,
    parse_text_line,
)
from core.errors import InputError
from core.records import INT64_MAX, INT64_MIN, Update

# Text lines ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "relation", "values", "diff"),
    [
        ("1 2", "e", (1, 2), 1),
        ("+ 1 2", "e", (1, 2), 1),
        ("- 1 2", "e", (1, 2), -1),
        ("1\t2", "e", (1, 2), 1),
        ("  1    2  \r\n", "e", (1, 2), 1),
        ("1 2\n", "e", (1, 2), 1),
        ("-1 2", "e", (-1, 2), 1),
        ("- -1 -2", "e", (-1, -2), -1),
        ("1 2 transfer", "transfer", (1, 2), 1),
        ("- alice bob shares_device", "shares_device", ("alice", "bob"), -1),
        ("+ a b my-rel_2", "my-rel_2", ("a", "b"), 1),
        ("+ flagged(7)", "flagged", (7,), 1),
        ("flagged(7)", "flagged", (7,), 1),
        ("- owns(alice, 42, x)", "owns", ("alice", 42, "x"), -1),
        ("-owns(alice,42,x)", "owns", ("alice", 42, "x"), -1),
        ("+flagged( 7 )", "flagged", (7,), 1),
        ("e(1, 2)", "e", (1, 2), 1),
        ("r(1, 2, 3, 4, 5)", "r", (1, 2, 3, 4, 5), 1),
        ("_r(a)", "_r", ("a",), 1),
    ],
)
def test_text_forms(line: str, relation: str, values: tuple[object, ...], diff: int) -> None:
    update = decode_text_line(line, default_relation="e", position="f:1")
    assert update == Update(relation, values, diff, "f:1")  # type: ignore[arg-type]
    assert decode_text_line(line.encode(), default_relation="e", position="f:1") == update


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("12", 12),
        ("0", 0),
        ("-7", -7),
        (str(INT64_MAX), INT64_MAX),
        (str(INT64_MIN), INT64_MIN),
        (str(INT64_MAX + 1), str(INT64_MAX + 1)),
        (str(INT64_MIN - 1), str(INT64_MIN - 1)),
        ("1" * 40, "1" * 40),
        ("x12", "x12"),
        ("12x", "12x"),
        ("007", "007"),
        ("00", "00"),
        ("-0", "-0"),
        ("-007", "-007"),
        ("+5", "+5"),
        ("1_000", "1_000"),
        ("1.5", "1.5"),
        ("-x", "-x"),
        ("١٢", "١٢"),
        ("é", "é"),
    ],
)
def test_text_id_typing(field: str, expected: object) -> None:
    """Canonical int64 decimals become int; everything else stays the same str."""
    update = decode_text_line(f"{field} {field}")
    assert update is not None
    assert update.values == (expected, expected)
    assert all(type(v) is type(expected) for v in update.values)
    explicit = decode_text_line(f"r({field})")
    assert explicit is not None and explicit.values == (expected,)


def test_default_relation_is_the_callers() -> None:
    update = decode_text_line("1 2", default_relation="follows")
    assert update is not None and update.relation == "follows"
    json_update = decode_json_record(b'{"src": 1, "dst": 2}', default_relation="follows")
    assert json_update.relation == "follows"


@pytest.mark.parametrize("line", ["", "   ", "\n", "\r\n", "# a comment", "  # indented", "% mm"])
def test_blank_and_comment_lines_are_skipped(line: str) -> None:
    assert decode_text_line(line, position="f:1") is None
    assert decode_text_line(line.encode(), position="f:1") is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("+", "a sign alone is not an update; expected '[+|-] src dst [relation]'"),
        ("-   ", "a sign alone is not an update"),
        ("1", "expected 2 ids and an optional relation name"),
        ("+ 1", "got 1 field"),
        ("1 2 3 4", "got 4 fields"),
        ("1 2 9x", "relation name '9x' is not allowed; use letters, digits, '_' and '-'"),
        ("1 2 a.b", "relation name 'a.b' is not allowed"),
        ("9x(1)", "relation name '9x' is not allowed"),
        ("(1, 2)", "relation name '' is not allowed"),
        ("owns(a", "expected 'relation(id, ...)' to end with ')', got '(a'"),
        ("owns(a) x", "to end with ')'"),
        ("owns()", "owns() has no ids; give at least one: 'owns(id, ...)'"),
        ("owns( )", "owns() has no ids"),
        ("owns(a,)", "empty id in owns(a,); ids are separated by ','"),
        ("owns(,a)", "empty id in owns(,a)"),
        ("owns(a b, c)", "id 'a b' in owns(...) contains whitespace or a parenthesis"),
        ("owns(a(b), c)", "contains whitespace or a parenthesis"),
        ("owns (a, b)", "an id contains a parenthesis in 'owns (a, b)'"),
        ("1 f(x)", "an id contains a parenthesis"),
        ("1 x)", "an id contains a parenthesis"),
    ],
)
def test_text_errors(line: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        decode_text_line(line, position="edges.txt:7")
    assert message in caught.value.message
    assert caught.value.position == "edges.txt:7"
    assert str(caught.value).startswith("edges.txt:7: ")


def test_text_invalid_utf8_is_an_error() -> None:
    with pytest.raises(InputError, match=r"not valid UTF-8 \(byte 0xff at offset 1\)") as caught:
        decode_text_line(b"a\xff 1", position="f:3")
    assert caught.value.position == "f:3"


@given(st.text(alphabet="0123456789 -+\tab(),#%x_\u00e9\r", max_size=24))
def test_bytes_and_str_lines_decode_alike(line: str) -> None:
    """The same line as str or as UTF-8 bytes gives the same update or the same error."""

    def outcome(raw: bytes | str) -> object:
        try:
            return decode_text_line(raw, position="p")
        except InputError as error:
            return ("error", error.message)

    assert outcome(line) == outcome(line.encode())


def test_relation_names() -> None:
    assert all(is_relation_name(n) for n in ["e", "E", "_", "a-b", "a_b9", "transfer"])
    assert not any(is_relation_name(n) for n in ["", "9a", "-a", "a b", "a.b", "a\n", "é"])


# JSON records ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "relation", "values", "diff"),
    [
        ({"src": 1, "dst": 2}, "e", (1, 2), 1),
        ({"op": "insert", "src": 1, "dst": 2}, "e", (1, 2), 1),
        ({"op": "delete", "src": 1, "dst": 2}, "e", (1, 2), -1),
        ({"op": "delete", "src": "a", "dst": "b", "relation": "t"}, "t", ("a", "b"), -1),
        ({"relation": "flagged", "tuple": [7]}, "flagged", (7,), 1),
        (
            {"op": "delete", "relation": "owns", "tuple": ["alice", 42, "x"]},
            "owns",
            ("alice", 42, "x"),
            -1,
        ),
        ({"src": "12", "dst": 12}, "e", ("12", 12), 1),
        ({"src": INT64_MAX, "dst": INT64_MIN}, "e", (INT64_MAX, INT64_MIN), 1),
        ({"src": "", "dst": 'é " , }'}, "e", ("", 'é " , }'), 1),
        ({"src": "007", "dst": "x12"}, "e", ("007", "x12"), 1),
    ],
)
def test_json_forms(
    record: dict[str, object], relation: str, values: tuple[object, ...], diff: int
) -> None:
    update = decode_json_record(orjson.dumps(record), position="topic[0]@5")
    assert update == Update(relation, values, diff, "topic[0]@5")  # type: ignore[arg-type]
    assert [type(v) for v in update.values] == [type(v) for v in values]


def test_json_record_keeps_whitespace_and_newline() -> None:
    update = decode_json_record(b'  { "src" : 1 , "dst" : 2 }  \n')
    assert update.values == (1, 2)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"src": 1, "dst": ', "record is not valid JSON"),
        (b"", "record is not valid JSON"),
        (b"1 2", "record is not valid JSON"),
        (b"[1, 2]", "a record must be a JSON object, got an array"),
        (b"5", "a record must be a JSON object, got the integer 5"),
        (b'"x"', "a record must be a JSON object, got the string 'x'"),
        (b"null", "a record must be a JSON object, got null"),
        (b'{"op": "upsert", "src": 1, "dst": 2}', "op must be 'insert' or 'delete', got 'upsert'"),
        (b'{"op": 1, "src": 1, "dst": 2}', "op must be 'insert' or 'delete', got the integer 1"),
        (b'{"op": null, "src": 1, "dst": 2}', "op must be 'insert' or 'delete', got null"),
        (b'{"relation": 5, "src": 1, "dst": 2}', "relation must be a string, got the integer 5"),
        (b'{"relation": null, "src": 1, "dst": 2}', "relation must be a string, got null"),
        (b'{"relation": ["e"], "src": 1, "dst": 2}', "relation must be a string, got an array"),
        (b'{"relation": {}, "src": 1, "dst": 2}', "relation must be a string, got an object"),
        (b'{"relation": "a b", "src": 1, "dst": 2}', "relation name 'a b' is not allowed"),
        (b'{"relation": "", "src": 1, "dst": 2}', "relation name '' is not allowed"),
        (b'{"src": 1}', "record needs 'src' and 'dst' (or 'tuple' for any arity); missing 'dst'"),
        (b'{"dst": 1}', "missing 'src'"),
        (b"{}", "missing 'src' and 'dst'"),
        (b'{"tuple": [1], "src": 1}', "give either 'tuple' or 'src' and 'dst', not both"),
        (b'{"tuple": []}', "tuple must be a non-empty array of ids, got an empty array"),
        (b'{"tuple": 5}', "tuple must be a non-empty array of ids, got the integer 5"),
        (b'{"tuple": {"a": 1}}', "tuple must be a non-empty array of ids, got an object"),
        (
            b'{"tuple": [1, true]}',
            "tuple[1] must be a JSON string or an integer within int64, got the boolean true",
        ),
        (
            b'{"src": true, "dst": 2}',
            "src must be a JSON string or an integer within int64, got the boolean true",
        ),
        (b'{"src": 1, "dst": false}', "dst must be a JSON string or an integer within int64"),
        (
            b'{"src": 1.5, "dst": 2}',
            "src must be a JSON string or an integer within int64, got the number 1.5",
        ),
        (b'{"src": 1e3, "dst": 2}', "got the number 1000.0"),
        (b'{"src": null, "dst": 2}', "got null"),
        (b'{"src": [1], "dst": 2}', "got an array"),
        (b'{"src": {}, "dst": 2}', "got an object"),
        (
            b'{"src": 9223372036854775808, "dst": 2}',
            "got the integer 9223372036854775808 (outside int64)",
        ),
        (
            b'{"src": -9223372036854775809, "dst": 2}',
            "src must be a JSON string or an integer within int64",
        ),
        (
            b'{"src": 100000000000000000000, "dst": 2}',
            "src must be a JSON string or an integer within int64",
        ),
    ],
)
def test_json_errors(raw: bytes, message: str) -> None:
    with pytest.raises(InputError) as caught:
        decode_json_record(raw, position="in.jsonl:3")
    assert message in caught.value.message
    assert caught.value.position == "in.jsonl:3"
    assert str(caught.value).startswith("in.jsonl:3: ")


json_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(INT64_MIN - 2, INT64_MAX + 2),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["insert", "delete", "upsert", "e", "t", "9x", "", "12"]),
    st.text(max_size=3),
    st.lists(st.integers(0, 3), max_size=3),
)
json_records = st.dictionaries(
    st.sampled_from(["op", "relation", "src", "dst", "tuple", "ts"]), json_values, max_size=5
)


@given(st.one_of(json_records, json_values))
def test_json_shortcut_agrees_with_the_full_check(record: object) -> None:
    """The quick path for plain edge records decides exactly as the full rule check does."""

    def outcome(decode: object) -> object:
        try:
            return decode()  # type: ignore[operator]
        except InputError as error:
            return ("error", error.message)

    raw = json.dumps(record).encode()
    quick = outcome(lambda: parse_json_record(raw, "e"))
    full = outcome(lambda: _check_json_record(orjson.loads(raw), "e"))
    assert quick == full
    if not isinstance(quick, tuple) or quick[0] != "error":
        assert [type(v) for v in quick[1]] == [type(v) for v in full[1]]  # type: ignore[index]


# Vectorized edge lists -------------------------------------------------------------------------

SIMPLE_LINE = re.compile(r"(0|[1-9][0-9]{0,17})[ \t](0|[1-9][0-9]{0,17})")
simple_ids = st.integers(0, 10**18 - 1).map(str)
odd_ids = st.sampled_from(
    ["0", "00", "007", "-1", "-0", "x", "1" * 18, "1" * 19, str(INT64_MAX), str(INT64_MAX + 1)]
)
separators = st.sampled_from([" ", "\t", "  ", " \t"])
lines = st.one_of(
    st.tuples(simple_ids, st.just(" "), simple_ids).map("".join),
    st.tuples(st.one_of(simple_ids, odd_ids), separators, st.one_of(simple_ids, odd_ids)).map(
        "".join
    ),
    st.sampled_from(
        ["", " ", "# c", "% c", "1", "1 2 3", "+ 1 2", "- 1 2", "1 2 e", " 1 2", "1 2 "]
    ),
)


@given(st.lists(lines, min_size=1, max_size=30))
def test_classified_lines_decode_like_the_line_decoder(block_lines: list[str]) -> None:
    """A line is simple exactly when it is two canonical ids below 10**18 and one space or tab,
    and then the per-line decoder gives the same int edge insert as the vectorized values."""
    block = ("\n".join(block_lines) + "\n").encode()
    starts, ends, simple = classify_edge_lines(block)
    assert len(simple) == len(block_lines)
    expected_edges = []
    for i, line in enumerate(block_lines):
        assert block[starts[i] : ends[i]] == line.encode()
        assert bool(simple[i]) == bool(SIMPLE_LINE.fullmatch(line)), line
        if simple[i]:
            decoded = parse_text_line(line, "e")
            assert decoded is not None
            relation, values, diff = decoded
            assert (relation, diff) == ("e", 1)
            assert all(type(v) is int for v in values)
            expected_edges.append(values)
    src, dst = parse_edge_lines(block, starts, ends, simple)
    assert list(zip(src.tolist(), dst.tolist(), strict=True)) == expected_edges
    whole = parse_edge_block(block)
    if whole is not None:
        assert simple.all()
        assert list(zip(whole[0].tolist(), whole[1].tolist(), strict=True)) == expected_edges
    elif simple.all():
        pytest.fail(f"parse_edge_block refused a block of simple lines: {block!r}")


def test_plain_edge_block_takes_the_vectorized_path() -> None:
    block = b"1 2\n30 40\n0 5\n999999999999999999 0\n7\t8\n"
    columns = parse_edge_block(block)
    assert columns is not None
    assert columns[0].dtype == np.int64 and columns[1].dtype == np.int64
    assert columns[0].tolist() == [1, 30, 0, 999999999999999999, 7]
    assert columns[1].tolist() == [2, 40, 5, 0, 8]


@pytest.mark.parametrize(
    "block",
    [
        b"1 2\n# c\n",
        b"1 2\n\n",
        b"1 2\n007 1\n",
        b"1 2\n1000000000000000000 1\n",
        b"1 2\n-1 2\n",
        b"1 2\n1  2\n",
        b"1 2\n1 \n",
        b"1 2\n 1 2\n",
        b"1 2\n1 2 3\n",
        b"1 2\n1 x\n",
        b"1 2",
        b"",
    ],
)
def test_edge_block_refuses_anything_but_simple_lines(block: bytes) -> None:
    assert parse_edge_block(block) is None


def test_json_fields_other_than_the_update_are_ignored() -> None:
    update = decode_json_record(b'{"src": 1, "dst": "x", "ts": 5, "amount": {"eur": 3}}')
    assert update is not None
    assert (update.relation, update.values, update.diff) == ("e", (1, "x"), 1)
