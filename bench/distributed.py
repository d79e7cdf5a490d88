"""The partitioned engine against the single process (issue #33, first part):
``python -m bench.distributed`` writes ``bench/distributed.md``.

A graph (ego-Facebook from ``../shared/datasets`` when present, and an R-MAT graph) is oriented
(``u < v`` kept, as the paper's oriented queries read it), half its edges are preloaded and the
rest streamed in epochs of ``--batch`` through ``tri`` and ``clique4``:

- the single process (:class:`~monitor.service.epochs.EpochProcessor`), the baseline;
- the partitioned engine (:class:`~monitor.distributed.delta.ShardedEpochs`) with its shards in
  this process (what routing and gathering cost, without Ray) and as Ray actors, for each of
  ``--shards``.

Per configuration: changes/s over the streamed epochs, the ratio to the single process, p50 and
p99 epoch latency, the match deltas (which must be the single process's: the run stops if they
are not), rounds and calls per epoch, index bytes per shard (max, and max/mean) against the
single process's bytes / S, and work max/mean over shards. Wall-clock seconds on a shared
machine: compare ratios within a run.
"""

from __future__ import annotations

import argparse
import gzip
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bench.machine import machine_info
from bench.rmat import rmat_edges
from core.records import RelationUpdates, UpdateBatch
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.sharded import LocalShards, RayShards, Shards
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "distributed.md"
DATASETS = ROOT.parent / "shared" / "datasets"
QUERIES = parse_queries(
    "tri(a, b, c) := e(a, b), e(b, c), e(a, c).\n"
    "clique4(a, b, c, d) := e(a, b), e(a, c), e(a, d), e(b, c), e(b, d), e(c, d)."
)


def oriented(edges: np.ndarray) -> np.ndarray:
    """Each undirected edge once, ``u < v``, no loops, no duplicates, in a seeded random order."""
    u, v = np.minimum(edges[:, 0], edges[:, 1]), np.maximum(edges[:, 0], edges[:, 1])
    pairs = np.unique(np.stack([u, v], axis=1)[u != v], axis=0)
    return pairs[np.random.default_rng(0).permutation(pairs.shape[0])]


def graphs(rmat: int, facebook_too: bool) -> Iterator[tuple[str, np.ndarray]]:
    facebook = DATASETS / "ego-facebook.txt.gz"
    if facebook_too and facebook.exists():
        with gzip.open(facebook, "rt") as f:
            yield "ego-Facebook", oriented(np.loadtxt(f, dtype=np.int64, comments="#"))
    elif facebook_too:
        print(f"{facebook} is absent: ego-Facebook left out", flush=True)
    if rmat:
        yield f"R-MAT {rmat:,}", oriented(rmat_edges(rmat, seed=1))


def batch(edges: np.ndarray, lo: int, hi: int) -> UpdateBatch:
    seq = np.arange(lo, hi, dtype=np.int64)
    part = RelationUpdates([edges[lo:hi, 0], edges[lo:hi, 1]], np.ones(hi - lo, np.int8), seq)
    return UpdateBatch({"e": part}, lo, hi - lo)


def epochs_of(edges: np.ndarray, size: int) -> list[UpdateBatch]:
    half = edges.shape[0] // 2
    return [
        batch(edges, lo, min(lo + size, edges.shape[0])) for lo in range(half, edges.shape[0], size)
    ]


