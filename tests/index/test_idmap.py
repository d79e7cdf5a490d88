"""The event id map against a dict: string, integer and mixed ids, forced hash collisions,
export/restore, and strings a fixed-width array would get wrong (NULs, non-ASCII, surrogates)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.json_rows import encode_rows
from connectors.json_rows import values as values_of
from core.columns import python_values
from core.compiled import AVAILABLE
from core.errors import InputError
from monitor.index import id_columns
from monitor.index import texts as texts_module
from monitor.index.hashtable import SlotTable
from monitor.index.idmap import IdMap
from monitor.index.texts import padded

ODD = ["", "\x00", "a\x00", "\x00a", "é", "日本", "\ud800", "x" * 100, "tx-1", "1", "-1"]
#: Numbered strings (:mod:`monitor.index.numbered`): kept as numbers until one is not.
NUMBERED = st.builds(
    "{}{}".format, st.sampled_from(["tx-", "", "é"]), st.integers(0, 10**18 + 10)
) | st.sampled_from(["tx-007", "tx-0", "tx-00", "0", "tx-" + "9" * 18, "tx-" + "1" * 19])
ids = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-3, 3),
    st.text(max_size=12),
    st.sampled_from(ODD),
    NUMBERED,
)


def column(values: list[object]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


class Model:
    """What the map must do: a dict of (type, value) -> slot in order of first appearance."""

    def __init__(self) -> None:
        self.slots: dict[tuple[type, object], int] = {}

    def encode(self, values: list[object], add: bool) -> list[int]:
        out = []
        for v in values:
            key = (type(v), v)
            if key not in self.slots and add:
                self.slots[key] = len(self.slots)
            out.append(self.slots.get(key, -1))
        return out


def check_batches(idmap: IdMap, batches: list[list[object]], adds: list[bool]) -> None:
    model = Model()
    for values, add in zip(batches, adds, strict=True):
        slots = idmap.encode(column(values), add=add)
        expected = model.encode(values, add)
        # Slots are dense but given out in any order within a batch: compare as a renaming.
        seen = {int(s): v for s, v in zip(slots.tolist(), values, strict=True) if s >= 0}
        assert (slots < 0).tolist() == [e < 0 for e in expected]
        assert len(idmap) == len(model.slots)
        back = idmap.decode(slots[slots >= 0])
        assert [(type(v), v) for v in back.tolist()] == [
            (type(v), v) for v, s in zip(values, slots.tolist(), strict=True) if s >= 0
        ]
        assert len(seen) == len({(type(v), v) for v in seen.values()})
    restored = IdMap()
    restored.restore(idmap.export())
    every = np.arange(len(idmap), dtype=np.int32)
    assert [(type(v), v) for v in restored.decode(every).tolist()] == [
        (type(v), v) for v in idmap.decode(every).tolist()
    ]
    assert restored.encode(idmap.decode(every).astype(object), add=False).tolist() == list(
        range(len(idmap))
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(ids, max_size=20), min_size=1, max_size=6),
    st.lists(st.booleans(), min_size=6, max_size=6),
    st.sampled_from([64, 3, 0]),
)
def test_against_a_dict(batches: list[list[object]], adds: list[bool], bits: int) -> None:
    """0 and 3 hash bits: every string collides with many others; still exact."""
    check_batches(IdMap(hash_bits=bits), batches, adds[: len(batches)])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(ids, max_size=60, unique_by=lambda v: (type(v), v)),
    st.data(),
    st.sampled_from([64, 3]),
)
def test_a_subset_keeps_the_ids_of_its_slots_in_order(
    values: list[object], data: st.DataObject, bits: int
) -> None:
    """Compaction keeps some slots' ids: slot ``i`` of the subset is the ``i``-th kept id, the
    others are unknown, and new ids go after (string, integer and mixed ids; collisions)."""
    idmap = IdMap(hash_bits=bits)
    slots = idmap.encode(column(values)).tolist()
    by_slot = [values[slots.index(s)] for s in range(len(values))]
    keep = sorted(data.draw(st.sets(st.integers(0, 59))) & set(range(len(values))))
    subset = idmap.subset(np.array(keep, np.int32))
    kept = [by_slot[s] for s in keep]
    assert len(subset) == len(kept)
    every = np.arange(len(kept), dtype=np.int32)
    assert [(type(v), v) for v in subset.decode(every).tolist()] == [(type(v), v) for v in kept]
    assert subset.encode(column(by_slot), add=False).tolist() == [
        keep.index(s) if s in keep else -1 for s in range(len(values))
    ]
    assert subset.encode(column(["a-brand-new-id"])).tolist() == [len(kept)]  # 13+ characters
    restored = IdMap()
    restored.restore(subset.export())
    assert [(type(v), v) for v in restored.decode(every).tolist()] == [(type(v), v) for v in kept]


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(0, 300),
    keep=st.sets(st.integers(0, 299)),
    later=st.lists(st.integers(0, 700), max_size=40),
)
def test_a_subset_of_counted_ids_equals_the_subset_through_their_text(
    n: int, keep: set[int], later: list[int]
) -> None:
    """Ascending numbered ids of one prefix are subset by their numbers: the map then finds,
    decodes and adds ids (again in order, or not, or of another prefix) exactly as the map
    rebuilt from their text does."""
    idmap = IdMap()
    idmap.encode(column([f"tx-{i}" for i in range(n)]))
    slots = np.array(sorted(k for k in keep if k < n), np.int32)
    fast = idmap.subset(slots)
    slow = IdMap()
    slow.restore(idmap._export(slots.astype(np.int64)))
    assert len(fast) == len(slow) == slots.shape[0]
    every = np.arange(len(fast), dtype=np.int32)
    assert fast.decode(every).tolist() == slow.decode(every).tolist()
    probes = column([f"tx-{i}" for i in later] + ["other-1", "tx-01"])
    assert fast.encode(probes, add=False).tolist() == slow.encode(probes, add=False).tolist()
    assert fast.encode(probes).tolist() == slow.encode(probes).tolist()
    grown = np.arange(len(fast), dtype=np.int32)
    assert fast.decode(grown).tolist() == slow.decode(grown).tolist()


def test_a_subset_holds_arrays_for_its_ids_only() -> None:
    idmap = IdMap()
    idmap.encode(column([f"transaction-{i}" for i in range(200_000)]))
    subset = idmap.subset(np.arange(0, 200_000, 100, dtype=np.int32))
    assert subset.nbytes * 50 < idmap.nbytes
    assert subset.decode(np.array([0, 1999])).tolist() == ["transaction-0", "transaction-199900"]


def test_strings_only_keep_no_values_and_ints_only_no_text() -> None:
    strings, ints = IdMap(), IdMap()
    strings.encode(column([f"tx-{i}" for i in range(5000)]))
    ints.encode(np.arange(5000, dtype=np.int64))
    assert "int values" not in strings.breakdown()
    assert strings.breakdown()["kinds"] == 0
    assert ints.breakdown().get("text", 0) == 0 and "text ends" not in ints.breakdown()
    assert ints.decode(np.array([0, 4999])).dtype == np.int64
    assert strings.decode(np.array([0, 4999])).tolist() == ["tx-0", "tx-4999"]


def test_ints_and_their_text_are_different_ids() -> None:
    idmap = IdMap()
    slots = idmap.encode(column([1, "1", 1, "1", True]))
    assert slots[0] == slots[2] != slots[1] == slots[3] != slots[4]
    assert idmap.decode(slots).tolist() == [1, "1", 1, "1", "True"]


def test_growth_rehashes_every_id() -> None:
    idmap = IdMap(hash_bits=20)
    first = idmap.encode(column([f"id-{i}" for i in range(30_000)]))
    again = idmap.encode(column([f"id-{i}" for i in range(29_999, -1, -1)]), add=False)
    assert again.tolist() == first[::-1].tolist()
    assert idmap.encode(np.array([7, 8], np.int64)).tolist() == [30_000, 30_001]


def test_out_of_range_integers_are_input_errors() -> None:
    with pytest.raises(InputError):
        IdMap().encode(column([2**64]))


def test_slot_table_probes_past_equal_hashes() -> None:
    table = SlotTable()
    keys = np.arange(100, dtype=np.int64)
    hashes = np.zeros(100, np.uint64)  # one hash for every key: one long probe sequence
    ids = keys.astype(np.int32)
    table.add(hashes, ids, lambda: (np.empty(0, np.uint64), ids[:0]))
    found = table.find(hashes[:40], lambda rows, ids: ids == keys[rows] * 3)
    assert found.tolist() == [3 * r if 3 * r < 100 else -1 for r in range(40)]


def test_slot_table_compares_only_keys_whose_tag_matches() -> None:
    """Keys with one home position and different top bytes: a lookup asks ``equal`` about the
    id whose hash tag matches only, through windows of positions, and an absent key whose tag
    no entry has costs no comparison at all."""
    table = SlotTable()
    n = 50
    hashes = (np.arange(n, dtype=np.uint64) << np.uint64(56)) | np.uint64(5)
    ids = np.arange(n, dtype=np.int32)
    table.add(hashes, ids, lambda: (np.empty(0, np.uint64), ids[:0]))
    asked: list[int] = []

    def equal(rows: np.ndarray, found: np.ndarray) -> np.ndarray:
        asked.extend(found.tolist())
        return np.asarray(found == rows + 10, np.bool_)

    absent = np.array([np.uint64(200) << np.uint64(56) | np.uint64(5)], np.uint64)
    assert table.find(np.concatenate([hashes[10:40], absent]), equal).tolist() == [
        *range(10, 40),
        -1,
    ]
    assert sorted(asked) == list(range(10, 40))


@settings(max_examples=200, deadline=None)
@given(st.lists(ids, min_size=1, max_size=30))
def test_id_hashes_from_the_stored_bytes_are_the_match_id_hashes(values: list[object]) -> None:
    """``match_id`` hashes an event's id from the map's bytes; it must be the hash of the
    decoded id, or alerts would change ids between a run and its consumers' records."""
    from monitor.service.match_ids import Hashed, id_hashes, match_ids

    idmap = IdMap()
    slots = idmap.encode(column(values), add=True)
    decoded = idmap.decode(slots)
    assert id_columns.id_hashes(idmap, slots).tolist() == id_hashes(decoded).tolist()
    for compiled in (None, False):  # the default (compiled where numba is in use), numpy
        direct = match_ids(
            "q", [Hashed(id_columns.id_hashes(idmap, slots))], len(values), compiled=compiled
        )
        assert direct.tolist() == match_ids("q", [decoded], len(values), compiled=False).tolist()


