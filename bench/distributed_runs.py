"""One configuration of ``bench.distributed`` on one graph and query, and the capacity loads.

A :class:`Graph` is a simple undirected graph oriented low id -> high id, in a seeded random
order (:func:`bench.workloads.load_graph`, as :mod:`bench.reference_inputs` reads it, and cached
there): its first half is preloaded, then at most ``epochs`` epochs of ``batch`` of the rest are
streamed. Each run starts from an empty index, preloads (not timed) and times every epoch, wall
clock, from the updates handed to the engine to its match deltas (and the commit):

- :func:`run_single`: the single process, :class:`~monitor.service.epochs.EpochProcessor`
  (``process`` and ``commit``: it also makes match ids, which the partitioned engine's deltas do
  not carry; that is in its time, not in ours; both decode the deltas' ids);
- :func:`run_sharded`: :class:`~monitor.distributed.delta.ShardedEpochs` over timed shards
  (:mod:`bench.distributed_shards`), in this process or as Ray actors.

The match deltas of every epoch are checked, not timed: their number and an order-independent
fingerprint (:func:`fingerprint`) per epoch must be the single process's.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.distributed_shards import TimedShards, peak_rss_of_process, reset_peak_rss
from bench.reference_inputs import EGO_FACEBOOK, graph_spec
from bench.workloads import load_graph
from core.records import RelationUpdates, UpdateBatch
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.shard_calls import LocalShards
from monitor.distributed.sharded import ShardedIndex
from monitor.query.ast import Query
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

I64 = npt.NDArray[np.int64]

#: Per epoch: the number of match deltas and their fingerprint.
Checks = list[tuple[int, int]]


@dataclass(frozen=True)
class Graph:
    """A graph's edges (``(n, 2)``, ``u < v``, in stream order), what is preloaded and what
    streamed after it."""

    name: str
    title: str
    edges: I64
    preloaded: int
    streamed: int

    def batch(self, lo: int, hi: int) -> UpdateBatch:
        """Edges ``lo`` to ``hi`` as inserts, numbered by their stream position."""
        seq = np.arange(lo, hi, dtype=np.int64)
        columns: list[npt.NDArray[np.generic]] = [self.edges[lo:hi, 0], self.edges[lo:hi, 1]]
        return UpdateBatch(
            {"e": RelationUpdates(columns, np.ones(hi - lo, np.int8), seq)}, lo, hi - lo
        )

    def epochs(self, size: int) -> list[UpdateBatch]:
        end = self.preloaded + self.streamed
        return [self.batch(lo, min(lo + size, end)) for lo in range(self.preloaded, end, size)]


def title(name: str) -> str:
    """``ego-facebook`` -> ``ego-Facebook``, ``rmat-2M`` -> ``R-MAT 2M``."""
    return "ego-Facebook" if name == "ego-facebook" else name.replace("rmat-", "R-MAT ")


def open_graph(name: str, cache: Path, batch: int, epochs: int) -> Graph | str:
    """The graph ``name`` (see :func:`bench.reference_inputs.graph_spec`) with its first half
    preloaded and the rest streamed, at most ``epochs`` epochs of ``batch`` of it for an R-MAT
    graph (all of ego-Facebook's); or why it is absent."""
    if name == "ego-facebook" and not EGO_FACEBOOK.exists():
        return f"{EGO_FACEBOOK} is absent"
    edges = load_graph(graph_spec(name), cache)
    half = int(edges.shape[0]) // 2
    streamed = int(edges.shape[0]) - half
    if name.startswith("rmat-"):
        streamed = min(streamed, epochs * batch)
    return Graph(name, title(name), edges, half, streamed)


@dataclass
class Outcome:
    """What one configuration did and cost. ``error``: why it has no figures (skipped or
    failed); ``mismatch``: how its changes differ from the single process's."""

    label: str
    kind: str
    workers: int
    updates: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    deltas: int = 0
    checks: Checks = field(default_factory=list)
    #: Index bytes per shard (one entry for the single process).
    shard_bytes: list[int] = field(default_factory=list)
    #: Values proposed plus pairs intersected, per shard, over the streamed epochs.
    work: list[int] = field(default_factory=list)
    #: Bytes sent to and received from the shards over the streamed epochs.
    exchanged: int = 0
    rounds: int = 0
    #: Seconds inside the calls to the shards, and the shards' compute on the critical path.
    call_seconds: float = 0.0
    compute_seconds: float = 0.0
    #: The shards' seconds per method, summed over shards.
    methods: dict[str, float] = field(default_factory=dict)
    #: Peak resident bytes of the driver (this process) and of each shard's process.
    rss_driver: int = 0
    rss_shards: list[int] = field(default_factory=list)
    error: str | None = None
    mismatch: str | None = None

    @property
    def rate(self) -> float:
        return self.updates / self.seconds if self.seconds > 0 else 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.seconds > 0


def fingerprint(columns: Sequence[npt.NDArray[Any]], diff: npt.NDArray[np.integer]) -> int:
    """``sum(diff * hash(row))`` modulo 2**64: the same for the same multiset of (row, diff)
    in any order (uint64 arithmetic wraps; a diff of -1 is 2**64 - 1)."""
    h = np.full(diff.shape[0], 0x9E3779B97F4A7C15, np.uint64)
    for column in columns:
        h = (h ^ column.astype(np.int64).astype(np.uint64)) * np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
    return int((h * diff.astype(np.int64).astype(np.uint64)).sum(dtype=np.uint64))


def run_single(graph: Graph, query: Query, batch: int) -> Outcome:
    """The single process over the graph's streamed epochs."""
    gc.collect()
    reset_peak_rss()
    processor = EpochProcessor([query], Settings())
    processor.preload(graph.batch(0, graph.preloaded))
    out = Outcome("single process", "single", 1)
    for b in graph.epochs(batch):
        began = time.perf_counter()
        result = processor.process(b)
        processor.commit()
        out.latencies.append(time.perf_counter() - began)
        found = [(len(q), fingerprint(q.columns, q.diff)) for q in result.queries]
        out.checks.append((sum(f[0] for f in found), sum(f[1] for f in found) % 2**64))
        out.updates += b.count
    out.seconds = sum(out.latencies)
    out.deltas = sum(c[0] for c in out.checks)
    adjacencies = (a for r in processor.index.relations.values() for _, a in r.adjacencies())
    out.shard_bytes = [sum(a.nbytes for a in adjacencies) + processor.index.dictionary.nbytes]
    out.rss_driver = peak_rss_of_process()
    return out


def run_sharded(
    graph: Graph, query: Query, batch: int, shards: TimedShards, label: str, kind: str
) -> Outcome:
    """The partitioned engine on ``shards`` over the graph's streamed epochs; ends the shards."""
    gc.collect()
    reset_peak_rss()
    out = Outcome(label, kind, shards.count)
    try:
        run = ShardedEpochs([query], shards, Settings().max_prefixes)
        run.index.load(graph.batch(0, graph.preloaded))
        rounds, traffic = shards.rounds, shards.traffic
        before = (
            rounds.wall,
            rounds.compute,
            traffic.rounds,
            sum(traffic.sent) + sum(traffic.received),
        )
        methods = _methods(shards)
        for b in graph.epochs(batch):
            began = time.perf_counter()
            deltas = run.process(b)
            out.latencies.append(time.perf_counter() - began)
            found = [(len(d), fingerprint(d.columns, d.diff)) for d in deltas]
            out.checks.append((sum(f[0] for f in found), sum(f[1] for f in found) % 2**64))
            out.updates += b.count
        out.seconds = sum(out.latencies)
        out.deltas = sum(c[0] for c in out.checks)
        out.call_seconds = rounds.wall - before[0]
        out.compute_seconds = rounds.compute - before[1]
        out.rounds = traffic.rounds - before[2]
        out.exchanged = sum(traffic.sent) + sum(traffic.received) - before[3]
        stats = run.index.stats()
        out.shard_bytes = [s["bytes"] for s in stats]
        out.work = [s.get("proposed", 0) + s.get("intersected", 0) for s in stats]
        usage = shards.usage()
        after = _methods(shards, usage)
        out.methods = {m: after[m] - methods.get(m, 0.0) for m in after}
        out.rss_shards = [] if shards.in_process else [int(u["peak_rss"]) for u in usage]
        out.rss_driver = peak_rss_of_process()
    finally:
        shards.close()
    return out


def _methods(shards: TimedShards, usage: list[dict[str, float]] | None = None) -> dict[str, float]:
    """The shards' seconds per method so far, summed over shards."""
    total: dict[str, float] = {}
    for used in shards.usage() if usage is None else usage:
        for method, seconds in used.items():
            if method != "peak_rss":
                total[method] = total.get(method, 0.0) + seconds
    return total


@dataclass(frozen=True)
class Capacity:
    """The whole graph loaded once into one process's index and into each number of shards."""

    graph: str
    edges: int
    single_bytes: int
    single_seconds: float
    #: Per number of shards: index bytes per shard and the seconds the load took.
    shards: dict[int, tuple[list[int], float]]


def capacity(graph: Graph, counts: list[int], query: Query) -> Capacity:
    """Every edge of ``graph`` loaded (as one batch, committed) into the single process's index
    and into ``S`` shards in this process (:class:`~monitor.distributed.shard_calls.LocalShards`)
    for each ``S`` of ``counts``: the index bytes of each (adjacencies and vertex
    dictionary)."""
    edges = graph.edges
    every = int(edges.shape[0])
    began = time.perf_counter()
    processor = EpochProcessor([query], Settings())
    processor.preload(graph.batch(0, every))
    single_seconds = time.perf_counter() - began
    adjacencies = (a for r in processor.index.relations.values() for _, a in r.adjacencies())
    single = sum(a.nbytes for a in adjacencies) + processor.index.dictionary.nbytes
    del processor
    loaded: dict[int, tuple[list[int], float]] = {}
    for count in counts:
        gc.collect()
        index = ShardedIndex(LocalShards(count))
        began = time.perf_counter()
        index.load(graph.batch(0, every))
        seconds = time.perf_counter() - began
        loaded[count] = ([s["bytes"] for s in index.stats()], seconds)
        del index
    return Capacity(graph.title, every, single, single_seconds, loaded)
