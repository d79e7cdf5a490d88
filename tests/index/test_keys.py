"""Tuple keys against a dict: the same tuple always gets the same key, different tuples
different keys (dense, from 1; a batch's new tuples the next ones), unknown tuples 0 when not
added, and decoding gives the tuple back; with the compiled probe and the numpy one, and with a
hash so weak that most tuples collide (positions and tags), so every probe must compare the
tuples themselves."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.index import hashtable
from monitor.index import keys as keys_module
from monitor.index.keys import TupleKeys

Batch = tuple[list[tuple[int, ...]], bool]


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, list[Batch]]:
    width = draw(st.integers(2, 4))
    vertex = st.integers(0, draw(st.sampled_from([3, 40, 2**31 - 1])))
    tuples = st.lists(st.tuples(*[vertex] * width), max_size=60)
    return width, draw(st.lists(st.tuples(tuples, st.booleans()), min_size=1, max_size=5))


def weak_mix(values: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
    """Seven hashes in all, tags included: nearly every probe meets other tuples first."""
    return (values.astype(np.uint64) % np.uint64(7)) * np.uint64(0x0101010101010101)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("weak", [False, True], ids=["mixed", "colliding"])
@settings(max_examples=60, deadline=None)
@given(case=batches())
def test_tuple_keys_are_a_dense_dict_of_tuples(
    case: tuple[int, list[Batch]], compiled: bool, weak: bool
) -> None:
    width, steps = case
    with pytest.MonkeyPatch.context() as patch:
        if compiled and not hashtable.ENABLED:
            pytest.skip("numba is switched off")
        patch.setattr(hashtable, "ENABLED", compiled)
        if weak:
            patch.setattr(keys_module, "mix", weak_mix)
        keys = TupleKeys(width)
        model: dict[tuple[int, ...], int] = {}
        for tuples, add in steps:
            columns = [np.array([t[i] for t in tuples], np.int32) for i in range(width)]
            got = keys.encode(columns, add=add).tolist()
            before, fresh = len(model), len(set(tuples) - set(model))
            for t, key in zip(tuples, got, strict=True):
                if t not in model and add:  # a new tuple: the next ids, in some order
                    assert before < key <= before + fresh, t
                    assert key not in model.values(), t
                    model[t] = key
                assert key == model.get(t, 0), t
            assert keys.size == len(model) + 1
        if model:
            decoded = keys.decode(np.array(list(model.values()), np.int64))
            assert list(zip(*(c.tolist() for c in decoded), strict=True)) == list(model)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(0, 4000),
    top=st.sampled_from([50, 2**31 - 1]),
    asked=st.lists(st.tuples(st.integers(-1, 60), st.integers(0, 60)), max_size=50),
    seed=st.integers(0, 2**32 - 1),
)
def test_find_packed_probes_as_find_values_does(
    n: int, top: int, asked: list[tuple[int, int]], seed: int, compiled: bool
) -> None:
    """The fused hash-and-probe of packed pairs finds every pair the table holds, by id, and
    nothing else: pairs absent, among them some whose tag equals a present pair's on their
    probe sequence (thousands of lookups meet some), and a negative left, never a pair."""
    if compiled and not hashtable.ENABLED:
        pytest.skip("numba is switched off")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hashtable, "ENABLED", compiled)
        rng = np.random.default_rng(seed)
        pairs = sorted({(int(a), int(b)) for a, b in rng.integers(0, top, (n, 2))})
        packed = np.array([(a << 32) | b for a, b in pairs], np.int64)
        values = np.concatenate([[0], packed]).astype(np.int64)  # (ids from 1, as a fold's)
        table = hashtable.SlotTable()
        ids = np.arange(1, len(pairs) + 1, dtype=np.int32)
        table.add(hashtable.mix(packed.view(np.uint64)), ids, lambda: hashtable._NOTHING)
        probes = asked + [(int(a), int(b)) for a, b in rng.integers(0, top, (2 * n, 2))]
        probes += [pairs[i] for i in rng.integers(0, len(pairs), n)] if pairs else []
        left = np.array([a for a, _ in probes], np.int32)
        right = np.array([b for _, b in probes], np.int32)
        got = table.find_packed(values, left, right).tolist()
        index = {p: i + 1 for i, p in enumerate(pairs)}
        assert got == [index.get(p, -1) if p[0] >= 0 else -1 for p in probes]
