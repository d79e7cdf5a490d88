"""Intersecting once per distinct key tuple (:mod:`monitor.engine.shared_keys`).

The oracles of the delta engine and of events run with every two-extender stage shared (no
least batch, no share of distinct tuples too high), from its counts on and from its
intersection on, so that comparisons, checks and join filters all run on the expanded
candidates; and the expansion itself against a loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine import shared_keys
from monitor.engine.extend import StageRunner
from monitor.engine.shared_keys import distinct_probes, expanded
from monitor.index.adjacency import Probe
from tests.engine.test_delta_oracle import LABELLED, PAPER, check_against_oracle, scenario
from tests.engine.test_events_oracle import OPS, QUERIES, Model, batch, check_epochs


@pytest.fixture
def always_shared() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shared_keys, "LEAST", 1)
        patch.setattr(shared_keys, "MOST_DISTINCT", 1.0)
        yield


def _shared(test: Any, counted: bool = True) -> Any:
    """``test`` run with every two-extender stage shared (a fixture does not reach into
    hypothesis's examples); ``counted``: from the counts on (their probes shared), else from
    the intersection on (the counts' probes per prefix)."""

    def run(*args: Any, **kwargs: Any) -> None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(shared_keys, "LEAST", 1)
            patch.setattr(shared_keys, "MOST_DISTINCT", 1.0)
            if not counted:
                patch.setattr(StageRunner, "_shared_counts", lambda self, prefixes: None)
            test(*args, **kwargs)

    return run


@settings(max_examples=120, deadline=None)
@given(scenario())
def test_labelled_queries_shared_match_the_oracle(case: tuple[Any, list[int], int]) -> None:
    _shared(check_against_oracle)(LABELLED, *case)


@settings(max_examples=80, deadline=None)
@given(scenario())
def test_labelled_queries_shared_after_the_counts_match_the_oracle(
    case: tuple[Any, list[int], int],
) -> None:
    _shared(check_against_oracle, counted=False)(LABELLED, *case)


@settings(max_examples=40, deadline=None)
@given(scenario())
def test_paper_queries_shared_match_the_oracle(case: tuple[Any, list[int], int]) -> None:
    stream = [u for u in case[0] if u.relation == "e"]
    _shared(check_against_oracle)(PAPER, stream, case[1], case[2])


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(OPS, min_size=4, max_size=45), cuts=st.lists(st.integers(1, 45), max_size=6))
def test_events_shared_match_the_brute_force(ops: list[Any], cuts: list[int]) -> None:
    _shared(check_epochs)(QUERIES, Model(), batch, ops, cuts)


def test_the_oracle_runs_shared_stages(always_shared: None) -> None:
    """The patched thresholds do send stages through the shared path (else the tests above
    would check the per-prefix one twice)."""
    calls: list[int] = []
    original = shared_keys.expanded

    def counted(*args: Any) -> Any:
        calls.append(1)
        return original(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("monitor.engine.extend.expanded", counted)
        stream, cuts, budget = _triangles()
        check_against_oracle(PAPER[:1], stream, cuts, budget)
    assert calls


def _triangles() -> tuple[list[Any], list[int], int]:
    from core.records import Update

    edges = [(0, 1), (1, 2), (0, 2), (2, 3), (1, 3), (0, 3)]
    stream = [Update("e", e, 1) for e in edges] + [Update("e", (1, 2), -1)]
    return stream, [3, 4], 1 << 20


def test_each_prefix_gets_its_tuples_values_in_order() -> None:
    rng = np.random.default_rng(5)
    distinct = 50
    inverse = rng.integers(0, distinct, 400).astype(np.intp)
    rows = np.sort(rng.integers(0, distinct, 300))
    rows = np.concatenate([rows[::2], rows[1::2]])  # two extenders' results, each in order
    values = np.asarray(rng.integers(0, 1000, size=rows.shape[0]), np.int32)
    owner, got = expanded(rows, values, inverse, distinct)
    found = list(zip(rows.tolist(), values.tolist(), strict=True))
    want = [(p, v) for p, d in enumerate(inverse.tolist()) for r, v in found if r == d]
    assert list(zip(owner.tolist(), got.tolist(), strict=True)) == want


def test_small_or_mostly_distinct_batches_are_not_shared() -> None:
    n = shared_keys.LEAST
    repeated = [Probe(np.arange(n) % 7, None, None), Probe(np.arange(n) % 5, None, None)]
    shared = distinct_probes(repeated)
    assert shared is not None
    first, inverse = shared
    assert first.shape[0] == 35
    pairs = np.stack([np.arange(n) % 7, np.arange(n) % 5], 1)
    assert (pairs[first][inverse] == pairs).all()
    unique = [Probe(np.arange(n), None, None), Probe(np.arange(n), None, None)]
    assert distinct_probes(unique) is None
    small = [p[np.arange(n // 2)] for p in repeated]
    assert distinct_probes(small) is None
    assert distinct_probes(repeated[:1]) is None
