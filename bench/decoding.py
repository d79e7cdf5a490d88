"""Decoding alone (issue #32): ``python -m bench.decoding`` writes ``bench/decoding.md``.

The event-time benchmark's payments stream (:mod:`bench.timed_stream`, JSON Lines as
``subgraph-monitor run`` reads them: ``{"op":"insert","relation":"transfer","id":"tx-7",
"src":12,"dst":40,"amount":1234.56,"ts":1767225600000}``), decoded without the engine:

- **file source**: :class:`~connectors.files.EdgeFileSource` reading the file into batches of
  10,000 events (``transfer`` an event relation, as a query over it makes it), with the block
  decoder (pyarrow's JSON reader, :mod:`connectors.json_lines`) and, in the same run, with the
  per-line decoder the product had before (``fast_path=False``, the baseline);
- **Kafka records**: the same lines as record values, :func:`~connectors.json_batch.decode_records`
  a poll of 10,000 at a time (as ``serve`` decodes them after ``consume``), fast path on and off
  (off: ``orjson`` per record and the column rules of :mod:`connectors.json_batch`, the decoder
  of issue #14);
- **memory**: for one batch of 10,000, the peak of what decoding allocates (Python objects and
  numpy arrays by ``tracemalloc``, Arrow's buffers by its memory pool) against the bytes of the
  columns it hands on (ids, pairs, fields; string ids counted as their Python objects).

CPU time of this process, best of ``--repeat`` passes; the machine's load is printed with it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.timed_payments import write_stream
from bench.timed_stream import json_lines, timed_payments
from connectors import json_arrow
from connectors.events import FieldTypes
from connectors.files import EdgeFileSource
from connectors.json_batch import decode_records
from core.records import EventUpdates

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "decoding.md"
BATCH = 10_000


def positions(rows: Sequence[int]) -> list[str]:
    return [f"in:{row + 1}" for row in rows]


def best_cpu(run: Callable[[], int], repeat: int) -> tuple[float, int]:
    """The least CPU seconds of ``repeat`` calls, and what the call counted."""
    best, counted = float("inf"), 0
    for _ in range(repeat):
        start = time.process_time()
        counted = run()
        best = min(best, time.process_time() - start)
    return best, counted


def file_source(path: Path, fast: bool) -> Callable[[], int]:
    def run() -> int:
        types = FieldTypes.of({"transfer": {}})
        source = EdgeFileSource(str(path), events=types, fast_path=fast)
        return sum(batch.count for batch in source.batches(BATCH))

    return run


def kafka_polls(values: list[bytes], fast: bool) -> Callable[[], int]:
    def run() -> int:
        types = FieldTypes.of({"transfer": {}})
        arities: dict[str, int] = {}
        count = 0
        for lo in range(0, len(values), BATCH):
            decoded = decode_records(
                values[lo : lo + BATCH], "e", positions, types, arities, 1 << 20, fast_path=fast
            )
            count += int(decoded.kept.sum())
        return count

    return run


def column_bytes(events: EventUpdates) -> int:
    """The bytes of a batch's columns: arrays, and each string id's Python object."""
    total = 0
    for column in (
        events.ids,
        events.diff,
        events.seq,
        events.src,
        events.dst,
        *events.fields.values(),
    ):
        total += column.nbytes
        if column.dtype == object:
            total += sum(sys.getsizeof(v) for v in column.tolist())
    return total


def memory(values: list[bytes], fast: bool) -> dict[str, float]:
    """Peak bytes allocated while one batch is decoded, and its columns' bytes."""
    pool = pa.default_memory_pool()
    types = FieldTypes.of({"transfer": {}})
    decode_records(values, "e", positions, types, {}, 1 << 20, fast_path=fast)  # warm
    arrow_before = pool.bytes_allocated()
    held: list[int] = [0]
    parse = json_arrow._parse

    def measured(text: bytes, strings: set[str]) -> Any:
        table = parse(text, strings)
        held[0] = max(held[0], pool.bytes_allocated() - arrow_before)  # the table alive
        return table

    json_arrow._parse = measured
    tracemalloc.start()
    try:
        decoded = decode_records(values, "e", positions, types, {}, 1 << 20, fast_path=fast)
        _, python_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        json_arrow._parse = parse
    arrow_peak = held[0]
    columns = column_bytes(decoded.events["transfer"])
    text = sum(map(len, values))
    return {
        "text": text,
        "columns": columns,
        "python_peak": python_peak,
        "arrow_peak": arrow_peak,
        "arrow_after": pool.bytes_allocated() - arrow_before,
        "ratio": (python_peak + arrow_peak) / columns,
    }


def report(figures: dict[str, Any]) -> str:
    n = figures["events"]
    lines = [
        "# Decoding alone (issue #32)",
        "",
        f"`python -m bench.decoding` on {n:,} events of the payments stream "
        f"({figures['mib']:.0f} MiB of JSON Lines, {figures['mib'] * 2**20 / n:.0f} bytes a "
        f"record), batches of {BATCH:,}; CPU seconds of one process, best of "
        f"{figures['repeat']}; load average {figures['load']}. *Before* is the decoder the "
        "product had (per line in files; `orjson` per record and column rules for Kafka "
        "polls), measured in the same run.",
        "",
        "| path | records/s before | records/s now | speed-up |",
        "|---|---|---|---|",
    ]
    for name in ("file source", "Kafka records"):
        before, now = figures[name]
        lines.append(f"| {name} | {n / before:,.0f} | **{n / now:,.0f}** | {before / now:.1f}x |")
    memory_now, memory_before = figures["memory"], figures["memory_before"]
    lines += [
        "",
        f"Memory of one batch of {BATCH:,} (its text {memory_now['text'] / 2**20:.2f} MiB, "
        f"its columns {memory_now['columns'] / 2**20:.2f} MiB, string ids counted as their "
        "Python objects):",
        "",
        "| decoder | peak Python and numpy | Arrow's table | (peak + table) / columns |",
        "|---|---|---|---|",
        f"| now | {memory_now['python_peak'] / 2**20:.2f} MiB | "
        f"{memory_now['arrow_peak'] / 2**20:.2f} MiB | **{memory_now['ratio']:.1f}x** |",
        f"| before | {memory_before['python_peak'] / 2**20:.2f} MiB | - | "
        f"{memory_before['ratio']:.1f}x |",
        "",
        "Arrow's buffers are freed with the batch (bytes still held by its pool after it: "
        f"{memory_now['arrow_after']:,}); no list of dicts is made on the fast path.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=3_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "bench" / "decoding")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    stream = timed_payments(args.events, 9.0 * args.events / 3_000_000, 300_000, 1)
    path = args.workdir / f"transfers-{args.events}.jsonl"
    if not path.exists():
        write_stream(stream, path, json_lines)
    values = path.read_bytes().splitlines()
    figures: dict[str, Any] = {
        "events": len(values),
        "mib": path.stat().st_size / 2**20,
        "repeat": args.repeat,
        "load": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    for name, make, data in (
        ("file source", file_source, path),
        ("Kafka records", kafka_polls, values),
    ):
        before, counted_before = best_cpu(make(data, False), 1)
        now, counted = best_cpu(make(data, True), args.repeat)
        if counted != counted_before or counted != len(values):
            raise SystemExit(f"{name}: {counted} events now, {counted_before} before")
        figures[name] = (before, now)
        print(
            f"{name}: {len(values) / before:,.0f} -> {len(values) / now:,.0f} records/s", flush=True
        )
    figures["memory"] = memory(values[:BATCH], True)
    figures["memory_before"] = memory(values[:BATCH], False)
    text = report(figures)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
