"""What consolidation across workers costs: ``python -m bench.consolidation`` writes
``bench/consolidation.md``.

Scale-out publishes each changed binding once per epoch, by one worker (``monitor.engine.owned``);
the alternative publishes each worker's own sum, which a keyed consumer cannot trust. This
measures the difference where it is paid, in each worker's evaluation, without Kafka: the
ego-Facebook stream of ``bench.kafka`` (undirected, symmetry-broken triangles, and the 4-clique),
half preloaded, the rest in epochs of 10,000 updates; each epoch's changes are split between
``W`` simulated workers by the update's partition (6 partitions, round robin over workers), and
each worker evaluates its share both ways. Figures are the sum over workers of the evaluation
time per epoch (medians over epochs), so the ratio is what consolidation adds to the CPU a
deployment spends.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from bench.kafka_serve import stream
from core.records import RelationUpdates, UpdateBatch
from monitor.engine.owned import ChangedTuples
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.query_output import QueryOutput
from monitor.service.settings import Settings

OUT = Path(__file__).resolve().parent / "consolidation.md"
QUERIES = {
    "triangle": "tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c.",
    "4-clique": "k4(a, b, c, d) := e(a, b), e(a, c), e(a, d), e(b, c), e(b, d), e(c, d), "
    "a < b, b < c, c < d.",
}
BATCH = 10_000
PARTITIONS = 6


def _batch(rows: np.ndarray, lo: int) -> UpdateBatch:
    seq = np.arange(lo, lo + rows.shape[0], dtype=np.int64)
    part = RelationUpdates([rows[:, 0].copy(), rows[:, 1].copy()], rows[:, 2].astype(np.int8), seq)
    return UpdateBatch({"e": part}, lo, rows.shape[0])


def _timed(call: Callable[[], list[QueryOutput]]) -> tuple[float, int]:
    started = time.perf_counter()
    out = call()
    return time.perf_counter() - started, sum(len(q) for q in out)


def measure(query: str, workers: int, epochs: int) -> dict[str, float]:
    rows = np.asarray(stream(), dtype=np.int64)
    half = rows.shape[0] // 2
    processor = EpochProcessor(parse_queries(query), Settings(undirected=True, batch_size=BATCH))
    processor.preload(_batch(rows[:half], 0))
    processor.commit()
    plain: list[float] = []
    decided: list[float] = []
    records = [0, 0]
    for lo in range(half, min(rows.shape[0], half + epochs * BATCH), BATCH):
        part = rows[lo : lo + BATCH]
        staged = processor.stage(_batch(part, lo))
        worker_of = (np.arange(rows.shape[0]) % PARTITIONS) % workers  # partition -> worker
        t_plain = t_decided = 0.0
        for w in range(workers):
            mine = worker_of == w
            share = {n: c.take(mine[c.seq]) for n, c in staged.changes.items() if c.seq is not None}
            owned = ChangedTuples.of(processor.index, staged.changes, mine.__getitem__)
            t, n = _timed(partial(processor.evaluate, share))
            t_plain += t
            records[0] += n
            t, n = _timed(partial(processor.evaluate_decided, share, owned))
            t_decided += t
            records[1] += n
        plain.append(t_plain)
        decided.append(t_decided)
        processor.commit()
    p, d = statistics.median(plain), statistics.median(decided)
    return {
        "plain_ms": p * 1000,
        "decided_ms": d * 1000,
        "ratio": d / p,
        "plain_records": records[0],
        "decided_records": records[1],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    lines = [
        "# Consolidation across workers: what it costs",
        "",
        "Written by `python -m bench.consolidation`; method in its docstring. Per epoch of "
        f"{BATCH:,} updates, evaluation time summed over the workers (median over "
        f"{args.epochs} epochs); records = match-delta records the workers publish in all.",
        "",
        "| query | workers | per-worker sums (ms) | consolidated (ms) | consolidated / sums | "
        "records, sums | records, consolidated |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, query in QUERIES.items():
        for workers in (1, 2, 3):
            r = measure(query, workers, args.epochs)
            line = (
                f"| {name} | {workers} | {r['plain_ms']:.0f} | {r['decided_ms']:.0f} | "
                f"{r['ratio']:.2f} | {r['plain_records']:,.0f} | {r['decided_records']:,.0f} |"
            )
            print(line, flush=True)
            lines.append(line)
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
