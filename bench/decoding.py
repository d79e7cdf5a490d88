"""Decoding alone (issue #32): ``python -m bench.decoding`` writes ``bench/decoding.md``.

The event-time benchmark's payments stream (:mod:`bench.timed_stream`, JSON Lines as
``subgraph-monitor run`` reads them: ``{"op":"insert","relation":"transfer","id":"tx-7",
"src":12,"dst":40,"amount":1234.56,"ts":1767225600000}``), decoded without the engine:

- **file source**: :class:`~connectors.files.EdgeFileSource` reading the file into batches of
  10,000 events (``transfer`` an event relation, as a query over it makes it), with the block
  decoder (:mod:`connectors.json_lines`) reading the text with the compiled scanner
  (:mod:`connectors.json_scan`, the product's reader) and with pyarrow's JSON reader alone, and
  with the per-line decoder the product had before (``fast_path=False``, the baseline), all in
  the same run;
- **Kafka records**: the same lines as record values, :func:`~connectors.json_batch.decode_records`
  a poll of 10,000 at a time (as ``serve`` decodes them after ``consume``), the same three ways
  (before: ``orjson`` per record and the column rules of :mod:`connectors.json_batch`, the
  decoder of issue #14);
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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.timed_payments import write_stream
from bench.timed_stream import json_lines, timed_payments
from connectors import json_arrow, json_scan
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


#: The decoders compared: (fast path, compiled scanner).
DECODERS = {"before": (False, False), "pyarrow": (True, False), "scanner": (True, True)}


@contextmanager
def reading(decoder: str) -> Iterator[None]:
    """``decoder``'s reader switched on (the scanner, or pyarrow's alone)."""
    was = json_scan.COMPILED
    json_scan.COMPILED = DECODERS[decoder][1] and was
    try:
        yield
    finally:
        json_scan.COMPILED = was


def file_source(path: Path, decoder: str) -> Callable[[], int]:
    fast = DECODERS[decoder][0]

    def run() -> int:
        types = FieldTypes.of({"transfer": {}})
        source = EdgeFileSource(str(path), events=types, fast_path=fast)
        with reading(decoder):
            return sum(batch.count for batch in source.batches(BATCH))

    return run


def kafka_polls(values: list[bytes], decoder: str) -> Callable[[], int]:
    fast = DECODERS[decoder][0]

    def run() -> int:
        types = FieldTypes.of({"transfer": {}})
        arities: dict[str, int] = {}
        count = 0
        with reading(decoder):
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


def memory(values: list[bytes], decoder: str) -> dict[str, float]:
    """Peak bytes allocated while one batch is decoded, and its columns' bytes (the
    scanner's working arrays, which it keeps for the next batch, counted as allocated)."""
    fast = DECODERS[decoder][0]
    pool = pa.default_memory_pool()
    types = FieldTypes.of({"transfer": {}})
    with reading(decoder):
        decode_records(values, "e", positions, types, {}, 1 << 20, fast_path=fast)  # warm
    json_scan.forget()
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
        with reading(decoder):
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
        "polls); *pyarrow* is the batch decoder reading the text with pyarrow's JSON reader "
        "alone; *scanner* reads it with the compiled scanner (`connectors/json_scan.py`), "
        "the product's default. All measured in the same run.",
        "",
        "| path | records/s before | records/s, pyarrow | records/s, scanner | speed-up |",
        "|---|---|---|---|---|",
    ]
    for name in ("file source", "Kafka records"):
        before, arrow, now = (figures[name][decoder] for decoder in DECODERS)
        lines.append(
            f"| {name} | {n / before:,.0f} | {n / arrow:,.0f} | **{n / now:,.0f}** | "
            f"{before / now:.1f}x |"
        )
    memory = figures["memory"]
    now = memory["scanner"]
    lines += [
        "",
        f"Memory of one batch of {BATCH:,} (its text {now['text'] / 2**20:.2f} MiB, "
        f"its columns {now['columns'] / 2**20:.2f} MiB, string ids counted as their "
        "Python objects; the scanner's working arrays, kept for the next batch, counted):",
        "",
        "| decoder | peak Python and numpy | Arrow's pool | (peak + pool) / columns |",
        "|---|---|---|---|",
    ]
    for decoder in ("scanner", "pyarrow", "before"):
        used = memory[decoder]
        pool = f"{used['arrow_peak'] / 2**20:.2f} MiB" if decoder == "pyarrow" else "-"
        lines.append(
            f"| {decoder} | {used['python_peak'] / 2**20:.2f} MiB | {pool} | "
            f"**{used['ratio']:.1f}x** |"
        )
    lines += [
        "",
        "Arrow's buffers are freed with the batch (bytes still held by its pool after it: "
        f"{memory['pyarrow']['arrow_after']:,}); no list of dicts is made on the fast path.",
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
        figures[name] = {}
        for decoder in DECODERS:
            repeat = 1 if decoder == "before" else args.repeat
            seconds, counted = best_cpu(make(data, decoder), repeat)
            if counted != len(values):
                raise SystemExit(f"{name}, {decoder}: {counted} events of {len(values)}")
            figures[name][decoder] = seconds
            print(f"{name}, {decoder}: {len(values) / seconds:,.0f} records/s", flush=True)
    figures["memory"] = {decoder: memory(values[:BATCH], decoder) for decoder in DECODERS}
    text = report(figures)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