plain = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(ids, plain, plain), min_size=1, max_size=30), st.integers(0, 2**32))
def test_the_output_column_of_slots_holds_the_decoded_ids(values: list[object], seed: int) -> None:
    """The ids of a match's events go out as a column (fixed-width bytes where every id is
    plain ASCII text, no Python string per id): as JSON it must be the decoded ids, whatever
    the mix (integers, empty, quotes, backslashes, controls, non-ASCII, surrogates)."""
    idmap = IdMap()
    slots = idmap.encode(column(values), add=True)
    picked = np.random.default_rng(seed).permutation(slots)
    got = id_columns.column(idmap, picked)
    assert python_values(got) == idmap.decode(picked).tolist()
    texts = [v for v in values if isinstance(v, str)]
    simple = all(t and t.isascii() and t.isprintable() and not {'"', "\\"} & set(t) for t in texts)
    if len(texts) == len(values) and simple:
        assert got.dtype.kind == "S", "plain text ids are encoded without Python strings"
    if any("\ud800" in t for t in texts):
        return  # not JSON text (orjson, the input's decoder, refuses lone surrogates)
    text, ends = encode_rows([values_of(got)], len(values))
    written = np.split(text, ends[:-1])
    assert [bytes(w) for w in written] == [orjson.dumps(v) for v in idmap.decode(picked).tolist()]


