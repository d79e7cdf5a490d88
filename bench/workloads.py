"""Benchmark workloads: a graph, the part of it preloaded, and the stream of updates after that.

A *graph* is an undirected simple edge list, canonical ``(u, v)`` with ``u < v``, in a seeded
random order: a SNAP file from ``../shared/datasets`` (which lists every edge both ways, and may
hold self loops and duplicates: all of that is dropped here) or an R-MAT graph from
:mod:`bench.rmat` (cached as ``.npy`` so that every worker and every run reads the same one).

A :class:`Workload` cuts the graph's edge order in two: the first ``preload`` fraction is loaded
before anything is measured; the rest is streamed as inserts, with deletes of earlier edges
(preloaded ones or ones streamed before) mixed in so that ``deletes`` of the streamed updates
are deletes. The stream is built whole with array operations and kept only up to
``max_updates`` (no configuration streams more than that).

A *labelled* workload puts the edges in the relation ``transfer`` and flags a ``flagged``
fraction of the vertices (a unary relation ``flagged``): half of the flags are preloaded, the
others are streamed, at random positions among the edge updates.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.rmat import canonical_keys, rmat_edges
from core.records import RelationUpdates, UpdateBatch

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]

#: Relation names of the two kinds of workload.
PLAIN_RELATION = "e"
EDGE_RELATION = "transfer"
FLAG_RELATION = "flagged"

#: Update kinds in a stream.
EDGE, FLAG = 0, 1

#: Edges per preload batch: bounds the memory of loading a large graph (a batch's staging
#: sorts and dictionary look-ups take a few times its size).
PRELOAD_CHUNK = 4_000_000


@dataclass(frozen=True)
class GraphSpec:
    """Where a graph comes from: a SNAP file (``path``) or R-MAT (``edges``, ``seed``)."""

    name: str
    path: str | None = None
    edges: int = 0
    seed: int = 0

    @property
    def kind(self) -> str:
        return "dataset" if self.path is not None else "rmat"


def dataset_specs(directory: Path) -> list[GraphSpec]:
    """One spec per ``*.txt.gz`` / ``*.txt`` edge list in ``directory``, sorted by size."""
    files = sorted(
        (p for p in directory.glob("*.txt*") if p.name.endswith((".txt", ".txt.gz"))),
        key=lambda p: p.stat().st_size,
    )
    return [GraphSpec(p.name.split(".txt")[0], path=str(p)) for p in files]


def rmat_spec(edges: int, seed: int = 1) -> GraphSpec:
    """The R-MAT graph of ``edges`` distinct undirected edges."""
    return GraphSpec(f"rmat-{human(edges)}", edges=edges, seed=seed)


def human(n: int) -> str:
    """``1000000 -> "1M"``, ``20000 -> "20k"``, else the digits."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def read_edge_list(path: str) -> I64:
    """A SNAP edge list (``#`` comments, ``src dst`` lines) as an ``(n, 2)`` int64 array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        raw = np.loadtxt(handle, comments="#", dtype=np.int64, ndmin=2)
    return raw[:, :2]


def load_graph(spec: GraphSpec, cache: Path, order_seed: int = 0) -> I64:
    """The graph's undirected edges, canonical and distinct, in a seeded random order."""
    cache.mkdir(parents=True, exist_ok=True)
    if spec.path is not None:
        stamp = hashlib.sha256(f"{spec.path}:{Path(spec.path).stat().st_mtime_ns}".encode())
        cached = cache / f"{spec.name}-{stamp.hexdigest()[:12]}-o{order_seed}.npy"
    else:
        cached = cache / f"rmat-{spec.edges}-s{spec.seed}-o{order_seed}.npy"
    if cached.exists():
        loaded: I64 = np.load(cached)
        return loaded
    if spec.path is not None:
        raw = read_edge_list(spec.path)
        keys = np.unique(canonical_keys(raw[:, 0], raw[:, 1]))
        pairs = np.stack([keys >> np.int64(32), keys & np.int64(0xFFFFFFFF)], axis=1)
    else:
        pairs = rmat_edges(spec.edges, seed=spec.seed)
    rng = np.random.default_rng(order_seed)
    pairs = np.ascontiguousarray(pairs[rng.permutation(pairs.shape[0])])
    tmp = cached.with_suffix(".tmp.npy")
    np.save(tmp, pairs)
    tmp.replace(cached)
    return pairs


@dataclass
class Stream:
    """Updates in stream order: kind (edge or flag), the tuple, and the diff."""

    kind: I8
    src: I64
    dst: I64
    diff: I8

    def __len__(self) -> int:
        return int(self.diff.shape[0])

    @property
    def deletes(self) -> int:
        return int((self.diff < 0).sum())


