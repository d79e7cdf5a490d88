"""``serve`` end to end in both output formats, for :mod:`bench.kafka_output`: the whole stream
produced first, then the service's updates/s and deltas/s from its first assignment to its last
committed epoch, records beside batches on the same input."""

from __future__ import annotations

import statistics
import sys
import tempfile
import uuid
from collections import defaultdict
from pathlib import Path

from bench.kafka_serve import (
    drop_topics,
    log_lines,
    produce,
    serve,
    throughput,
    topics,
    wait,
)


def serve_run(
    bootstrap: str, tmp: Path, rows: list[tuple[int, int, int]], output_format: str
) -> tuple[float, float, float, float]:
    """``serve`` over the whole stream (produced first): updates/s and deltas/s from its first
    assignment to its last committed epoch, then the same from its first committed epoch on
    (:func:`~bench.kafka_serve.throughput`'s ``steady``)."""
    topic = f"e2e-{output_format}-{uuid.uuid4().hex[:6]}"
    topics(bootstrap, (topic, 3), (f"{topic}-out", 1), (f"{topic}-dlq", 1))
    produce(bootstrap, topic, rows)
    proc, log, group = serve(bootstrap, tmp, topic, SGM_OUTPUT_FORMAT=output_format)
    try:
        wait(bootstrap, group, topic, proc)
    finally:
        proc.terminate()
        proc.wait(60)
    lines = log_lines(log)
    updates, deltas, _ = throughput(lines)
    steady_updates, steady_deltas, _ = throughput(lines, steady=True)
    drop_topics(bootstrap, topic, f"{topic}-out", f"{topic}-dlq")
    return updates, deltas, steady_updates, steady_deltas


def serve_table(
    bootstrap: str, rows: list[tuple[int, int, int]], runs: int, engine: float, deltas: int
) -> str:
    """``serve`` end to end in both formats, alternating, medians of ``runs``; beside them the
    engine alone (in process, no Kafka, no state store) on the same epochs."""
    got: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(runs):
            for output_format in ("records", "batches")[:: 1 if run % 2 == 0 else -1]:
                got[output_format].append(serve_run(bootstrap, Path(tmp), rows, output_format))
                u, d, su, sd = got[output_format][-1]
                print(
                    f"serve {output_format}: {u:,.0f} updates/s, {d:,.0f} deltas/s "
                    f"(after the first epoch {su:,.0f}, {sd:,.0f})",
                    file=sys.stderr,
                )
    lines = [
        "From the first partition assignment to the last committed epoch, and (*steady*) from "
        "the first epoch's commit on: the first epoch also waits for the first fetch after the "
        "assignment and the first transaction's round trips, once per start.",
        "",
        "| end to end | updates/s | match deltas/s | steady updates/s | steady match deltas/s |",
        "|---|---|---|---|---|",
        f"| engine alone (in process, same epochs, {engine:.2f} s) | {len(rows) / engine:,.0f} "
        f"| {deltas / engine:,.0f} | | |",
    ]
    for output_format, measured in got.items():
        per_s = [statistics.median(column) for column in zip(*measured, strict=True)]
        lines.append(
            f"| `serve`, `SGM_OUTPUT_FORMAT={output_format}` | "
            + " | ".join(f"{x:,.0f}" for x in per_s)
            + " |"
        )
    return "\n".join(lines) + "\n"