@given(st.lists(st.binary(max_size=30), max_size=40), st.integers(0, 40))
def test_padded_rows_compiled_and_in_numpy_are_the_same(texts: list[bytes], width: int) -> None:
    buffer = np.frombuffer(b"".join(texts) or b"\x00", np.uint8)
    lengths = np.array([len(t) for t in texts], np.int64)
    starts = np.cumsum(lengths) - lengths
    for w in (None, max(width, 1)):
        numpy_rows = padded(buffer, starts, lengths, w, compiled=False)
        if AVAILABLE:
            assert (padded(buffer, starts, lengths, w, compiled=True) == numpy_rows).all()
        cut = [t[: numpy_rows.shape[1]] for t in texts]
        assert [bytes(r[: len(t)]) for r, t in zip(numpy_rows, cut, strict=True)] == cut


PRINTABLE_IDS = st.integers(0, 10**12).map(lambda i: f"tx-{i}")


@given(st.lists(st.text(max_size=8) | PRINTABLE_IDS, max_size=30))
def test_string_places_give_back_every_string(strings: list[str]) -> None:
    """Each string's bytes where its place says, whether ``orjson``'s array could be read
    (nothing escaped) or not (quotes, backslashes, control characters, lone surrogates)."""
    buffer, starts, lengths = texts_module.string_places(strings)
    got = [
        bytes(buffer[a : a + n]).decode("utf-8", "surrogatepass")
        for a, n in zip(starts.tolist(), lengths.tolist(), strict=True)
    ]
    assert got == strings


