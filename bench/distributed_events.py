"""Events on the partitioned engine: ``python -m bench.distributed_events`` writes
``bench/distributed_events.md``.

The payments stream of :mod:`bench.payments` (power-law accounts, an amount, a channel, string
ids, planted rings), its event times stretched to about a second apart so that ``--events``
transfers span days, streamed in epochs of ``--batch`` through the event-time queries of
``examples/payments.q`` (``layering_ring``: three transfers of 1,000 or more in order within
24 hours; ``pass_through``: money in and out within 10 minutes), whose window is 24 hours: the
window fills in the first quarter of the stream, then events expire as fast as they come.

Each configuration runs the whole stream from an empty index: the single process
(:class:`~monitor.service.epochs.EpochProcessor`, the baseline and oracle) and the partitioned
engine (:class:`~monitor.distributed.delta.ShardedEpochs`) on 1, 2 and 4 shards in this process
(a shard's memory is the same in an actor), and on 2 Ray actors unless ``--no-ray``. Every
epoch's match changes must be the single process's (their number and a fingerprint of the
rows); a row that differs says ``MISMATCH`` and the run exits 1.

*Memory*: the bytes each shard holds (its adjacencies, time orders and part of the vertex
dictionary; its event stores with their string pool and windows), sampled at every tenth of
the stream, beside the single process's same parts: the largest shard's against
(the single process's) / S shows the capacity the shards add; the samples after the window
filled show whether memory stays flat. *Speed*: events per second over the whole stream
(informative: on this 2-core machine the shards and the driver share the cores).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.machine import machine_info
from bench.payments import batch, payments
from core.records import UpdateBatch
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.shard_calls import LocalShards, RayShards, Shards
from monitor.query.load import load_queries_many
from monitor.service.epochs import EpochProcessor
from monitor.service.query_output import QueryOutput
from monitor.service.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "distributed_events.md"
QUERIES = ROOT / "examples" / "payments.q"


@dataclass
class Run:
    """One configuration's figures."""

    name: str
    shards: int
    seconds: float = 0.0
    changes: int = 0
    mismatch: str | None = None
    #: At each sample: live events, and per shard (one for the single process) its bytes.
    samples: list[tuple[int, list[int]]] = field(default_factory=list)


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.distributed_events")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--accounts", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def stream(n: int, accounts: int, size: int) -> list[UpdateBatch]:
    """The payments, a second apart on average, in epochs (2% deletes of earlier ids)."""
    data = payments(n, accounts, seed=11)
    gaps = np.random.default_rng(12).integers(0, 2_000, n)
    data["ts"] = (data["ts"][0] + np.cumsum(gaps)).astype(np.float64)
    rng = np.random.default_rng(13)
    out = []
    for lo in range(0, n, size):
        hi = min(lo + size, n)
        out.append(batch(data, lo, hi, rng.choice(hi, (hi - lo) // 50, replace=False)))
    return out


def fingerprint(rows: list[tuple[str, Any, int]]) -> str:
    digest = hashlib.sha256()
    for row in sorted(repr(r) for r in rows):
        digest.update(row.encode())
    return digest.hexdigest()[:16]


def rows_of(outputs: list[QueryOutput]) -> list[tuple[str, Any, int]]:
    """Each match change: its query, vertices (external ids) and diff."""
    return [
        (o.query, tuple(np.asarray(c)[i] for c in o.columns), int(o.diff[i]))
        for o in outputs
        for i in range(len(o))
    ]


def run_single(
    batches: list[UpdateBatch], settings: Settings, every: set[int]
) -> tuple[Run, list[str]]:
    queries = load_queries_many([str(QUERIES)])
    processor = EpochProcessor(queries, settings)
    run = Run("single process", 1)
    prints = []
    for k, b in enumerate(batches, 1):
        started = time.perf_counter()
        out = processor.process(b)
        processor.commit()
        run.seconds += time.perf_counter() - started
        rows = rows_of(out.queries)
        run.changes += len(rows)
        prints.append(f"{len(rows)}:{fingerprint(rows)}")
        if k in every:
            events = processor.events
            held = events.nbytes + sum(q.nbytes for q in events.queues.values())
            held += processor.index.nbytes
            run.samples.append((sum(events.stored().values()), [held]))
    return run, prints


def run_sharded(
    name: str,
    shards: Shards,
    batches: list[UpdateBatch],
    settings: Settings,
    every: set[int],
    expected: list[str],
) -> Run:
    queries = load_queries_many([str(QUERIES)])
    epochs = ShardedEpochs(queries, shards, settings.max_prefixes, settings=settings, static=False)
    run = Run(name, shards.count)
    for k, b in enumerate(batches, 1):
        started = time.perf_counter()
        outputs = epochs.outputs(epochs.evaluate(b))
        epochs.commit()
        run.seconds += time.perf_counter() - started
        rows = rows_of(outputs)
        run.changes += len(rows)
        found = f"{len(rows)}:{fingerprint(rows)}"
        if found != expected[k - 1] and run.mismatch is None:
            run.mismatch = f"epoch {k}: {found} against {expected[k - 1]}"
        if k in every:
            stats = epochs.index.stats()
            held = [s["bytes"] + s.get("event_bytes", 0) for s in stats]
            run.samples.append((sum(s.get("events", 0) for s in stats), held))
    return run


def report(args: argparse.Namespace, runs: list[Run], minutes: float) -> list[str]:
    info = machine_info()
    single = runs[0]
    events = args.events
    lines = [
        "# Events on the partitioned engine",
        "",
        f"Generated by `{' '.join(['python -m bench.distributed_events', *args.argv])}` (do not "
        f"edit by hand): commit {info['git commit']}, {info['date']}; the run took "
        f"{minutes:.1f} minutes. Machine: {info['CPU']}, {info['logical cores']} logical cores, "
        f"{info['memory']}; load average at the end "
        f"{info['load average at the end (1/5/15 min)']}.",
        "",
        f"{events:,} transfers over {args.accounts:,} accounts, about a second apart, in epochs "
        f"of {args.batch:,} (2% deletes by id), through `examples/payments.q` (a 24-hour "
        "window). *Largest shard*: the bytes the largest shard holds at the end (adjacencies, "
        "time orders, its part of the vertex dictionary, its event stores with their strings "
        "and windows); *vs single / S*: against the single process's same parts over the "
        "number of shards (the capacity the shards add); *B per live event*: all shards' "
        "bytes over the live events. Every configuration's match changes, epoch for epoch, "
        "must be the single process's.",
        "",
        "| configuration | events/s | vs single | match changes | largest shard, end | "
        "vs single / S | max/mean | B per live event (all shards) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = single.samples[-1][1][0]
    for run in runs:
        live, held = run.samples[-1]
        rate = events / run.seconds if run.seconds else 0.0
        same = "MISMATCH: " + run.mismatch if run.mismatch else f"{run.changes:,}"
        if run is not single and not run.mismatch:
            same += " = single"
        mean = sum(held) / len(held)
        lines.append(
            f"| {run.name} | {rate:,.0f} | {rate / (events / single.seconds):.2f}x | {same} | "
            f"{max(held) / 2**20:,.1f} MiB | {max(held) / (base / run.shards):.2f} | "
            f"{max(held) / mean:.2f} | {sum(held) / max(live, 1):.0f} |"
        )
    lines += [
        "",
        "Memory over the stream (the largest shard's MiB at each tenth; the window is full "
        "from about the first quarter on):",
        "",
        "| configuration | " + " | ".join(f"{10 * (i + 1)}%" for i in range(10)) + " |",
        "|---|" + "---:|" * 10,
    ]
    for run in runs:
        cells = [f"{max(held) / 2**20:,.1f}" for _, held in run.samples[:10]]
        lines.append(f"| {run.name} | " + " | ".join(cells) + " |")
    lines += ["", "Live events at each tenth: " + ", ".join(f"{n:,}" for n, _ in single.samples)]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    begun = time.perf_counter()
    batches = stream(args.events, args.accounts, args.batch)
    every = {max(1, -(-len(batches) * i // 10)) for i in range(1, 11)}  # (each tenth's end)
    settings = Settings()
    say("single process")
    single, expected = run_single(batches, settings, every)
    runs = [single]
    for s in (int(x) for x in args.shards.split(",")):
        say(f"{s} shards in process")
        runs.append(
            run_sharded(
                f"{s} shards, in process", LocalShards(s), batches, settings, every, expected
            )
        )
    if not args.no_ray:
        import ray

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            say("2 Ray shards")
            runs.append(
                run_sharded("2 shards, Ray", RayShards(2), batches, settings, every, expected)
            )
        finally:
            ray.shutdown()
    lines = report(args, runs, (time.perf_counter() - begun) / 60)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if any(r.mismatch for r in runs) else 0


def say(line: str) -> None:
    print(f"bench.distributed_events: {line}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
