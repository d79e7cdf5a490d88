"""The vertex dictionary's integer ids against a dict: over many batches (the sorted runs of
its map merged and not), known ids keep their dense id, new ones get the next ones, unknown
ones are -1 when not added, and decoding gives every id back."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.index.dictionary import VertexDictionary

ids = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-50, 50))
batches = st.lists(st.tuples(st.lists(ids, max_size=200), st.booleans()), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(batches)
def test_integer_vertex_ids_are_a_dense_dict(steps: list[tuple[list[int], bool]]) -> None:
    dictionary = VertexDictionary()
    model: dict[int, int] = {}
    for values, add in steps:
        got = dictionary.encode(np.array(values, np.int64), add=add).tolist()
        before, fresh = len(model), len(set(values) - set(model))
        for value, dense in zip(values, got, strict=True):
            if value not in model and add:
                assert before <= dense < before + fresh
                assert dense not in model.values()
                model[value] = dense
            assert dense == model.get(value, -1), value
        assert len(dictionary) == len(model)
    if model:
        dense = np.array(list(model.values()), np.int32)
        assert dictionary.decode(dense).tolist() == list(model)
