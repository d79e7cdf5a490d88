"""The Arrow fast path of JSON decoding against the per-record decoders.

Random and adversarial batches (types changing mid-batch, missing keys and explicit nulls,
huge numbers, NULs and escapes, times with and without zones, arrays and objects, duplicate
keys, ``NaN``, byte-order marks, mixed relations, deletes) are decoded with the fast path on
and off (:func:`~connectors.json_batch.decode_records`; off, every record goes through the
rules :mod:`connectors.json_batch` and :mod:`connectors.event_batch` hold to the per-record
decoders, ``test_kafka_records.py``). Whenever the fast path takes a batch it must give what
the slow path gives: the same columns with the same types, the same field kinds learned in the
same order, the same arities; and it must take the clean batches (a test that it is used at
all)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import json_scan
from connectors.arrow_records import DecodedRecords
from connectors.events import FieldTypes
from connectors.json_arrow import decode_lines
from connectors.json_batch import decode_records
from core.records import INT64_MAX, INT64_MIN
from tests.connectors.test_kafka_records import same_batch, same_column


@pytest.fixture(autouse=True, scope="module", params=["scanner", "pyarrow"])
def reader(request: pytest.FixtureRequest) -> Iterator[str]:
    """Which reader reads the text: the compiled scanner first, or pyarrow alone."""
    if request.param == "scanner" and not json_scan.COMPILED:
        pytest.skip("numba is not in use (SGM_NUMBA=0 or absent): pyarrow reads every block")
    was = json_scan.COMPILED
    json_scan.COMPILED = request.param == "scanner"
    yield request.param
    json_scan.COMPILED = was


def identities(rows: Sequence[int]) -> list[str]:
    return [f"in:{row + 1}" for row in rows]


def same_decoded(slow: DecodedRecords, fast: DecodedRecords) -> None:
    """The same records kept, the same errors, and the same updates and events (compared as
    the batches they number into)."""
    same_column(slow.kept, fast.kept)
    assert fast.errors == slow.errors
    same_batch(slow.batch(0), fast.batch(0))


def learned(types: FieldTypes | None) -> Any:
    return None if types is None else [(r, list(f.items())) for r, f in types.types.items()]


def both(
    values: list[bytes],
    spec: dict[str, dict[str, str]] | None,
    known: dict[str, int],
    defaults: str | list[str] = "e",
) -> bool:
    """Decode ``values`` both ways; True when the fast path took them."""
    slow_types = None if spec is None else FieldTypes.of(spec)
    slow_arities = dict(known)
    slow = decode_records(
        values, defaults, identities, slow_types, slow_arities, 1 << 20, fast_path=False
    )
    fast_types = None if spec is None else FieldTypes.of(spec)
    fast_arities = dict(known)
    text = b"\n".join(values)
    took = decode_lines(text, defaults, identities, fast_types, fast_arities, rows=len(values))
    # Through decode_records, as the sources call it, whichever path it takes.
    again_types = None if spec is None else FieldTypes.of(spec)
    again_arities = dict(known)
    via = decode_records(values, defaults, identities, again_types, again_arities, 1 << 20)
    same_decoded(slow, via)
    assert learned(again_types) == learned(slow_types)
    assert again_arities == slow_arities
    if took is None:
        assert learned(fast_types) == (None if spec is None else learned(FieldTypes.of(spec)))
        assert fast_arities == known
        return False
    assert slow.errors == []
    assert took[1].tolist() == list(range(len(values)))
    same_decoded(slow, took[0])
    assert learned(fast_types) == learned(slow_types)
    assert fast_arities == slow_arities
    return True


# Records ---------------------------------------------------------------------------------------

IDS = st.one_of(
    st.integers(-3, 3),
    st.integers(INT64_MAX - 1, INT64_MAX),
    st.integers(INT64_MIN, INT64_MIN + 1),
    st.sampled_from(["a", "b", "x y", "", "é", "7", "2026-01-01", "\x00", "tx-1", "a\\b"]),
)
ODD_IDS = st.one_of(
    st.integers(INT64_MAX + 1, 2**64 + 5),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.just([1]),
    st.just({"a": 1}),
    st.just("x" * 1025),
    st.just("é" * 1000),  # 2,000 bytes, 1,000 characters: an id
)
NUMBERS = st.one_of(
    st.integers(-(10**6), 10**6),
    st.integers(2**53 - 2, 2**53 + 2),
    st.integers(INT64_MAX - 1, 2**64 + 5),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.just(-0.0),
)
TIMES = st.one_of(
    st.integers(0, 2_000_000_000_000),
    st.floats(-3e14, 3e14),
    st.integers(3 * 10**14, 10**18),
    st.sampled_from(
        [
            "2026-12-02T10:15:00Z",
            "2026-12-02T10:15:00.5+01:00",
            "2026-12-02T10:15:00.123456-05:30",
            "2026-12-02 10:15:00Z",
            "2026-12-02T10:15:00",
            "2026-12-02",
            "yesterday",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999+00:00",
        ]
    ),
)
TEXTS = st.one_of(
    st.sampled_from(["wire", "card", "", "x\x00y", "é", "\u2028", '"quoted"', "2026-01-01"]),
    st.text(max_size=5),
    st.just("y" * 4097),
    st.just("é" * 3000),
)
FIELDS = {
    "amount": NUMBERS,
    "channel": TEXTS,
    "ts": TIMES,
    "flag": st.booleans(),
    "note": st.one_of(TEXTS, NUMBERS, st.booleans(), st.just([1, 2]), st.just({"k": 1})),
}


@st.composite
def event(draw: st.DrawFn, clean: bool) -> dict[str, Any]:
    pairs: dict[str, Any] = {}
    if draw(st.booleans()):
        pairs["relation"] = draw(st.sampled_from(["transfer", "login"]))
    delete = not draw(st.integers(0, 4))
    if delete or draw(st.booleans()):
        pairs["op"] = "delete" if delete else "insert"
    if draw(st.integers(0, 3)):
        pairs["id"] = draw(IDS if clean else st.one_of(IDS, ODD_IDS))
    if not delete or draw(st.booleans()):
        for key in ("src", "dst"):
            if clean or draw(st.integers(0, 9)):
                pairs[key] = draw(IDS if clean else st.one_of(IDS, ODD_IDS))
    for name, values in FIELDS.items():
        if draw(st.booleans()):
            pairs[name] = draw(values | st.none())
    return pairs


@st.composite
def edge(draw: st.DrawFn, clean: bool) -> dict[str, Any]:
    pairs: dict[str, Any] = {}
    if draw(st.booleans()):
        pairs["op"] = draw(st.sampled_from(["insert", "delete"]))
    if draw(st.booleans()):
        pairs["relation"] = draw(st.sampled_from(["e", "f", "r3"]))
    for key in ("src", "dst"):
        pairs[key] = draw(IDS if clean else st.one_of(IDS, ODD_IDS))
    if not draw(st.integers(0, 5)):
        pairs["extra"] = draw(FIELDS["note"])
    if not clean and not draw(st.integers(0, 9)):
        pairs["op"] = draw(st.sampled_from(["upsert", None, 1]))
    if not clean and not draw(st.integers(0, 9)):
        pairs["relation"] = draw(st.sampled_from(["bad name", None, 3, "login"]))
    return pairs


@st.composite
def batch(draw: st.DrawFn) -> list[bytes]:
    clean = draw(st.booleans())
    kinds = draw(st.sampled_from(["events", "edges", "both"]))
    one = {"events": event(clean), "edges": edge(clean), "both": event(clean) | edge(clean)}[kinds]
    records = draw(st.lists(one, min_size=1, max_size=30))
    out = []
    for record in records:
        keys = draw(st.permutations(list(record)))
        ascii_only = draw(st.booleans())  # non-ASCII as UTF-8, or as \u escapes
        text = json.dumps({k: record[k] for k in keys}, ensure_ascii=ascii_only)
        out.append(text.encode("utf-8", "surrogatepass"))
    if not draw(st.integers(0, 4)):
        at = draw(st.integers(0, len(out) - 1))
        out[at] = draw(
            st.sampled_from(
                [
                    b'{"src": 1, "src": 2, "dst": 3}',
                    b'{"src": 1, "dst": NaN}',
                    b'{"src": 1, "dst": 2, "amount": Infinity}',
                    b'\xef\xbb\xbf{"src": 1, "dst": 2}',
                    b'{"src": 1, "dst": 2, "x": 1e400}',
                    b'{"src": "\\ud800", "dst": 2}',
                    b'{"src": "\xff", "dst": 2}',
                    b'{"src": 1, "dst": 2} x',
                    b'{"src": 1, "dst": 2}{"src": 3, "dst": 4}',
                    b"",
                    b"   ",
                    b"[1, 2]",
                    b"7",
                    b'{"src": 1, "dst": 2, "tuple": [1, 2]}',
                    b'{"relation": "r3", "tuple": [1, 2, 3]}',
                    b'{"s\\u0072c": 1, "dst": 2}',
                    b'{"src": 1, "dst": 2, "op": null}',
                    b'{"src": null, "dst": 2}',
                    b'{"src": 1, "dst": 2, "relation": null}',
                    b'{"src": 1,\n "dst": 2}',
                    b'{"src": 1, "dst": 2}\r',
                ]
            )
        )
    return out


SPECS = st.sampled_from(
    [
        None,
        {"transfer": {}, "login": {}},
        {"transfer": {"amount": "number", "channel": "string"}, "login": {}},
        {"transfer": {"ts": "string"}},
        {"transfer": {"flag": "number"}},
    ]
)
KNOWN = st.sampled_from([{}, {"e": 2}, {"e": 2, "r3": 3}, {"f": 1}])


@settings(max_examples=600, deadline=None)
@given(batch(), SPECS, KNOWN, st.sampled_from(["e", "transfer", "both"]))
def test_the_fast_path_decodes_as_the_slow_path(
    values: list[bytes], spec: Any, known: dict[str, int], default: str
) -> None:
    defaults: str | list[str] = default
    if default == "both":
        defaults = ["e" if i % 2 else "transfer" for i in range(len(values))]
    both(values, spec, known, defaults)


@settings(max_examples=200, deadline=None)
@given(st.lists(event(clean=True), min_size=1, max_size=30), st.data())
def test_a_second_batch_reads_with_what_the_first_taught(
    records: list[dict[str, Any]], data: st.DataObject
) -> None:
    """Kinds learned by one batch hold for the next (the same ``FieldTypes`` each way)."""
    cut = data.draw(st.integers(0, len(records)))
    values = [json.dumps(r).encode() for r in records]
    spec = {"transfer": {}, "login": {}}
    slow_types, fast_types = FieldTypes.of(spec), FieldTypes.of(spec)
    slow_arities: dict[str, int] = {}
    fast_arities: dict[str, int] = {}
    for part in (values[:cut], values[cut:]):
        if not part:
            continue
        slow = decode_records(
            part, "e", identities, slow_types, slow_arities, 1 << 20, fast_path=False
        )
        fast = decode_records(part, "e", identities, fast_types, fast_arities, 1 << 20)
        assert fast.errors == slow.errors
        assert learned(fast_types) == learned(slow_types)
        if not slow.errors:
            same_decoded(slow, fast)


def test_clean_batches_take_the_fast_path() -> None:
    """Plain events and edge records are decoded by Arrow (else the tests above test little)."""
    rng = np.random.default_rng(3)
    events = [
        orjson.dumps(
            {
                "op": "insert",
                "relation": "transfer",
                "id": f"tx-{i}",
                "src": int(rng.integers(0, 50)),
                "dst": f"acct-{rng.integers(0, 50)}",
                "amount": float(rng.integers(0, 10**6)) / 100,
                "ts": "2026-12-02T10:15:00.250+01:00" if i % 2 else 1_767_225_600_000 + i,
                "channel": "wire" if i % 3 else None,
            }
        )
        for i in range(500)
    ]
    deletes = [b'{"op":"delete","relation":"transfer","id":"tx-3"}']
    edges = [orjson.dumps({"src": i, "dst": i + 1}) for i in range(500)]
    spec = {"transfer": {}}
    # Integer and text times in one column: Arrow refuses it, the slow path reads it.
    assert not both(events, spec, {})
    timed = [e.replace(b'"ts":"2026-12-02T10:15:00.250+01:00"', b'"ts":5') for e in events]
    assert both(timed, spec, {})
    texts = [e.replace(b'"ts":1767', b'"ts":"2026-12-02T10:15:00Z","x":1767') for e in events]
    assert both(texts, spec, {})
    named = [orjson.dumps({"src": i, "dst": f"acct-{i}"}) for i in range(500)]
    assert both(timed + deletes + named, spec, {"e": 2})
    # Integer and text ids in one column: refused too.
    assert not both(timed + edges, spec, {})
    assert both(edges, None, {})
    assert not both([*edges, b'{"src": 1, "dst": 2, "op": "upsert"}'], None, {})
    assert not both(edges, None, {"e": 3})  # another arity: the slow path's dead letters


def test_time_like_strings_stay_strings_and_are_remembered(reader: str) -> None:
    """Arrow reads ``"2026-01-01"`` as a date: read again as text, and remembered (the
    scanner reads every string as text: nothing to remember)."""
    values = [
        orjson.dumps({"id": i, "src": "2026-01-01", "dst": 1, "day": "2026-01-02"})
        for i in range(5)
    ]
    types = FieldTypes.of({"e": {}})
    found = decode_lines(b"\n".join(values), "e", identities, types, {})
    assert found is not None
    decoded = found[0]
    assert decoded.events["e"].src.tolist() == ["2026-01-01"] * 5
    assert decoded.events["e"].fields["day"].tolist() == ["2026-01-02"] * 5
    assert types.types["e"] == {"day": "string"}
    assert types.text_columns == ({"src", "day"} if reader == "pyarrow" else set())
    assert both(values, {"e": {}}, {})


#: One record that the fast path must leave to the slow one, in a batch it would take otherwise.
REFUSED = [
    b'{"src": "\xff", "dst": "b"}',  # invalid UTF-8 in an id
    b'{"src": "a", "dst": "b", "note": "\xc0\x80"}',  # in a key the decoder never reads
    b'{"src": "a", "dst": "b", "note": "\xed\xa0\x80"}',  # a surrogate, UTF-8 encoded
    b"",  # an empty value: no line for Arrow
    b'{"src": "a", "dst": "b"}{"src": "c", "dst": "d"}',
    b'{"src": "a", "dst": "b", "x": NaN}',
    b'{"src": "a", "dst": "b", "x": [Infinity]}',
    b'\xef\xbb\xbf{"src": "a", "dst": "b"}',
    b'{"src": "a", "dst": "b", "op": null}',
    b'{"src": "a", "dst": "b", "\\u006fp": null}',
    b'{"src": "a", "src": "c", "dst": "b"}',
    b'{"src": "a", "dst": "b"}\r',
    b'{"src": "a", "dst": "b", "tuple": ["a", "b"]}',
]


@pytest.mark.parametrize("odd", REFUSED)
@pytest.mark.parametrize("at", [0, 1, 2])
def test_a_record_arrow_would_misread_goes_the_slow_way(odd: bytes, at: int) -> None:
    values = [b'{"src": "a", "dst": "b", "note": "n"}'] * 3
    values[at] = odd
    assert not both(values, None, {})
    assert not both(values, None, {}, defaults=["e", "f", "e"])


def test_a_blank_value_beside_two_objects_on_one_line_goes_the_slow_way() -> None:
    """Arrow skips a line of spaces and reads two objects on one line as two records: the row
    count alone would not see that each record moved a line."""
    pair = b'{"src": "a", "dst": "b"}{"src": "c", "dst": "d"}'
    assert not both([b"   ", pair], None, {})
    assert not both([pair, b" \t "], None, {})


@pytest.mark.parametrize("ts", [b"1e300", b"-4e14", b"315576000000001"])
def test_a_time_beyond_ten_thousand_years_goes_the_slow_way(ts: bytes) -> None:
    record = b'{"relation": "transfer", "src": 1, "dst": 2, "ts": %s}'
    values = [record % b"5", record % ts, record % b"7"]
    assert not both(values, {"transfer": {}}, {})
    assert both([record % b"5", record % b"315576000000000"], {"transfer": {}}, {})


def test_an_integer_minus_zero_beside_fractions_is_zero() -> None:
    """``-0`` is the integer 0 to ``orjson`` (a field 0.0); Arrow reads it as -0.0 in a
    column of doubles, which would print as ``-0.0``."""
    record = b'{"relation": "t", "src": 1, "dst": 2, "amount": %s}'
    for values in ([record % b"-0", record % b"1.5"], [record % b"-0.0", record % b"-0"]):
        both(values, {"t": {}}, {})


def test_fields_that_first_appear_together_keep_their_record_order() -> None:
    """``b`` is a column before ``a`` (an earlier record names it, null), but both first hold a
    value in the second record, where ``a`` comes first: the per-record decoder learns ``a``
    first."""
    values = [
        b'{"relation": "t", "src": 1, "dst": 2, "b": null}',
        b'{"relation": "t", "src": 1, "dst": 2, "a": 1, "c": "x", "b": 2}',
    ]
    types = FieldTypes.of({"t": {}})
    found = decode_lines(b"\n".join(values), "e", identities, types, {}, rows=2)
    assert found is not None
    assert list(found[0].events["t"].fields) == ["a", "c", "b"]
    assert list(types.types["t"]) == ["a", "c", "b"]
    assert both(values, {"t": {}}, {})


def table_types() -> FieldTypes:
    """``transfer`` events and the ``account`` table, whose ``opened`` holds times."""
    return FieldTypes.of({"transfer": {}, "account": {}}, {"account"}, {"account": {"opened"}})


TABLE_RECORDS = st.fixed_dictionaries(
    {"relation": st.just("account"), "risk": st.sampled_from(["high", "low", None])},
    optional={
        "key": st.one_of(st.integers(0, 5), st.sampled_from(["acct-1", "acct-2"])),
        "op": st.sampled_from(["insert", "delete"]),
        "opened": st.one_of(
            st.integers(0, 10**12),
            st.sampled_from(["2026-11-02T00:00:00Z", "2026-01-01T00:00:00+01:00"]),
        ),
        "ts": st.integers(0, 10),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(TABLE_RECORDS, event(clean=True)), min_size=1, max_size=25))
def test_table_records_decode_alike_both_ways(records: list[dict[str, Any]]) -> None:
    """A table's records (``key`` their id and ends, no ``ts``, times in ``opened``) among
    events: the fast path decodes them as the slow path, or declines, never otherwise."""
    values = [json.dumps(r).encode() for r in records]
    slow_types, fast_types = table_types(), table_types()
    slow = decode_records(values, "e", identities, slow_types, {}, 1 << 20, fast_path=False)
    took = decode_lines(b"\n".join(values), "e", identities, fast_types, {}, rows=len(values))
    if took is not None:
        assert slow.errors == []
        same_decoded(slow, took[0])
        assert learned(fast_types) == learned(slow_types)
    via_types = table_types()
    same_decoded(slow, decode_records(values, "e", identities, via_types, {}, 1 << 20))


def test_clean_table_records_take_the_fast_path() -> None:
    accounts = [
        orjson.dumps({"relation": "account", "key": f"acct-{i}", "risk": "high", "opened": i})
        for i in range(200)
    ]
    accounts += [b'{"op":"delete","relation":"account","key":"acct-3"}']
    transfers = [
        orjson.dumps({"relation": "transfer", "id": f"tx-{i}", "src": 1, "dst": 2, "ts": i})
        for i in range(200)
    ]
    values = [v for pair in zip(accounts, transfers, strict=False) for v in pair]
    took = decode_lines(b"\n".join(values), "e", identities, table_types(), {}, rows=len(values))
    assert took is not None
    slow = decode_records(values, "e", identities, table_types(), {}, 1 << 20, fast_path=False)
    same_decoded(slow, took[0])
    table = took[0].events["account"]
    assert table.ids[:2].tolist() == ["acct-0", "acct-1"] and "ts" not in table.fields