class Workload:
    """A graph's preload and its stream of updates, as batches for the epoch processor."""

    def __init__(
        self,
        edges: I64,
        *,
        labelled: bool = False,
        preload: float = 0.5,
        deletes: float = 0.1,
        flagged: float = 0.01,
        max_updates: int | None = None,
        seed: int = 0,
    ) -> None:
        if not 0.0 <= preload < 1.0:
            raise ValueError(f"preload must be in [0, 1); got {preload}")
        if not 0.0 <= deletes < 1.0:
            raise ValueError(f"deletes must be in [0, 1); got {deletes}")
        self.labelled = labelled
        self.relation = EDGE_RELATION if labelled else PLAIN_RELATION
        self.edges = edges
        rng = np.random.default_rng(seed)
        m = int(edges.shape[0])
        self.preloaded_edges = int(m * preload)
        self.flags_preloaded = np.empty(0, np.int64)
        flags_streamed = np.empty(0, np.int64)
        if labelled:
            vertices = np.unique(edges)
            chosen = rng.choice(vertices, max(1, int(vertices.shape[0] * flagged)), replace=False)
            half = chosen.shape[0] // 2
            self.flags_preloaded, flags_streamed = chosen[:half], chosen[half:]
        self.stream = _stream(edges, self.preloaded_edges, deletes, flags_streamed, rng)
        self.total_stream = len(self.stream)
        if max_updates is not None and max_updates < len(self.stream):
            s = self.stream
            cut = slice(0, max_updates)
            self.stream = Stream(s.kind[cut], s.src[cut], s.dst[cut], s.diff[cut])

    def preload_batches(self, chunk: int = PRELOAD_CHUNK) -> Iterator[UpdateBatch]:
        """Everything loaded before the stream, in batches of ``chunk`` edges (then the flags)."""
        yield from self._inserts(self.edges[: self.preloaded_edges], chunk)
        flags = self.flags_preloaded
        if flags.shape[0]:
            part = RelationUpdates(
                [flags.copy()],
                np.ones(flags.shape[0], np.int8),
                np.arange(self.preloaded_edges, self._base(), dtype=np.int64),
            )
            yield UpdateBatch({FLAG_RELATION: part}, self.preloaded_edges, flags.shape[0])

    def rest_batches(self, chunk: int = PRELOAD_CHUNK) -> Iterator[UpdateBatch]:
        """Every edge not preloaded, as inserts (to load the whole graph)."""
        yield from self._inserts(self.edges[self.preloaded_edges :], chunk)

    def _inserts(self, edges: I64, chunk: int) -> Iterator[UpdateBatch]:
        for lo in range(0, int(edges.shape[0]), chunk):
            piece = edges[lo : lo + chunk]
            n = int(piece.shape[0])
            part = RelationUpdates(
                [piece[:, 0].copy(), piece[:, 1].copy()],
                np.ones(n, np.int8),
                np.arange(lo, lo + n, dtype=np.int64),
            )
            yield UpdateBatch({self.relation: part}, lo, n)

    def batch(self, lo: int, hi: int) -> UpdateBatch:
        """Stream updates ``lo .. hi-1`` as one batch; sequence numbers follow the preload."""
        s = self.stream
        hi = min(hi, len(s))
        first = self._base() + lo
        seq = np.arange(first, first + (hi - lo), dtype=np.int64)
        kind = s.kind[lo:hi]
        parts: dict[str, RelationUpdates] = {}
        if self.labelled and (kind == FLAG).any():
            edge = kind == EDGE
            flag = ~edge
            parts[FLAG_RELATION] = RelationUpdates(
                [s.src[lo:hi][flag]], s.diff[lo:hi][flag], seq[flag]
            )
            if edge.any():
                parts[self.relation] = RelationUpdates(
                    [s.src[lo:hi][edge], s.dst[lo:hi][edge]], s.diff[lo:hi][edge], seq[edge]
                )
        else:
            parts[self.relation] = RelationUpdates([s.src[lo:hi], s.dst[lo:hi]], s.diff[lo:hi], seq)
        return UpdateBatch(parts, first, hi - lo)

    def batches(self, size: int, limit: int | None = None) -> Iterator[UpdateBatch]:
        """Consecutive batches of ``size`` updates from the start of the stream."""
        end = len(self.stream) if limit is None else min(limit, len(self.stream))
        for lo in range(0, end, size):
            yield self.batch(lo, min(lo + size, end))

    def _base(self) -> int:
        return self.preloaded_edges + int(self.flags_preloaded.shape[0])


def _stream(
    edges: I64, preloaded: int, deletes: float, flags: I64, rng: np.random.Generator
) -> Stream:
    """Inserts of ``edges[preloaded:]`` in order, deletes and flag inserts mixed in.

    Each delete removes a distinct edge chosen among all the graph's edges, at a random point
    after that edge was inserted (any point, for a preloaded edge). Positions are drawn as
    floats on the axis of insert positions and everything is sorted once.
    """
    m = int(edges.shape[0])
    n_insert = m - preloaded
    n_delete = min(m, round(n_insert * deletes / (1.0 - deletes))) if n_insert else 0
    victims = rng.choice(m, n_delete, replace=False) if n_delete else np.empty(0, np.int64)
    inserted_at = np.where(victims < preloaded, -1, victims - preloaded).astype(np.float64)
    delete_at = inserted_at + (n_insert - inserted_at) * (1.0 - rng.random(n_delete))
    flag_at = rng.random(flags.shape[0]) * max(n_insert, 1)
    position = np.concatenate([np.arange(n_insert, dtype=np.float64), delete_at, flag_at])
    # Ties: an insert before a delete at the same point (never of the same edge, see above).
    tie = np.concatenate(
        [np.zeros(n_insert, np.int8), np.ones(n_delete, np.int8), np.ones(flags.shape[0], np.int8)]
    )
    order = np.lexsort((tie, position))
    kind = np.concatenate(
        [np.zeros(n_insert + n_delete, np.int8), np.ones(flags.shape[0], np.int8)]
    )
    src = np.concatenate([edges[preloaded:, 0], edges[victims, 0], flags])
    dst = np.concatenate([edges[preloaded:, 1], edges[victims, 1], np.zeros_like(flags)])
    diff = np.concatenate(
        [
            np.ones(n_insert, np.int8),
            np.full(n_delete, -1, np.int8),
            np.ones(flags.shape[0], np.int8),
        ]
    )
    return Stream(kind[order], src[order], dst[order], diff[order])
