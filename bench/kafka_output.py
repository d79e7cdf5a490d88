"""Kafka output (issue #14): ``python -m bench.kafka_output`` writes ``bench/kafka_output.md``.

The deltas are those of ``bench.kafka``'s stream (ego-Facebook's edges, inserts then 10%
deletes, symmetry-broken triangles, epochs of 10,000 updates), computed once in process. A local
broker (``scripts/kafka_local``) receives them three ways, one transaction per epoch as ``serve``
commits them, on a fresh one-partition topic each time, the three interleaved ``--runs`` times:

- *ceiling*: bare ``produce()`` calls in a loop over the very records the sink writes (keys and
  values encoded beforehand by the sink's own encoder, no headers): what Python can push;
- *records*: ``KafkaSink.write_deltas`` in the ``records`` format (encoding included);
- *batches*: the same in the ``batches`` format, JSON Lines (``jsonl``);
- *arrow*: the same in the ``batches`` format encoded as Arrow (``SGM_BATCH_ENCODING=arrow``).

Rates are deltas over the time from the first ``begin_transaction`` to the last commit; the
table has the medians and the median of the per-run ratios to the ceiling. ``--settings``
measures producer settings instead (compression, ``linger.ms``, ``batch.size``, queue limits);
``--profile`` prints a cProfile of the sink over the largest epoch; ``--serve`` adds an end-to-end
``subgraph-monitor serve`` run of the stream in each format.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from confluent_kafka import Producer

from bench.kafka_output_serve import serve_table
from bench.kafka_serve import BATCH, QUERY, drop_topics, stream, topics
from connectors.delta_json import EdgeColumns, chunks, keys_and_values
from connectors.kafka_sink import PRODUCER_DEFAULTS, KafkaSink
from connectors.sinks import CHUNK_ROWS
from core.columns import Member
from core.records import RelationUpdates, UpdateBatch
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from scripts.kafka_local import KafkaBroker

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "kafka_output.md"


@dataclass(frozen=True)
class Deltas:
    """One query's deltas of one epoch, as the service hands them to the sink."""

    query: str
    epoch: int
    variables: list[str]
    columns: list[npt.NDArray[np.generic]]
    diffs: npt.NDArray[np.integer]
    edges: EdgeColumns | None
    extra: dict[str, Member] | None


def epochs(rows: list[tuple[int, int, int]]) -> list[list[Deltas]]:
    """The engine's output of every epoch of the stream."""
    processor = EpochProcessor(parse_queries(QUERY), Settings(undirected=True, batch_size=BATCH))
    data = np.asarray(rows, dtype=np.int64)
    out = []
    for lo in range(0, data.shape[0], BATCH):
        part = data[lo : lo + BATCH]
        seq = np.arange(lo, lo + part.shape[0], dtype=np.int64)
        updates = RelationUpdates(
            [part[:, 0].copy(), part[:, 1].copy()], part[:, 2].astype(np.int8), seq
        )
        epoch = processor.process(UpdateBatch({"e": updates}, lo, part.shape[0]))
        processor.commit()
        out.append(
            [
                Deltas(
                    q.query,
                    epoch.epoch,
                    list(q.variables),
                    list(q.columns),
                    q.diff,
                    q.edges,
                    dict(q.extra),
                )
                for q in epoch.queries
            ]
        )
    return out


def records(output: list[list[Deltas]]) -> list[tuple[list[bytes], list[bytes]]]:
    """Per epoch the keys and values the sink produces in the ``records`` format."""
    out = []
    for deltas in output:
        keys: list[bytes] = []
        values: list[bytes] = []
        for d in deltas:
            for part in chunks(d.columns, d.diffs, d.edges, d.extra, CHUNK_ROWS):
                k, v = keys_and_values(d.query, d.epoch, d.variables, part)
                keys += k
                values += v
        out.append((keys, values))
    return out


