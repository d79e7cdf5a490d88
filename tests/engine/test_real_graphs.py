"""Published triangle counts of SNAP graphs, by static counting and by streamed deltas.

The stream is every edge in shuffled order with a fifth of them deleted again and re-inserted
later, so the running sum of deltas passes through many other graphs before reaching the full one.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from core.records import RelationUpdates, UpdateBatch
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

TRI = parse_queries("tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c.")
PUBLISHED = {
    "ca-grqc.txt.gz": 48_260,
    "oregon1-010331.txt.gz": 17_144,
    "ego-facebook.txt.gz": 1_612_010,
}


def load(path: Path) -> np.ndarray:
    with gzip.open(path, "rt") as f:
        return np.loadtxt(f, dtype=np.int64, comments="#").reshape(-1, 2)


def batch(src: np.ndarray, dst: np.ndarray, diff: np.ndarray, first: int) -> UpdateBatch:
    seq = np.arange(first, first + src.shape[0], dtype=np.int64)
    return UpdateBatch({"e": RelationUpdates([src, dst], diff, seq)}, first, src.shape[0])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_static_count_matches_published(datasets: Path, name: str) -> None:
    edges = load(datasets / name)
    processor = EpochProcessor(TRI, Settings(undirected=True))
    processor.preload(batch(edges[:, 0], edges[:, 1], np.ones(edges.shape[0], np.int8), 0))
    assert processor.counts() == {"tri": PUBLISHED[name]}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_streamed_deltas_sum_to_published(datasets: Path, name: str) -> None:
    edges = load(datasets / name)
    rng = np.random.default_rng(11)
    order = rng.permutation(edges.shape[0])
    shuffled = edges[order]
    m = shuffled.shape[0]
    # Delete a fifth of the edges soon after inserting them; re-insert them at the end.
    victims = rng.choice(m, m // 5, replace=False)
    victims.sort()
    stream_rows = np.concatenate([np.arange(m), victims, victims])
    position = np.concatenate(
        [
            np.arange(m, dtype=np.float64),
            victims + rng.uniform(1, 5000, victims.shape[0]),
            np.full(victims.shape[0], m + 10_000.0),
        ]
    )
    diff = np.concatenate(
        [
            np.ones(m, np.int8),
            -np.ones(victims.shape[0], np.int8),
            np.ones(victims.shape[0], np.int8),
        ]
    )
    ordering = np.argsort(position, kind="stable")
    rows, diff = stream_rows[ordering], diff[ordering]
    src, dst = shuffled[rows, 0], shuffled[rows, 1]
    processor = EpochProcessor(TRI, Settings(undirected=True, batch_size=10_000))
    total = 0
    minus = 0
    for lo in range(0, src.shape[0], 10_000):
        hi = min(lo + 10_000, src.shape[0])
        out = processor.process(batch(src[lo:hi], dst[lo:hi], diff[lo:hi], lo))
        processor.commit()
        for q in out.queries:
            total += int(q.diff.sum())
            minus += int((q.diff < 0).sum())
    assert minus > 0, "the stream should make triangles disappear along the way"
    assert total == PUBLISHED[name]
    assert processor.counts() == {"tri": PUBLISHED[name]}
