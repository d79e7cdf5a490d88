"""The worker of one workload: ``python -m bench.worker < spec.json``.

Started by :mod:`bench.run` as a fresh process per workload (a graph, plain or labelled). It
builds the workload, preloads it once, then runs every configuration (query x engine x batch
size, the recompute baseline per query, the memory figures) in a forked child of its own
(:mod:`bench.isolate`). Results go to stdout as JSON lines; progress goes to stderr.

Batch sizes run in increasing order per query and engine. Before a larger batch size, the
figures of the smaller one predict how long one epoch will take and how many match deltas it
will hold; a configuration predicted to exceed the time limit (with a safety factor) or the
delta budget (the memory of one epoch's consolidated output) is skipped and reported with its
prediction.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.baselines import use_binary_join
from bench.isolate import ChildResult, Emit, run_forked
from bench.measure import index_memory, measure_memory, measure_recompute, measure_stream
from bench.queries import bench_query
from bench.rmat import degree_summary
from bench.workloads import GraphSpec, Workload, load_graph
from monitor.engine.delta import DeltaEvaluator
from monitor.query.ast import Query
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

Record = dict[str, Any]

#: The engines a stream configuration can run: ours, and the binary-join baseline.
ENGINES = ("ours", "binary")

#: Large epochs cost up to this much more per update than small ones (bigger intermediate
#: results, consolidation sorts), so a prediction from a smaller batch size is scaled by it.
SAFETY = 4.0


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs; built by :mod:`bench.run`, sent as JSON on stdin."""

    workload: str
    graph: GraphSpec
    labelled: bool
    queries: list[str]
    batch_sizes: list[int]
    engines: list[str]
    caps: dict[str, int]
    cache: str
    preload: float = 0.5
    deletes: float = 0.1
    flagged: float = 0.01
    seed: int = 0
    budget: float = 2.0
    limit: float = 30.0
    long_limit: float = 120.0
    long_limit_for: list[tuple[str, int]] = field(default_factory=list)
    recompute: bool = True
    recompute_budget: float = 5.0
    recompute_limit: float = 15.0
    memory: bool = True
    max_deltas: int = 60_000_000
    memory_limit: int | None = None
    max_prefixes: int = 1 << 20
    cpu: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        raw = json.loads(text)
        raw["graph"] = GraphSpec(**raw["graph"])
        raw["long_limit_for"] = [(q, int(b)) for q, b in raw.get("long_limit_for", [])]
        return cls(**raw)


def log(message: str) -> None:
    """A progress line on stderr."""
    print(message, file=sys.stderr, flush=True)


def send(record: Record) -> None:
    """A result line on stdout."""
    print(json.dumps(record), flush=True)


def main() -> int:
    spec = WorkerSpec.from_json(sys.stdin.read())
    if spec.cpu is not None:
        os.sched_setaffinity(0, {spec.cpu})
    began = time.perf_counter()
    edges = load_graph(spec.graph, Path(spec.cache), order_seed=spec.seed)
    workload = Workload(
        edges,
        labelled=spec.labelled,
        preload=spec.preload,
        deletes=spec.deletes,
        flagged=spec.flagged,
        max_updates=max(spec.caps.values()),
        seed=spec.seed,
    )
    prepared = time.perf_counter() - began
    summary = degree_summary(edges)
    send(
        {
            "type": "workload",
            "workload": spec.workload,
            "graph": spec.graph.name,
            "kind": spec.graph.kind,
            "labelled": spec.labelled,
            "vertices": int(summary["vertices"]),
            "edges": int(summary["edges"]),
            "max_degree": int(summary["max_degree"]),
            "preloaded_edges": workload.preloaded_edges,
            "preloaded_flags": int(workload.flags_preloaded.shape[0]),
            "stream_total": workload.total_stream,
            "stream_kept": len(workload.stream),
            "stream_deletes": workload.stream.deletes,
            "prepare_seconds": prepared,
        }
    )
    queries = {name: bench_query(name) for name in spec.queries}
    settings = Settings(undirected=True, max_prefixes=spec.max_prefixes)
    processor = EpochProcessor(list(queries.values()), settings)
    began = time.perf_counter()
    for batch in workload.preload_batches():
        processor.preload(batch)
    preload_seconds = time.perf_counter() - began
    send(
        {
            "type": "preload",
            "workload": spec.workload,
            "seconds": preload_seconds,
            **index_memory(processor.index),
        }
    )
    log(
        f"[{spec.workload}] {summary['edges']:,.0f} edges, {workload.preloaded_edges:,} "
        f"preloaded in {preload_seconds:.1f} s, {len(workload.stream):,} updates ready"
    )
    for name, query in queries.items():
        for engine in spec.engines:
            run_engine(spec, processor, workload, name, query, engine)
        if spec.recompute:
            run_recompute(spec, processor, workload, name, query)
    if spec.memory:
        run_memory(spec, processor, workload)
    return 0