def producer(bootstrap: str, config: dict[str, Any]) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{uuid.uuid4().hex}",
            "enable.idempotence": True,
            **PRODUCER_DEFAULTS,
            **config,
        }
    )
    p.init_transactions(30)
    return p


@dataclass(frozen=True)
class Timing:
    """One way of writing every epoch: wall-clock seconds, the CPU seconds of the Python thread
    that produced (librdkafka's own threads left out), and the seconds it waited for room in
    librdkafka's queue."""

    wall: float
    cpu: float
    waited: float = 0.0
    #: The bytes of the topic's log on the broker (0 where its data directory is unknown).
    log_bytes: int = 0


def ceiling(
    bootstrap: str, encoded: list[tuple[list[bytes], list[bytes]]], config: dict[str, Any]
) -> Timing:
    """Bare ``produce()`` of pre-encoded records, a transaction per epoch."""
    p = producer(bootstrap, config)
    topic = fresh_topic(bootstrap)
    started, cpu = time.perf_counter(), time.thread_time()
    for keys, values in encoded:
        p.begin_transaction()
        produce_ = p.produce
        for key, value in zip(keys, values, strict=True):
            try:
                produce_(topic, value, key)
            except BufferError:
                while True:
                    p.poll(1.0)
                    try:
                        produce_(topic, value, key)
                        break
                    except BufferError:
                        continue
        p.commit_transaction(60)
    timing = Timing(time.perf_counter() - started, time.thread_time() - cpu)
    p.flush(10)
    drop_topics(bootstrap, topic)
    return timing


def through_sink(
    bootstrap: str,
    output: list[list[Deltas]],
    output_format: str,
    config: dict[str, Any],
    data_dir: Path | None = None,
    encoding: str = "jsonl",
) -> Timing:
    """The sink's ``write_deltas`` of every epoch, a transaction per epoch (with the broker's
    data directory, the size of the topic's log)."""
    topic = fresh_topic(bootstrap)
    sink = KafkaSink(
        {"bootstrap.servers": bootstrap, **config},
        transactional_id=f"bench-{uuid.uuid4().hex}",
        output_topic=topic,
        dead_letter_topic="unused",
        version="bench",
        timeout=60,
        output_format=output_format,  # type: ignore[arg-type]
        batch_encoding=encoding,  # type: ignore[arg-type]
    )
    started, cpu = time.perf_counter(), time.thread_time()
    for deltas in output:
        sink.begin()
        for d in deltas:
            sink.write_deltas(d.query, d.epoch, d.variables, d.columns, d.diffs, d.edges, d.extra)
        sink.commit({}, None)
    wall, cpu = time.perf_counter() - started, time.thread_time() - cpu
    sink.flush()
    size = log_bytes(data_dir, topic) if data_dir is not None else 0
    drop_topics(bootstrap, topic)
    return Timing(wall, cpu, sink.take_waited(), size)


def fresh_topic(bootstrap: str) -> str:
    name = f"out-{uuid.uuid4().hex[:8]}"
    topics(bootstrap, (name, 1))
    return name


def medians(
    bootstrap: str, output: list[list[Deltas]], runs: int, config: dict[str, Any]
) -> dict[str, float]:
    """The three ways interleaved ``runs`` times (the ceiling and the sink's ``records`` in
    alternating order, so that a drift of the machine's load favours neither): medians of the
    rates (deltas per wall-clock second and per CPU second of the producing thread) and of the
    per-run ratios of ``records`` to the ceiling."""
    encoded = records(output)
    n = sum(len(k) for k, _ in encoded)
    got: dict[str, list[float]] = defaultdict(list)
    for run in range(runs):
        if run % 2:
            sink = through_sink(bootstrap, output, "records", config)
            bare = ceiling(bootstrap, encoded, config)
        else:
            bare = ceiling(bootstrap, encoded, config)
            sink = through_sink(bootstrap, output, "records", config)
        batched = through_sink(bootstrap, output, "batches", config)
        arrow = through_sink(bootstrap, output, "batches", config, encoding="arrow")
        for name, t in (
            ("ceiling", bare),
            ("records", sink),
            ("batches", batched),
            ("arrow", arrow),
        ):
            got[name].append(n / t.wall)
            got[f"{name} cpu"].append(n / t.cpu)
        got["ratio"].append(bare.wall / sink.wall)
        got["ratio cpu"].append(bare.cpu / sink.cpu)
        got["waited"].append(sink.waited)
        print(
            f"run {run + 1}: ceiling {n / bare.wall:,.0f}/s, records {n / sink.wall:,.0f}/s "
            f"({bare.wall / sink.wall:.0%}; per CPU second {bare.cpu / sink.cpu:.0%}; waited "
            f"{sink.waited:.2f} s), batches {n / batched.wall:,.0f} deltas/s, as Arrow "
            f"{n / arrow.wall:,.0f}",
            file=sys.stderr,
        )
    return {k: statistics.median(v) for k, v in got.items()}


