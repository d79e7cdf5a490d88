"""``serve`` end to end in both output formats, for :mod:`bench.kafka_output`: the whole stream
produced first, then the service's updates/s and deltas/s from its first assignment to its last
committed epoch, records beside batches (JSON Lines and Arrow) on the same input."""

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

#: The outputs compared: a name, ``SGM_OUTPUT_FORMAT`` and ``SGM_BATCH_ENCODING``.
OUTPUTS = (
    ("`SGM_OUTPUT_FORMAT=records`", "records", "jsonl"),
    ("`SGM_OUTPUT_FORMAT=batches`", "batches", "jsonl"),
    ("`batches`, `SGM_BATCH_ENCODING=arrow`", "batches", "arrow"),
)


def serve_run(
    bootstrap: str,
    tmp: Path,
    rows: list[tuple[int, int, int]],
    output_format: str,
    encoding: str = "jsonl",
) -> tuple[float, float, float, float]:
    """``serve`` over the whole stream (produced first): updates/s and deltas/s from its first
    assignment to its last committed epoch, then the same from its first committed epoch on
    (:func:`~bench.kafka_serve.throughput`'s ``steady``)."""
    topic = f"e2e-{output_format}-{uuid.uuid4().hex[:6]}"
    topics(bootstrap, (topic, 3), (f"{topic}-out", 1), (f"{topic}-dlq", 1))
    produce(bootstrap, topic, rows)
    proc, log, group = serve(
        bootstrap, tmp, topic, SGM_OUTPUT_FORMAT=output_format, SGM_BATCH_ENCODING=encoding
    )
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
    """``serve`` end to end in each of :data:`OUTPUTS`, their order turning from run to run,
    medians of ``runs``; beside them the engine alone (in process, no Kafka, no state store,
    its compiled kernels loaded) on the same epochs."""
    got: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(runs):
            for name, output_format, encoding in OUTPUTS[run % 3 :] + OUTPUTS[: run % 3]:
                got[name].append(serve_run(bootstrap, Path(tmp), rows, output_format, encoding))
                u, d, su, sd = got[name][-1]
                print(
                    f"serve {name}: {u:,.0f} updates/s, {d:,.0f} deltas/s "
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
    for name, _, _ in OUTPUTS:
        per_s = [statistics.median(column) for column in zip(*got[name], strict=True)]
        lines.append(f"| `serve`, {name} | " + " | ".join(f"{x:,.0f}" for x in per_s) + " |")
    return "\n".join(lines) + "\n"
