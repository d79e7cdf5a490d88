"""Persistence figures: restart time, bytes per edge resident and on disk, throughput on vs off.

``python -m bench.persistence [--sizes 1M,10M]`` writes ``bench/persistence.md``, which
``python -m bench.run`` includes in BENCHMARKS.md. Every measurement runs in a fresh
subprocess (``--one KIND SIZE DIR``) so that resident memory is that process's alone.

- *restart*: a state directory holding ``SIZE`` directed edges (a snapshot, then after the
  stream also a log) is opened and loaded into an empty index; wall time, resident bytes after
  the load, index bytes, bytes on disk.
- *stream*: half the graph preloaded, then inserts of the rest with 10% deletes of earlier edges,
  in epochs of 10,000 updates, evaluating directed triangles; once in memory only, once with a
  state directory (one synced RocksDB write batch per epoch). The ratio is the cost of
  durability.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.workloads import load_graph, rmat_spec
from core.records import RelationUpdates, UpdateBatch
from monitor.index.graph import GraphIndex
from monitor.index.store import StateStore
from monitor.index.stored_meta import StoredMeta
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "bench"
OUT = Path(__file__).resolve().parent / "persistence.md"
BATCH = 10_000
STREAM = 200_000
QUERY = parse_queries("triangle(a, b, c) := e(a, b), e(b, c), e(a, c).")


def rss_bytes() -> int:
    """Resident set size of this process now."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def batch(pairs: np.ndarray, diff: np.ndarray, first: int) -> UpdateBatch:
    seq = np.arange(first, first + pairs.shape[0], dtype=np.int64)
    part = RelationUpdates([pairs[:, 0].copy(), pairs[:, 1].copy()], diff, seq)
    return UpdateBatch({"e": part}, first, pairs.shape[0])


def build(size: int, directory: Path) -> dict[str, Any]:
    """A state directory holding the whole graph as one snapshot."""
    pairs = load_graph(rmat_spec(size), CACHE)
    index = GraphIndex()
    started = time.perf_counter()
    for lo in range(0, pairs.shape[0], 4_000_000):
        chunk = pairs[lo : lo + 4_000_000]
        index.apply(batch(chunk, np.ones(chunk.shape[0], np.int8), lo))
    loaded = time.perf_counter() - started
    with StateStore.open(directory) as store:
        started = time.perf_counter()
        store.commit_epoch(index, StoredMeta(epoch=0), {}, 0, snapshot=True)
        written = time.perf_counter() - started
    return {"edges": index.edge_count(), "index_build_s": loaded, "snapshot_write_s": written}


def restart(directory: Path) -> dict[str, Any]:
    """Open and load a state directory into an empty index."""
    baseline = rss_bytes()
    index = GraphIndex()
    started = time.perf_counter()
    with StateStore.open(directory) as store:
        store.load(index)
        disk = store.disk_bytes()
        meta = store.meta
    seconds = time.perf_counter() - started
    edges = index.edge_count()
    return {
        "edges": edges,
        "restart_s": seconds,
        "log_bytes": meta.log_bytes if meta else 0,
        "resident_bytes": rss_bytes() - baseline,
        "index_bytes": index.nbytes,
        "disk_bytes": disk,
    }