LIBRDKAFKA: dict[str, Any] = {
    "compression.type": "none",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 1_048_576,
}
"""librdkafka's own defaults of the settings measured (the sink's are ``PRODUCER_DEFAULTS``)."""

SETTINGS: list[tuple[str, dict[str, Any]]] = [
    (
        "librdkafka's defaults (no compression, linger.ms 5, batch.size 1 MB, queue 100k)",
        LIBRDKAFKA,
    ),
    ("lz4", {**LIBRDKAFKA, "compression.type": "lz4"}),
    ("zstd", {**LIBRDKAFKA, "compression.type": "zstd"}),
    ("linger.ms 20", {**LIBRDKAFKA, "linger.ms": 20}),
    ("linger.ms 50", {**LIBRDKAFKA, "linger.ms": 50}),
    ("batch.size 64 KiB", {**LIBRDKAFKA, "batch.size": 65_536}),
    ("batch.size 256 KiB", {**LIBRDKAFKA, "batch.size": 262_144}),
    ("queue.buffering.max.messages 1M", {**LIBRDKAFKA, "queue.buffering.max.messages": 1_000_000}),
    ("the sink's: lz4, queue 1M messages / 256 MiB", {}),
]


def settings_table(
    bootstrap: str, output: list[list[Deltas]], runs: int, data_dir: Path | None
) -> str:
    """Both formats under each of :data:`SETTINGS`, the settings interleaved in every run;
    with the broker's data directory, the bytes its log holds per delta (compression)."""
    n = sum(len(d.diffs) for deltas in output for d in deltas)
    got: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, _ in SETTINGS}
    size: dict[str, tuple[float, float]] = {}
    for run in range(runs):
        for name, config in SETTINGS:
            rec, bat = got[name]
            timings = [
                through_sink(bootstrap, output, f, config, data_dir) for f in ("records", "batches")
            ]
            rec.append(n / timings[0].wall)
            bat.append(n / timings[1].wall)
            if data_dir is not None:
                size[name] = (timings[0].log_bytes / n, timings[1].log_bytes / n)
            print(f"run {run + 1}, {name}: {rec[-1]:,.0f}/s, {bat[-1]:,.0f}/s", file=sys.stderr)
    rows = [(name, statistics.median(r), statistics.median(b)) for name, (r, b) in got.items()]
    base_r, base_b = rows[0][1], rows[0][2]
    lines = [
        "| producer settings | records, deltas/s | batches, deltas/s "
        "| bytes per delta on the broker, records / batches |",
        "|---|---|---|---|",
    ]
    for name, r, b in rows:
        on_disk = "{:.0f} / {:.0f}".format(*size[name]) if name in size else "-"
        lines.append(
            f"| {name} | {r:,.0f} ({r / base_r:.2f}x) | {b:,.0f} ({b / base_b:.2f}x) | {on_disk} |"
        )
    return "\n".join(lines) + "\n"


def log_bytes(data_dir: Path, topic: str) -> int:
    """The bytes of a topic's log segments in a broker's data directory."""
    return sum(f.stat().st_size for f in data_dir.glob(f"{topic}-*/*.log"))


