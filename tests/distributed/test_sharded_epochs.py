"""Delta queries on the partitioned index, epoch after epoch, against the single process: the
same match deltas in every epoch, on random graphs with inserts, deletes, duplicates and random
epoch boundaries, labels, integer, string and mixed vertex ids, over 1-5 shards (in process,
and as Ray actors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.records import RelationUpdates, UpdateBatch
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.shard_calls import LocalShards, RayShards, Shards
from monitor.engine.delta import MatchDeltas
from monitor.service.epochs import EpochProcessor
from monitor.service.query_output import QueryOutput
from monitor.service.settings import Settings
from tests.distributed.test_sharded_count import ID_KINDS, QUERIES, ids

pytestmark = pytest.mark.usefixtures("tuples_renumbered_often")


def rows(columns: Sequence[Any], diff: np.ndarray) -> list[tuple[tuple[int, ...], int]]:
    bindings = zip(*(np.asarray(c).tolist() for c in columns), strict=True)
    return sorted(zip(bindings, diff.tolist(), strict=True), key=repr)  # (ints beside strs)


def mine(deltas: list[MatchDeltas]) -> dict[str, Any]:
    return {d.query: rows(d.columns, d.diff) for d in deltas if len(d)}


def theirs(queries: list[QueryOutput]) -> dict[str, Any]:
    return {q.query: rows(q.columns, q.diff) for q in queries if len(q)}


@st.composite
def streams(draw: st.DrawFn) -> list[UpdateBatch]:
    """Updates of ``e``, ``f``, the label ``flagged`` and the triples ``g`` over a few vertices
    (named by integers, strings, both, or integers beyond 32 bits), cut into epochs at random."""
    vertices = draw(st.integers(3, 10))
    kind = draw(st.sampled_from(ID_KINDS))
    n = draw(st.integers(1, 120))
    ints = st.lists(st.integers(0, vertices - 1), min_size=n, max_size=n)
    src, dst = ids(np.array(draw(ints)), kind), ids(np.array(draw(ints)), kind)
    third = ids(np.array(draw(ints)), kind)
    diff = np.array(draw(st.lists(st.sampled_from([1, 1, -1]), min_size=n, max_size=n)), np.int8)
    names = st.sampled_from(["e", "e", "f", "flagged", "g"])
    relation = np.array(draw(st.lists(names, min_size=n, max_size=n)))
    cuts = sorted(set(draw(st.lists(st.integers(1, n), max_size=6))) | {n})
    out, lo = [], 0
    for hi in cuts:
        parts = {}
        for name in ("e", "f", "flagged", "g"):
            at = np.flatnonzero(relation[lo:hi] == name) + lo
            if at.shape[0]:
                columns = {"flagged": [src[at]], "g": [src[at], dst[at], third[at]]}.get(
                    name, [src[at], dst[at]]
                )
                parts[name] = RelationUpdates(columns, diff[at], at.astype(np.int64))
        out.append(UpdateBatch(parts, lo, hi - lo))
        lo = hi
    return out


def same_epochs(
    batches: list[UpdateBatch], shards: Shards, max_prefixes: int, shared: bool | None = None
) -> None:
    single = EpochProcessor(QUERIES, Settings())
    sharded = ShardedEpochs(QUERIES, shards, max_prefixes, shared_rounds=shared)
    for batch in batches:
        expected = theirs(single.process(batch).queries)
        single.commit()
        assert mine(sharded.process(batch)) == expected


@settings(max_examples=150, deadline=None)
@given(streams(), st.integers(1, 5), st.sampled_from([1 << 20, 5]), st.booleans())
def test_every_epoch_s_deltas_are_the_single_process_s(
    batches: list[UpdateBatch], shards: int, max_prefixes: int, shared: bool
) -> None:
    """(``shared``: the delta queries of a query share their rounds, as over Ray.)"""
    same_epochs(batches, LocalShards(shards), max_prefixes, shared)


def test_ray_shards_epoch_after_epoch(ray_cluster: None) -> None:
    rng = np.random.default_rng(8)
    n = 4000
    src, dst = rng.integers(0, 120, n), rng.integers(0, 120, n)
    diff = np.where(rng.random(n) < 0.15, -1, 1).astype(np.int8)
    batches = [
        UpdateBatch(
            {
                "e": RelationUpdates(
                    [src[lo : lo + 500], dst[lo : lo + 500]],
                    diff[lo : lo + 500],
                    np.arange(lo, lo + 500, dtype=np.int64),
                )
            },
            lo,
            500,
        )
        for lo in range(0, n, 500)
    ]
    same_epochs(batches, RayShards(3), 1 << 12)
