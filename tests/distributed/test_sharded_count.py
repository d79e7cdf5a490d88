"""The partitioned index's static count against the single process (the oracle), and against
networkx on real data: random graphs with inserts and deletes, labels, integer, string and mixed
vertex ids, 1-5 shards; the same shards as Ray actors; what it cannot run refused by
name."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import InputError
from core.records import RelationUpdates, UpdateBatch
from monitor.distributed.count import count_all
from monitor.distributed.shard_calls import LocalShards, RayShards
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

QUERIES = parse_queries(
    """
    triangle(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c.
    directed(a, b, c) := e(a, b), e(b, c), e(c, a).
    square(a, b, c, d) := e(a, b), e(b, c), e(c, d), e(d, a), a < b, a < c, a < d, b != d.
    clique4(a, b, c, d) := e(a, b), e(a, c), e(a, d), e(b, c), e(b, d), e(c, d),
        a < b, b < c, c < d.
    path(a, b, c) := e(a, b), f(b, c), a != c.
    hub(a, b, c) := e(a, b), f(b, c), flagged(b), a < c.
    flagged_loop(a, b) := flagged(a), e(a, b), e(b, a), flagged(b), a <= b.
    fan(a, b, c) := g(a, b, c), e(a, b), e(b, c).
    chain(a, b, c, d) := g(a, b, c), g(b, c, d), a != d.
    closed(a, b, c) := e(a, b), e(b, c), e(a, c), g(a, b, c).
    """
)

#: How a test names its vertices: as integers, as strings, or half and half.
ID_KINDS = ("ints", "strings", "mixed", "wide")


def ids(column: np.ndarray, kind: str = "ints") -> np.ndarray:
    """Integer vertex numbers as a kind of external ids: the integers; strings (``v3``, in
    an order unlike the numbers'); even ones as integers and odd ones as strings; integers
    far beyond 32 bits, negative and positive."""
    if kind == "ints":
        return column.astype(np.int64)
    if kind == "wide":
        return (column.astype(np.int64) - 5) * 10**12 + 7
    names = [f"v{v}" if kind == "strings" or v % 2 else int(v) for v in column.tolist()]
    return np.array([*names, None], dtype=object)[:-1]


def batch(
    src: np.ndarray, dst: np.ndarray, diff: np.ndarray, relation: str = "e", kind: str = "ints"
) -> UpdateBatch:
    part = RelationUpdates(
        [ids(src, kind), ids(dst, kind)],
        diff.astype(np.int8),
        np.arange(src.shape[0], dtype=np.int64),
    )
    return UpdateBatch({relation: part}, 0, int(src.shape[0]))


def triples(columns: list[np.ndarray], diff: np.ndarray, kind: str = "ints") -> UpdateBatch:
    """Updates of the ternary relation ``g``."""
    seq = np.arange(diff.shape[0], dtype=np.int64)
    part = RelationUpdates([ids(c, kind) for c in columns], diff.astype(np.int8), seq)
    return UpdateBatch({"g": part}, 0, int(diff.shape[0]))


def labels(vertices: np.ndarray, diff: np.ndarray, kind: str = "ints") -> UpdateBatch:
    """Updates of the unary relation ``flagged``."""
    seq = np.arange(vertices.shape[0], dtype=np.int64)
    part = RelationUpdates([ids(vertices, kind)], diff.astype(np.int8), seq)
    return UpdateBatch({"flagged": part}, 0, int(vertices.shape[0]))


def single_process(batches: list[UpdateBatch]) -> dict[str, int]:
    processor = EpochProcessor(QUERIES, Settings())
    for b in batches:
        processor.preload(b)
    return processor.counts()


@st.composite
def graphs(draw: st.DrawFn) -> list[UpdateBatch]:
    """A few batches of random updates of ``e`` and ``f`` over a few vertices (so patterns
    close), with deletes, duplicates and deletes of absent tuples."""
    vertices = draw(st.integers(3, 14))
    kind = draw(st.sampled_from(ID_KINDS))
    out = []
    for _ in range(draw(st.integers(1, 5))):
        n = draw(st.integers(0, 60))
        ints = st.lists(st.integers(0, vertices - 1), min_size=n, max_size=n)
        src, dst = np.array(draw(ints), np.int64), np.array(draw(ints), np.int64)
        diff = np.array(draw(st.lists(st.sampled_from([1, 1, 1, -1]), min_size=n, max_size=n)))
        relation = draw(st.sampled_from(["e", "e", "f", "flagged", "g"]))
        if relation == "flagged":
            out.append(labels(src, diff, kind))
        elif relation == "g":
            out.append(triples([src, dst, np.array(draw(ints), np.int64)], diff, kind))
        else:
            out.append(batch(src, dst, diff.astype(np.int8), relation, kind))
    return out


@settings(max_examples=150, deadline=None)
@given(graphs(), st.integers(1, 5), st.sampled_from([1 << 20, 7]))
def test_the_sharded_count_is_the_single_process_count(
    batches: list[UpdateBatch], shards: int, max_prefixes: int
) -> None:
    counts, index = count_all(QUERIES, LocalShards(shards), batches, max_prefixes)
    assert counts == single_process(batches)
    stats = index.stats()
    assert len(stats) == shards
    # Each pair is on one shard per position: the shards hold the single process's pairs.
    processor = EpochProcessor(QUERIES, Settings())
    for b in batches:
        processor.preload(b)
    pairs = sum(r.arity * len(r.primary) for r in processor.index.relations.values())
    assert sum(s["pairs"] for s in stats) == pairs


def test_each_shard_holds_its_part_of_the_index() -> None:
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, 5000, 40_000), rng.integers(0, 5000, 40_000)
    whole = count_all(QUERIES[:1], LocalShards(1), [batch(src, dst, np.ones(40_000))], 1 << 20)
    counts, index = count_all(
        QUERIES[:1], LocalShards(4), [batch(src, dst, np.ones(40_000))], 1 << 20
    )
    assert counts == whole[0]
    total = whole[1].stats()[0]["bytes"]
    parts = [s["bytes"] for s in index.stats()]
    assert max(parts) <= 1.3 * total / 4, (parts, total)
    assert min(s["proposed"] for s in index.stats()) > 0  # every shard did work


def test_a_relation_of_nine_ids_is_refused_by_name() -> None:
    wide = UpdateBatch(
        {"uses": RelationUpdates([np.zeros(1, np.int64)] * 9, np.ones(1, np.int8), np.zeros(1))},
        0,
        1,
    )
    with pytest.raises(InputError, match="relation uses has arity 9; allowed are 1 to 8"):
        count_all(QUERIES[:1], LocalShards(2), [wide], 1 << 20)


@pytest.mark.slow
def test_ego_facebook_triangles_and_four_cliques(datasets: Path) -> None:
    """Real data: ego-Facebook (undirected: each edge both ways) with 2 and 4 shards against
    the published triangle count and the single process's 4-cliques."""
    with gzip.open(datasets / "ego-facebook.txt.gz", "rt") as f:
        edges = np.loadtxt(f, dtype=np.int64, comments="#").reshape(-1, 2)
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    updates = [batch(src, dst, np.ones(src.shape[0]))]
    queries = [QUERIES[0], QUERIES[3]]
    expected = single_process(updates)
    assert expected["triangle"] == 1_612_010  # SNAP's published count
    for shards in (2, 4):
        counts, _ = count_all(queries, LocalShards(shards), updates, 1 << 20)
        assert counts == {q.name: expected[q.name] for q in queries}


def test_ray_actors_count_as_the_single_process(ray_cluster: None) -> None:
    rng = np.random.default_rng(2)
    src, dst = rng.integers(0, 300, 5000), rng.integers(0, 300, 5000)
    diff = np.where(rng.random(5000) < 0.1, -1, 1)
    updates = [
        batch(src[:3000], dst[:3000], diff[:3000]),
        batch(src[3000:], dst[3000:], diff[3000:]),
    ]
    counts, index = count_all(QUERIES[:4], RayShards(3), updates, 1 << 12)
    expected = single_process(updates)
    assert counts == {q.name: expected[q.name] for q in QUERIES[:4]}
    assert len(index.stats()) == 3