def single(edges: np.ndarray, size: int) -> dict[str, Any]:
    processor = EpochProcessor(QUERIES, Settings())
    processor.preload(batch(edges, 0, edges.shape[0] // 2))
    latencies, deltas = [], 0
    for b in epochs_of(edges, size):
        started = time.perf_counter()
        deltas += processor.process(b).deltas
        processor.commit()
        latencies.append(time.perf_counter() - started)
    index_bytes = sum(
        a.nbytes for r in processor.index.relations.values() for _, a in r.adjacencies()
    )
    return {"latencies": latencies, "deltas": deltas, "bytes": index_bytes}


def sharded(edges: np.ndarray, size: int, shards: Shards) -> dict[str, Any]:
    run = ShardedEpochs(QUERIES, shards, 1 << 20)
    half = edges.shape[0] // 2
    run.index.load("e", [edges[:half, 0], edges[:half, 1]], np.ones(half, np.int8))
    rounds, calls = shards.traffic.rounds, shards.traffic.calls
    latencies, deltas = [], 0
    for b in epochs_of(edges, size):
        started = time.perf_counter()
        deltas += sum(len(d) for d in run.process(b))
        latencies.append(time.perf_counter() - started)
    return {
        "latencies": latencies,
        "deltas": deltas,
        "rounds": shards.traffic.rounds - rounds,
        "calls": shards.traffic.calls - calls,
        "stats": run.index.stats(),
    }


def row(name: str, result: dict[str, Any], base: dict[str, Any], updates: int, shards: int) -> str:
    seconds = sum(result["latencies"])
    p50, p99 = np.percentile(np.array(result["latencies"]) * 1000, [50, 99])
    rate, base_rate = updates / seconds, updates / sum(base["latencies"])
    cells = [name, f"{rate:,.0f}", f"{rate / base_rate:.2f}", f"{p50:.0f} / {p99:.0f}"]
    if "stats" not in result:
        return "| " + " | ".join([*cells, "-", f"{result['bytes']:,}", "-", "-"]) + " |"
    epochs = len(result["latencies"])
    sizes = np.array([s["bytes"] for s in result["stats"]], float)
    work = np.array(
        [s.get("proposed", 0) + s.get("intersected", 0) for s in result["stats"]], float
    )
    return (
        "| "
        + " | ".join(
            [
                *cells,
                f"{result['rounds'] / epochs:.0f} / {result['calls'] / epochs:.0f}",
                f"{sizes.max():,.0f} ({sizes.max() / (base['bytes'] / shards):.2f}x single / S)",
                f"{sizes.max() / sizes.mean():.2f}",
                f"{work.max() / work.mean():.2f}",
            ]
        )
        + " |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--batch", type=int, default=10_000, help="updates per epoch")
    parser.add_argument("--shards", default="1,2,4", help="shard counts, comma separated")
    parser.add_argument("--rmat", type=int, default=200_000, help="R-MAT edges (0: none)")
    parser.add_argument("--no-ray", action="store_true", help="shards in this process only")
    parser.add_argument("--no-facebook", action="store_true", help="R-MAT only")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    counts = [int(s) for s in args.shards.split(",")]
    if not args.no_ray:
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
    info = machine_info()
    lines = [
        "# The partitioned engine against the single process (issue #33, first part)",
        "",
        f"`python -m bench.distributed`, {info['date']}, commit {info['git commit']}: "
        f"oriented graphs, half preloaded, the rest streamed in epochs of {args.batch:,} "
        "through `tri` and `clique4` together; every configuration's match deltas equal the "
        "single process's. *Rounds / calls*: rounds of calls to the shards per epoch, and calls "
        "in them. *Bytes*: the largest shard's index, and its ratio to the single process's "
        "index / S. *Work*: values proposed and pairs intersected, max/mean over shards. "
        f"Machine: {info['CPU']}, {info['logical cores']} cores, shared; load average at the "
        f"end {info['load average at the end (1/5/15 min)']}.",
        "",
    ]
    for name, edges in graphs(args.rmat, not args.no_facebook):
        updates = edges.shape[0] - edges.shape[0] // 2
        print(f"{name}: {edges.shape[0]:,} edges", flush=True)
        base = single(edges, args.batch)
        lines += [
            f"## {name}: {edges.shape[0]:,} edges, {updates:,} streamed, "
            f"{base['deltas']:,} match deltas",
            "",
            "| configuration | changes/s | vs single | epoch p50 / p99 ms | rounds / calls | "
            "bytes, largest shard | bytes max/mean | work max/mean |",
            "|---|---|---|---|---|---|---|---|",
            row("single process", base, base, updates, 1),
        ]
        for count in counts:
            kinds: list[tuple[str, Shards]] = [(f"{count} shards in process", LocalShards(count))]
            if not args.no_ray:
                kinds.append((f"{count} shards as Ray actors", RayShards(count)))
            for label, shard_set in kinds:
                result = sharded(edges, args.batch, shard_set)
                if result["deltas"] != base["deltas"]:
                    raise SystemExit(
                        f"{name}, {label}: {result['deltas']} deltas, not {base['deltas']}"
                    )
                lines.append(row(label, result, base, updates, count))
                print(lines[-1], flush=True)
        lines.append("")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
