"""Consolidation across workers (monitor/engine/owned.py), without Kafka.

An epoch's changes are split between 2-4 simulated workers at random (as partitions would split
them). Each worker finds the bindings its share seeds and keeps those it decides; the union of
the workers' output must be the single worker's consolidated output exactly: every changed
binding once, with its whole change, and nothing else. Without the rule, summing per worker
is right only in total, and the test shows that such splits do occur.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.columns import python_values
from core.records import Update, UpdateBatch
from monitor.engine.owned import ChangedTuples, supports
from monitor.query.load import load_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_events_oracle import OPS
from tests.engine.test_events_oracle import QUERIES as EVENT_QUERIES
from tests.engine.test_events_oracle import batch as event_batch

QUERIES = load_queries(
    "tri(a, b, c) := e(a, b), e(b, c), e(a, c).\n"
    "path(a, b, c) := e(a, b), e(b, c), a != c.\n"
    "sq(a, b, c, d) := e(a, b), e(b, c), e(c, d), e(d, a), a < b, a < c, a < d.\n"
    "t3(a, b, c) := r(a, b, c), e(a, b).\n"
)

updates = st.lists(
    st.tuples(
        st.sampled_from(["e", "r"]),
        st.lists(st.integers(0, 5), min_size=3, max_size=3),
        st.booleans(),
    ),
    min_size=1,
    max_size=40,
)


def batch(rows: list[tuple[str, list[int], bool]]) -> UpdateBatch:
    return UpdateBatch.from_updates(
        [
            Update(rel, tuple(ids if rel == "r" else ids[:2]), 1 if insert else -1)
            for rel, ids, insert in rows
        ]
    )


def outputs(processor: EpochProcessor, out: list) -> Counter[tuple[str, tuple[object, ...]]]:  # type: ignore[type-arg]
    found: Counter[tuple[str, tuple[object, ...]]] = Counter()
    for q in out:
        for i, diff in enumerate(q.diff.tolist()):
            key = (q.query, tuple(c[i] for c in q.columns))
            assert key not in found, f"{key} published twice"
            found[key] = diff
    return found


def share(
    processor: EpochProcessor,
    staged: Any,
    owners: np.ndarray,
    w: int,  # type: ignore[type-arg]
) -> tuple[dict[str, Any], ChangedTuples]:
    """Worker ``w``'s share of the staged epoch (the updates ``owners`` gives it), and the
    epoch's table of changed tuples as it sees it."""
    mine = {
        name: change.take(owners[change.seq] == w)
        for name, change in staged.changes.items()
        if change.seq is not None
    }
    changed = ChangedTuples.of(processor.index, staged.changes, lambda s: owners[s] == w)
    return mine, changed


def published(
    processor: EpochProcessor,
    staged: Any,
    owners: np.ndarray,  # type: ignore[type-arg]
    workers: int,
    read: Callable[[list[Any]], Counter[Any]],
) -> Counter[Any]:
    """What the workers publish together, each binding by one worker at most."""
    union: Counter[Any] = Counter()
    for w in range(workers):
        mine, changed = share(processor, staged, owners, w)
        for key, diff in read(processor.evaluate_decided(mine, changed)).items():
            assert key not in union, f"{key} published by two workers"
            union[key] = diff
    return union


@settings(max_examples=150, deadline=None)
@given(before=updates, epoch=updates, workers=st.integers(2, 4), seed=st.integers(0, 2**16))
def test_workers_together_publish_the_single_workers_deltas_once(
    before: list[tuple[str, list[int], bool]],
    epoch: list[tuple[str, list[int], bool]],
    workers: int,
    seed: int,
) -> None:
    assert all(supports(q) for q in QUERIES)
    processor = EpochProcessor(QUERIES, Settings())
    processor.process(batch(before))
    processor.commit()
    staged = processor.stage(batch(epoch))
    expected = outputs(processor, processor.evaluate(staged.changes))

    rng = np.random.default_rng(seed)
    owner_of_update = rng.integers(0, workers, len(epoch))  # the "partition" of each update
    union = published(processor, staged, owner_of_update, workers, partial(outputs, processor))
    summed: Counter[tuple[str, tuple[object, ...]]] = Counter()
    for w in range(workers):
        mine, _ = share(processor, staged, owner_of_update, w)
        summed.update(outputs(processor, processor.evaluate(mine)))
    assert union == expected
    assert {k: v for k, v in summed.items() if v} == expected  # per-worker sums: right in total


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(OPS, max_size=25),
    epoch=st.lists(OPS, min_size=1, max_size=25),
    workers=st.integers(2, 4),
    seed=st.integers(0, 2**16),
)
def test_workers_together_publish_the_single_workers_event_deltas_once(
    before: list[tuple],  # type: ignore[type-arg]
    epoch: list[tuple],  # type: ignore[type-arg]
    workers: int,
    seed: int,
) -> None:
    """The same with events: parallel events of a pair, deletes by id, selections and join
    filters. A pair's change is decided by one of its events' updates, which another worker
    may own than the event of a given binding: the rule must follow the delta queries the
    events seed (the pairs atoms seed none)."""
    processor = EpochProcessor(EVENT_QUERIES, Settings())
    processor.process(event_batch(before, 0))
    processor.commit()
    staged = processor.stage(event_batch(epoch, len(before)))
    expected = event_outputs(processor.evaluate(staged.changes))

    rng = np.random.default_rng(seed)
    owner_of_update = rng.integers(0, workers, len(before) + len(epoch))
    assert published(processor, staged, owner_of_update, workers, event_outputs) == expected


def event_outputs(out: list) -> Counter[tuple[object, ...]]:  # type: ignore[type-arg]
    found: Counter[tuple[object, ...]] = Counter()
    for q in out:
        ids = [python_values(q.edges[e]["id"]) for e in q.edges]
        for i, diff in enumerate(q.diff.tolist()):
            key = (q.query, *(c[i] for c in q.columns), *(e[i] for e in ids))
            assert key not in found, f"{key} published twice"
            found[key] = diff
    return found


def test_a_pair_whose_events_are_deleted_on_two_workers_retracts_both_matches() -> None:
    """Two events of one pair deleted in one epoch, on two workers: the pair's own change is
    decided by one of the deletes, but each retraction belongs to the worker of its event (its
    delta query found it). Deciding by the pair's change lost the other worker's retraction."""
    (query,) = load_queries("pay(a, b) := transfer(a, b) as t.\n")
    for split in ([0, 0, 0, 1], [0, 0, 1, 0]):
        owners = np.asarray(split)
        processor = EpochProcessor([query], Settings())
        processor.process(
            event_batch([("insert", 0, 0, 1, 5, None), ("insert", 1, 0, 1, 7, None)], 0)
        )
        processor.commit()
        staged = processor.stage(event_batch([("delete", 0), ("delete", 1)], 2))
        expected = event_outputs(processor.evaluate(staged.changes))
        assert sorted(expected.values()) == [-1, -1]
        union = published(processor, staged, owners, 2, event_outputs)
        assert union == expected, f"owners {split}"
