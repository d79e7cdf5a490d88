"""The fused intersection of two adjacencies (:mod:`monitor.index.intersect`) against sets.

Two random CSRs with delta levels that add pairs and remove present ones (the kernels' cases,
:mod:`tests.index.test_kernels`); for each prefix a key of each and the side that proposes:
the values both hold, per prefix in order, whichever side proposes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.index import adjacency, kernels
from monitor.index.intersect import intersect
from monitor.index.levels import Level
from tests.index.test_kernels import cases


def current(view: adjacency.AdjacencyView, key: int) -> set[int]:
    values = set(view.targets[view.offsets[key] : view.offsets[key + 1]].tolist())
    for pair, diff in zip(view.delta.pairs.tolist(), view.delta.diff.tolist(), strict=True):
        if pair >> 32 == key:
            (values.add if diff > 0 else values.discard)(pair & 0xFFFFFFFF)
    return values


@pytest.mark.skipif(kernels.KERNELS != "numba", reason="the fused kernel is compiled only")
@settings(max_examples=300, deadline=None)
@given(cases(), cases(), st.data())
def test_the_values_both_hold_for_each_prefix_whichever_side_proposes(
    one: tuple[np.ndarray, ...],  # type: ignore[type-arg]
    other: tuple[np.ndarray, ...],  # type: ignore[type-arg]
    data: st.DataObject,
) -> None:
    views = [adjacency.AdjacencyView(c[0], c[1], Level.of(c[2], c[3])) for c in (one, other)]
    # (runs of prefixes testing one key of one side: a stage's prefixes come so, and a run
    # long enough puts the key's values in a bitmap, cleared for the next)
    runs = data.draw(
        st.lists(
            st.tuples(
                st.integers(0, views[0].offsets.shape[0] - 2),
                st.integers(0, views[1].offsets.shape[0] - 2),
                st.booleans(),
                st.integers(1, 4),
            ),
            max_size=6,
        )
    )
    keys = [np.array([r[side] for r in runs for _ in range(r[3])], np.int64) for side in (0, 1)]
    from_b = np.array([r[2] for r in runs for _ in range(r[3])], np.bool_)
    n = from_b.shape[0]
    probes = [v.probe(k) for v, k in zip(views, keys, strict=True)]
    rows, values = intersect(
        (views[0].offsets, views[0].targets, views[0].delta),
        (probes[0].keys, *probes[0].ranges()),
        (views[1].offsets, views[1].targets, views[1].delta),
        (probes[1].keys, *probes[1].ranges()),
        from_b,
    )
    want = [
        (i, v)
        for i in range(n)
        for v in sorted(current(views[0], int(keys[0][i])) & current(views[1], int(keys[1][i])))
    ]
    assert list(zip(rows.tolist(), values.tolist(), strict=True)) == want