def stream(size: int, directory: Path | None) -> dict[str, Any]:
    """Stream inserts and deletes over a half-preloaded graph; with a store if ``directory``."""
    pairs = load_graph(rmat_spec(size), CACHE)
    half = pairs.shape[0] // 2
    rng = np.random.default_rng(3)
    inserts = pairs[half : half + STREAM - STREAM // 10]
    deletes = pairs[rng.choice(half, STREAM // 10, replace=False)]
    updates = np.concatenate([inserts, deletes])
    diff = np.concatenate([np.ones(inserts.shape[0], np.int8), -np.ones(deletes.shape[0], np.int8)])
    order = rng.permutation(updates.shape[0])
    updates, diff = updates[order], diff[order]
    processor = EpochProcessor(QUERY, Settings(batch_size=BATCH))
    for lo in range(0, half, 4_000_000):
        chunk = pairs[lo : min(lo + 4_000_000, half)]
        processor.preload(batch(chunk, np.ones(chunk.shape[0], np.int8), lo))
    store = None
    if directory is not None:
        store = StateStore.open(directory)
        store.commit_epoch(processor.index, StoredMeta(epoch=0), {}, 0, snapshot=True)
    deltas = 0
    started = time.perf_counter()
    for lo in range(0, updates.shape[0], BATCH):
        before = len(processor.index.dictionary)
        out = processor.process(batch(updates[lo : lo + BATCH], diff[lo : lo + BATCH], half + lo))
        processor.commit()
        deltas += out.deltas
        if store is not None:
            meta = StoredMeta(epoch=out.epoch, position={"seq": half + lo + BATCH})
            store.commit_epoch(
                processor.index, meta, out.changes, before, event_changes=out.event_changes
            )
    seconds = time.perf_counter() - started
    if store is not None:
        store.close()
    return {
        "updates": int(updates.shape[0]),
        "deltas": deltas,
        "stream_s": seconds,
        "updates_per_s": updates.shape[0] / seconds,
        "peak_resident_bytes": rss_bytes(),
        "index_bytes": processor.index.nbytes,
    }


def one(kind: str, size: int, directory: str) -> dict[str, Any]:
    path = Path(directory)
    if kind == "build":
        return build(size, path)
    if kind == "restart":
        return restart(path)
    if kind == "stream-off":
        return stream(size, None)
    return stream(size, path)


def child(kind: str, size: int, directory: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.persistence", "--one", kind, str(size), str(directory)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def measure(size: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        snap, live = Path(tmp) / "snapshot", Path(tmp) / "stream"
        print(f"[{size:,}] building a state directory", file=sys.stderr)
        built = child("build", size, snap)
        print(f"[{size:,}] restarting from the snapshot", file=sys.stderr)
        restarted = child("restart", size, snap)
        print(f"[{size:,}] streaming in memory", file=sys.stderr)
        off = child("stream-off", size, live)
        print(f"[{size:,}] streaming with persistence", file=sys.stderr)
        on = child("stream-on", size, live)
        print(f"[{size:,}] restarting from snapshot + log", file=sys.stderr)
        relog = child("restart", size, live)
    return {
        "size": size,
        "build": built,
        "restart": restarted,
        "off": off,
        "on": on,
        "restart_log": relog,
    }


def render(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        restart, relog, off, on = r["restart"], r["restart_log"], r["off"], r["on"]
        edges = restart["edges"]
        rows.append(
            f"| {r['size']:,} | {restart['restart_s']:.2f} | {relog['restart_s']:.2f} for "
            f"{relog['edges']:,} edges ({relog['log_bytes'] / 1e6:.1f} MB of log) | "
            f"{restart['resident_bytes'] / edges:.1f} | "
            f"{restart['index_bytes'] / edges:.1f} | {restart['disk_bytes'] / edges:.1f} | "
            f"{off['updates_per_s']:,.0f} | {on['updates_per_s']:,.0f} | "
            f"{on['updates_per_s'] / off['updates_per_s']:.2f} |"
        )
    head = (
        "| directed edges | restart from snapshot, s | restart from snapshot + log, s | "
        "resident B/edge after restart | index B/edge | on disk B/edge | updates/s in memory "
        "| updates/s persisted | ratio |\n|---|---|---|---|---|---|---|---|---|"
    )
    return (
        "Generated by `python -m bench.persistence`. R-MAT graphs, relation `e` directed (each "
        "edge stored forward and reverse in memory, once on disk). *Restart* opens the state "
        "directory and loads it into an empty index (dictionary, every relation, every "
        "position's adjacency rebuilt). *Resident* is the growth of the process's RSS over the "
        "load: the index, RocksDB's 64 MiB block cache and write buffers, and what the allocator "
        "kept of the load's temporaries. The stream is 200,000 updates (10% deletes) over the "
        "half-preloaded graph in "
        f"epochs of {BATCH:,}, evaluating directed triangles; *persisted* commits every epoch "
        "to RocksDB in one synced write batch.\n\n" + head + "\n" + "\n".join(rows) + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,10M")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--one", nargs=3, metavar=("KIND", "SIZE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, size, directory = args.one
        print(json.dumps(one(kind, int(size), directory)))
        return 0
    CACHE.mkdir(parents=True, exist_ok=True)
    sizes = [int(s.replace("M", "000000").replace("k", "000")) for s in args.sizes.split(",")]
    results = [measure(size) for size in sizes]
    text = render(results)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