PRINTABLE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)


@given(st.lists(st.binary(max_size=30), max_size=40) | st.lists(PRINTABLE.map(str.encode)))
def test_row_hashes_and_plain_text_compiled_and_in_numpy_are_the_same(texts: list[bytes]) -> None:
    """The hashes are the match ids' and ids' (stable across versions): the compiled pass
    must give the numpy steps' words; plain ASCII the same verdict (printable bytes, no quote
    or backslash, none empty)."""
    buffer = np.frombuffer(b"".join(texts) or b"\x00", np.uint8)
    lengths = np.array([len(t) for t in texts], np.int64)
    rows = padded(buffer, np.cumsum(lengths) - lengths, lengths, compiled=False)
    hashed = texts_module.hash_rows(rows, lengths, compiled=False)
    plain = texts_module.plain_ascii(rows, lengths, compiled=False)
    assert plain == all(t and all(0x20 <= b < 0x7F and b not in b'"\\' for b in t) for t in texts)
    if AVAILABLE:
        assert (texts_module.hash_rows(rows, lengths, compiled=True) == hashed).all()
        assert texts_module.plain_ascii(rows, lengths, compiled=True) == plain


def test_text_ends_grow_from_four_bytes_to_eight_past_the_largest_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ends are ``uint32`` (4 bytes an id) until the text passes what they hold, then
    ``int64``; the ids before and after read back the same (lowered threshold: no 4 GiB)."""
    monkeypatch.setattr(texts_module, "TEXT_OFFSET_MAX", 100)
    idmap = IdMap()
    first = [f"i{i}x" for i in range(20)]  # 3-4 bytes each: under 100 (and kept as text)
    later = [f"i{i}x" for i in range(20, 60)]
    idmap.encode(column(first))
    assert idmap._texts is not None and idmap._texts.end.dtype == np.uint32
    idmap.encode(column(later))
    assert idmap._texts.end.dtype == np.int64
    slots = idmap.encode(column(first + later), add=False)
    assert slots.tolist() == list(range(60))
    assert idmap.decode(slots).tolist() == first + later
    assert python_values(id_columns.column(idmap, slots)) == first + later
    restored = IdMap()
    restored.restore(idmap.export())
    assert restored.decode(slots).tolist() == first + later
