"""What one configuration measures, inside its own process (see :mod:`bench.isolate`).

Each function starts from a processor whose index holds the preloaded graph, runs one engine (or
baseline) over the head of the workload's stream, and reports through ``emit`` as it goes, so
that a configuration stopped at its time limit still leaves what it had measured. Times are wall
clock around whole epochs: stage, evaluate, decode the output, commit (compactions included).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.baselines import recompute_epoch, recount
from bench.workloads import Workload
from core.records import mirrored
from monitor.index.adjacency import Adjacency
from monitor.index.graph import GraphIndex
from monitor.query.ast import Query
from monitor.service.epochs import EpochProcessor

Record = dict[str, Any]
Emit = Callable[[Record], None]

#: Emit a progress record at least this often (seconds), so a stopped run leaves figures.
PROGRESS_SECONDS = 0.5

#: Per-epoch cumulative figures kept for cross-checking engines (enough for any budget here).
MAX_CHECKPOINTS = 20_000


def index_memory(index: GraphIndex) -> Record:
    """Bytes of the index by level, and the stored directed edges and vertices they hold.

    The *compacted* level is the CSR of every adjacency (offsets and targets; a binary relation
    has two, one per position); *committed* is the delta levels not yet merged into it.
    """
    compacted = committed = 0
    for adjacency in adjacencies(index):
        compacted += int(adjacency.offsets.nbytes + adjacency.targets.nbytes)
        level = adjacency.committed
        committed += level.pairs.nbytes + level.diff.nbytes + level.running.nbytes
    relations = sum(r.nbytes for r in index.relations.values())
    dictionary = int(index.dictionary.nbytes)
    return {
        "index_bytes": int(relations + dictionary),
        "compacted_bytes": int(compacted),
        "committed_bytes": int(committed),
        "dictionary_bytes": dictionary,
        "stored_edges": int(sum(len(r) for r in index.relations.values() if r.arity == 2)),
        "vertices": len(index.dictionary),
    }


def adjacencies(index: GraphIndex) -> list[Adjacency]:
    """Every adjacency of every relation."""
    return [a for r in index.relations.values() for a in r.by_position]


def measure_stream(
    processor: EpochProcessor,
    workload: Workload,
    batch_size: int,
    *,
    budget: float,
    max_updates: int,
    emit: Emit,
) -> None:
    """Stream epochs of ``batch_size`` updates until ``max_updates`` or ``budget`` seconds.

    At least one epoch always runs. Emits cumulative figures every ``PROGRESS_SECONDS`` and a
    final record with ``"final": True``.
    """
    latencies: list[float] = []
    checkpoints: list[list[int]] = []
    updates = applied = deltas = net = 0
    started = time.perf_counter()
    last = started

    def record(final: bool) -> Record:
        lat = np.asarray(latencies)
        out: Record = {
            "final": final,
            "updates": updates,
            "applied": applied,
            "epochs": len(latencies),
            "deltas": deltas,
            "net": net,
            "seconds": float(lat.sum()),
            "p50_ms": float(np.percentile(lat, 50) * 1e3),
            "p99_ms": float(np.percentile(lat, 99) * 1e3),
            "max_ms": float(lat.max() * 1e3),
            "checkpoints": checkpoints,
        }
        if final:
            out.update(index_memory(processor.index))
        return out

    for batch in workload.batches(batch_size, max_updates):
        began = time.perf_counter()
        out = processor.process(batch)
        processor.commit()
        ended = time.perf_counter()
        latencies.append(ended - began)
        updates += out.updates
        applied += out.applied
        deltas += out.deltas
        net += sum(int(q.diff.sum()) for q in out.queries)
        if len(checkpoints) < MAX_CHECKPOINTS:
            checkpoints.append([updates, deltas, net])
        if ended - started >= budget:
            break
        if ended - last >= PROGRESS_SECONDS:
            last = ended
            emit(record(False))
    if latencies:
        emit(record(True))


def measure_recompute(
    processor: EpochProcessor,
    workload: Workload,
    query: Query,
    batch_sizes: list[int],
    *,
    budget: float,
    emit: Emit,
) -> None:
    """The recompute baseline: full recounts after epochs of the largest batch size.

    First the graph as preloaded is counted (``count0``). Then, for each batch size, the cost
    of applying one epoch is timed by staging and aborting the first epochs of the stream (the
    index is left as it was). Then epochs of the largest batch size are applied and recounted,
    while the budget lasts (none if the first count alone took longer). A recount costs the
    same whatever the batch size, so the figures for the other sizes are extrapolated from these.

    ``apply`` maps each batch size to ``[seconds per epoch, updates per epoch]`` (an epoch is
    short when the stream is); ``epochs`` lists ``[updates so far, count, apply s, count s]``.
    """
    count0, seconds0 = recount(processor, query)
    emit({"count0": count0, "count0_seconds": seconds0, "apply": {}, "epochs": []})
    apply_seconds: dict[str, list[float]] = {}
    for size in batch_sizes:
        spent = 0.0
        epochs = updates = 0
        for batch in workload.batches(size, min(len(workload.stream), size * 50)):
            staged = mirrored(batch) if processor.settings.undirected else batch
            began = time.perf_counter()
            processor.index.stage(staged)
            processor.index.abort()
            spent += time.perf_counter() - began
            epochs += 1
            updates += batch.count
            if spent >= 0.25:
                break
        if epochs:
            apply_seconds[str(size)] = [spent / epochs, updates / epochs]
    emit({"count0": count0, "count0_seconds": seconds0, "apply": apply_seconds, "epochs": []})
    largest = max(batch_sizes)
    epochs_out: list[list[float]] = []
    started = time.perf_counter()
    if seconds0 <= budget:
        updates = 0
        for batch in workload.batches(largest):
            done = recompute_epoch(processor, query, batch)
            updates += batch.count
            epochs_out.append([updates, done.count, done.apply_seconds, done.count_seconds])
            emit(
                {
                    "count0": count0,
                    "count0_seconds": seconds0,
                    "apply": apply_seconds,
                    "epochs": epochs_out,
                }
            )
            if time.perf_counter() - started >= budget:
                break


def measure_memory(processor: EpochProcessor, workload: Workload, emit: Emit) -> None:
    """Load the rest of the graph (every edge inserted), compact, and report the index bytes."""
    began = time.perf_counter()
    loaded_updates = 0
    for batch in workload.rest_batches():
        processor.preload(batch)
        loaded_updates += batch.count
    loaded = time.perf_counter() - began
    began = time.perf_counter()
    for adjacency in adjacencies(processor.index):
        adjacency.compact()
    compacted = time.perf_counter() - began
    emit(
        {
            "load_updates": loaded_updates,
            "load_seconds": loaded,
            "compact_seconds": compacted,
            **index_memory(processor.index),
        }
    )
