"""The vertex dictionary's integer ids against a dict: over many batches (the sorted runs of
its map merged and not), known ids keep their dense id, new ones get the next ones, unknown
ones are -1 when not added, and decoding gives every id back."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.index import dictionary as dictionary_module
from monitor.index import hashtable
from monitor.index.dictionary import VertexDictionary

ids = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-50, 50))
batches = st.lists(st.tuples(st.lists(ids, max_size=200), st.booleans()), min_size=1, max_size=12)


def weak_mix(values: np.ndarray) -> np.ndarray:
    """A hash with seven values, one home and one tag each: long probe sequences of keys that
    share both, so only the stored values tell them apart."""
    return (values.astype(np.uint64) % np.uint64(7)) * np.uint64(0x0101010101010101)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("weak", [False, True], ids=["mixed", "colliding"])
@settings(max_examples=100, deadline=None)
@given(steps=batches)
def test_integer_vertex_ids_are_a_dense_dict(
    steps: list[tuple[list[int], bool]], compiled: bool, weak: bool
) -> None:
    """Each batch's new ids are numbered in the order of their values (repeated ones once)."""
    if compiled and not hashtable.ENABLED:
        pytest.skip("numba is switched off")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hashtable, "ENABLED", compiled)
        if weak:
            patch.setattr(dictionary_module, "mix", weak_mix)
        dictionary = VertexDictionary()
        model: dict[int, int] = {}
        for values, add in steps:
            got = dictionary.encode(np.array(values, np.int64), add=add).tolist()
            before = len(model)
            fresh = sorted(set(values) - set(model))
            for value, dense in zip(values, got, strict=True):
                if value not in model and add:
                    assert dense == before + fresh.index(value), value
                    model[value] = dense
                assert dense == model.get(value, -1), value
            assert len(dictionary) == len(model)
    if model:
        dense = np.array(list(model.values()), np.int32)
        assert dictionary.decode(dense).tolist() == list(model)


mixed = st.one_of(st.integers(-50, 50), st.sampled_from(["a", "b", "0", "x" * 40]))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(mixed, max_size=60), min_size=1, max_size=6), st.integers(0, 6))
def test_a_restored_dictionary_finds_every_id_and_goes_on_numbering(
    steps: list[list[object]], cut: int
) -> None:
    """Integer and string ids exported in two parts (the batches before ``cut`` and after, as
    checkpoints of a state directory are) and restored into a new dictionary: every id keeps
    its dense id, and new ids are numbered on after the restored ones."""
    dictionary = VertexDictionary()
    model: dict[object, int] = {}
    blobs = []
    for k, values in enumerate(steps):
        if k == cut:
            blobs.append(dictionary.export(0))
        got = dictionary.encode(np.array(values, dtype=object)).tolist()
        model.update(zip(values, got, strict=True))
    blobs.append(dictionary.export(len(blobs) and _size(blobs[0])))
    restored = VertexDictionary()
    for blob in blobs:
        restored.restore(blob)
    assert len(restored) == len(dictionary) == len(model)
    keys = list(model)
    assert restored.encode(np.array(keys, dtype=object), add=False).tolist() == list(model.values())
    assert restored.decode(np.array(list(model.values()), np.int32)).tolist() == keys
    fresh = restored.encode(np.array([10**12, "new", 10**12], dtype=object)).tolist()
    assert fresh == [len(model), len(model) + 1, len(model)]


def _size(blob: bytes) -> int:
    """How many entries an export holds."""
    return int(np.frombuffer(blob, "<u4", 1)[0])


texts = st.one_of(st.sampled_from(["a", "a\x00", "\x00", "", "b\x00\x00"]), st.text(max_size=4))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.one_of(texts, st.integers(-3, 3)), max_size=30), min_size=1))
def test_string_vertex_ids_are_told_apart_by_every_character(
    steps: list[list[str | int]],
) -> None:
    """Ids that differ only in trailing NUL characters are different vertices (numpy's own
    strings would make them one), and decoding gives each back as it came."""
    dictionary = VertexDictionary()
    model: dict[str | int, int] = {}
    for values in steps:
        column = np.empty(len(values), object)
        column[:] = values
        got = dictionary.encode(column).tolist()
        for value, dense in zip(values, got, strict=True):
            assert model.setdefault(value, dense) == dense, repr(value)
        assert len(set(model.values())) == len(model)
    if model:
        dense = np.array(list(model.values()), np.int32)
        assert dictionary.decode(dense).tolist() == list(model)