def profile(bootstrap: str, output: list[list[Deltas]], top: int = 14) -> str:
    """cProfile of the sink writing the largest epoch in the ``records`` format."""
    largest = max(output, key=lambda deltas: sum(len(d.diffs) for d in deltas))
    profiler = cProfile.Profile()
    profiler.enable()
    through_sink(bootstrap, [largest], "records", {})
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


@dataclass
class Report:
    lines: list[str]

    def add(self, text: str) -> None:
        self.lines.append(text)
        print(text)


def results_table(m: dict[str, float]) -> str:
    rows = [
        (
            "ceiling: bare `produce()` of the sink's records, encoded beforehand",
            "ceiling",
            1.0,
            1.0,
        ),
        (
            "`records`: `write_deltas`, one record per delta, encoding included",
            "records",
            m["ratio"],
            m["ratio cpu"],
        ),
        (
            "`batches`: `write_deltas`, one record per query and epoch (up to 1 MB)",
            "batches",
            m["batches"] / m["ceiling"],
            m["batches cpu"] / m["ceiling cpu"],
        ),
        (
            "`batches` as Arrow (`SGM_BATCH_ENCODING=arrow`): the same records, columnar",
            "arrow",
            m["arrow"] / m["ceiling"],
            m["arrow cpu"] / m["ceiling cpu"],
        ),
    ]
    lines = [
        "| output | deltas/s | of the ceiling | deltas per CPU second of the producing thread "
        "| of the ceiling |",
        "|---|---|---|---|---|",
    ]
    for name, key, ratio, ratio_cpu in rows:
        lines.append(
            f"| {name} | {m[key]:,.0f} | {ratio:.0%} | {m[key + ' cpu']:,.0f} | {ratio_cpu:.0%} |"
        )
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def broker(bootstrap: str | None, data_dir: Path | None) -> Iterator[tuple[str, Path | None]]:
    """The given broker (and its data directory, if known), or a local one for the run."""
    if bootstrap is not None:
        yield bootstrap, data_dir
        return
    with tempfile.TemporaryDirectory() as tmp:
        b = KafkaBroker(Path(tmp) / "broker")
        b.start()
        try:
            yield b.bootstrap, b.data_dir
        finally:
            b.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bootstrap", help="an existing broker (default: start a local one)")
    parser.add_argument("--data-dir", type=Path, help="that broker's data directory (log sizes)")
    parser.add_argument("--settings", action="store_true", help="measure producer settings")
    parser.add_argument("--profile", action="store_true", help="cProfile of the sink")
    parser.add_argument("--serve", action="store_true", help="end-to-end serve in both formats")
    args = parser.parse_args()
    rows = stream()
    epochs(rows)  # once to load the compiled kernels, as a service does when it starts
    started = time.perf_counter()
    output = epochs(rows)
    engine = time.perf_counter() - started
    n = sum(len(d.diffs) for deltas in output for d in deltas)
    print(f"{n:,} deltas in {len(output)} epochs", file=sys.stderr)
    report = Report([])
    with broker(args.bootstrap, args.data_dir) as (bootstrap, data_dir):
        report.add(
            f"Generated by `python -m bench.kafka_output`: a local single-node broker, the "
            f"{n:,} match deltas of `bench.kafka`'s stream (ego-Facebook, symmetry-broken "
            f"triangles, {len(output)} epochs of {BATCH:,} updates), one transaction per epoch, "
            f"medians of {args.runs} interleaved runs.\n"
        )
        m = medians(bootstrap, output, args.runs, {})
        report.add(results_table(m))
        if args.settings:
            report.add(settings_table(bootstrap, output, args.runs, data_dir))
        if args.serve:
            report.add(serve_table(bootstrap, rows, args.runs, engine, n))
        if args.profile:
            print(profile(bootstrap, output))
    args.out.write_text("\n".join(report.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