def run_engine(
    spec: WorkerSpec,
    processor: EpochProcessor,
    workload: Workload,
    name: str,
    query: Query,
    engine: str,
) -> None:
    """Every batch size of one query and one engine, smallest first."""
    previous: Record | None = None
    for size in sorted(spec.batch_sizes):
        base = {
            "type": "run",
            "workload": spec.workload,
            "query": name,
            "engine": engine,
            "batch": size,
        }
        limit = spec.long_limit if (name, size) in spec.long_limit_for else spec.limit
        reason = skip_reason(previous, size, limit, spec.max_deltas)
        if reason:
            log(f"[{spec.workload}] {name} {engine} batch {size:,}: skipped ({reason})")
            send({**base, "status": "skipped", "error": reason})
            continue
        cap = spec.caps[str(size)]

        def measure(emit: Emit, size: int = size, cap: int = cap) -> None:
            if engine == "binary":
                use_binary_join(processor, [query])
            else:
                processor.evaluator = DeltaEvaluator([query], spec.max_prefixes)
            processor.queries = [query]
            measure_stream(
                processor, workload, size, budget=spec.budget, max_updates=cap, emit=emit
            )

        result = run_forked(measure, limit=limit, memory_limit=spec.memory_limit)
        record = {**base, "limit": limit, **outcome(result)}
        send(record)
        log(describe_run(spec.workload, record))
        previous = record


def skip_reason(previous: Record | None, size: int, limit: float, max_deltas: int) -> str:
    """Why a batch size is not worth running, from the figures of the next smaller one."""
    if previous is None:
        return ""
    if previous["status"] == "skipped":
        return "a smaller batch was skipped"
    if previous["status"] != "ok" and not previous.get("updates"):
        return f"a smaller batch ended {previous['status']} before one epoch"
    updates = previous.get("updates") or 0
    if not updates:
        return ""
    per_update = previous["seconds"] / updates
    epoch_seconds = per_update * size
    epoch_deltas = previous["deltas"] / updates * size
    if epoch_seconds * SAFETY > limit:
        return (
            f"one epoch predicted to take {epoch_seconds:,.0f} s, and {SAFETY:g} times that "
            f"passes the {limit:.0f} s limit (from batch {previous['batch']:,})"
        )
    if epoch_deltas > max_deltas:
        return (
            f"one epoch predicted to hold {epoch_deltas:,.0f} match deltas > "
            f"{max_deltas:,} (from batch {previous['batch']:,})"
        )
    return ""


def outcome(result: ChildResult) -> Record:
    """A child's result as a flat record: status, the last figures it reported, peak RSS."""
    last = dict(result.last or {})
    last.pop("final", None)
    return {
        "status": result.status,
        "error": result.error,
        "wall_seconds": result.wall_seconds,
        "max_rss_bytes": result.max_rss_bytes,
        **last,
    }


def describe_run(workload: str, r: Record) -> str:
    """One progress line for a stream configuration."""
    head = f"[{workload}] {r['query']} {r['engine']} batch {r['batch']:,}:"
    if not r.get("updates"):
        return f"{head} {r['status']} ({r['error']})"
    seconds = r["seconds"] or 1e-12
    text = (
        f"{head} {r['updates']:,} updates in {r['epochs']:,} epochs, "
        f"{r['updates'] / seconds:,.0f} updates/s, {r['deltas'] / seconds:,.0f} deltas/s, "
        f"p50 {r['p50_ms']:.2f} ms"
    )
    return text if r["status"] == "ok" else f"{text} [{r['status']}]"


def run_recompute(
    spec: WorkerSpec, processor: EpochProcessor, workload: Workload, name: str, query: Query
) -> None:
    """The recompute baseline of one query."""

    def measure(emit: Emit) -> None:
        measure_recompute(
            processor,
            workload,
            query,
            sorted(spec.batch_sizes),
            budget=spec.recompute_budget,
            emit=emit,
        )

    result = run_forked(measure, limit=spec.recompute_limit, memory_limit=spec.memory_limit)
    record = {"type": "recompute", "workload": spec.workload, "query": name, **outcome(result)}
    send(record)
    if "count0_seconds" in record:
        counted = len(record.get("epochs", []))
        log(
            f"[{spec.workload}] {name} recompute: {record['count0']:,} matches counted in "
            f"{record['count0_seconds']:.2f} s, {counted} epochs recounted [{result.status}]"
        )
    else:
        log(f"[{spec.workload}] {name} recompute: {result.status} ({result.error})")


def run_memory(spec: WorkerSpec, processor: EpochProcessor, workload: Workload) -> None:
    """The whole graph loaded and compacted: index bytes per stored edge."""

    def measure(emit: Emit) -> None:
        measure_memory(processor, workload, emit)

    result = run_forked(measure, limit=spec.long_limit, memory_limit=spec.memory_limit)
    record = {"type": "memory", "workload": spec.workload, **outcome(result)}
    send(record)
    if record.get("stored_edges"):
        per_edge = record["compacted_bytes"] / record["stored_edges"]
        log(f"[{spec.workload}] memory: compacted level {per_edge:.2f} B per stored edge")
    else:
        log(f"[{spec.workload}] memory: {result.status} ({result.error})")


if __name__ == "__main__":
    raise SystemExit(main())
