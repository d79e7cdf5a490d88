"""The Kafka path side by side (issue #14): ``python -m bench.kafka`` writes ``bench/kafka.md``.

One run against one local broker (``scripts/kafka_local``). Each workload's records are produced
once to an input topic; on them, in each of ``--repeat`` rounds:

- the *file job*: ``subgraph-monitor run`` on the same records as a JSON Lines file (its own
  summary line, :func:`bench.kafka_input.file_job`);
- ``serve`` with ``SGM_OUTPUT_FORMAT=records``, ``=batches`` and ``=batches`` encoded as Arrow
  (``SGM_BATCH_ENCODING=arrow``; their order turning from round to round), each in a new group
  so that it reads the topic from its start: updates/s and match deltas/s over the time from its
  first partition assignment to its last committed epoch;
- the client's ceilings (:mod:`bench.kafka_ceilings`): a bare consumer reading the input topic,
  and bare ``produce()`` of the records that ``serve`` wrote in the ``records`` format;
- for the triangle workload, scale-out: 1-3 workers in one group (:func:`bench.cluster.measure`)
  in each format, on a new topic of the same records produced once every worker holds
  partitions of it (their rates leave the first epoch out).

The tables have the medians over the rounds, and the medians of each round's ratios: ``serve``'s
updates/s to the consumer ceiling and to the file job, its match deltas/s to the producer
ceiling. Then a latency run per workload and format, and per worker count of the scale-out
(:func:`latency`, :func:`scale_out`): records produced at a steady rate while the service runs
with epochs closing after 200 ms; p50 and p99 of record timestamp to committed output from the
service's ``end_to_end_latency_seconds`` histogram (the workers' summed).

Then, unless ``--no-avro``, the payments again as Avro through a local schema registry, beside
JSON on the same records (:mod:`bench.kafka_registry`: Avro in as columns and record by record,
Avro out; ``bench/kafka_registry.md``).

The same workloads through the service on the partitioned engine (``SGM_ENGINE=distributed``,
1-4 workers, beside its file job and the replicated workers, with recovery times) are
:mod:`bench.kafka_distributed`'s (``bench/kafka_distributed.md``).

Workloads: *triangle*, ego-Facebook's edges (:func:`bench.kafka_serve.stream`) with symmetry-broken
triangles on the scale-out's 6-partition topic; *events*, the payments stream of
:mod:`bench.kafka_input` (``big_ring``, a selective fraud query: few match deltas per update) on
3 partitions. ``--quick`` is a smoke run on small inputs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import cluster
from bench.kafka_ceilings import Ceiling, consumer_ceiling, producer_ceiling
from bench.kafka_input import Workload, file_job, ring_records
from bench.kafka_report import FORMATS, Figures, format_env, report
from bench.kafka_serve import (
    QUERY,
    drop_topics,
    edge_records,
    log_lines,
    metrics,
    produce_records,
    quantiles,
    serve,
    stream,
    throughput,
    topics,
    wait,
)
from bench.machine import machine_info
from bench.payments import QUERIES
from scripts.kafka_local import KafkaBroker

OUT = Path(__file__).resolve().parent / "kafka.md"


@dataclass(frozen=True)
class Input:
    """One workload's records and the topic they are read from."""

    name: str
    #: What the records are, for the report.
    what: str
    workload: Workload
    records: list[tuple[bytes, bytes]]
    partitions: int


def facebook_records(n: int, seed: int) -> list[tuple[bytes, bytes]]:
    """The first ``n`` records of ego-Facebook's stream (all of them if ``n`` is 0; the stream
    has its own seed)."""
    rows = stream()
    return edge_records(rows[:n] if n else rows)


def inputs(triangle_rows: int, events: int) -> list[Input]:
    """The two workloads: the first ``triangle_rows`` of ego-Facebook's stream (all if 0), and
    ``events`` payments with their deletes."""
    triangle = Workload(QUERY, True, facebook_records)
    ring = Workload(QUERIES["big_ring"], False, ring_records)
    edges = triangle.records(triangle_rows, 1)
    transfers = ring.records(events, 1)
    return [
        Input(
            "triangle",
            f"ego-Facebook's edges as {len(edges):,} JSON records (inserts, then 10% deletes"
            f"{'; the first records only' if triangle_rows else ''}), symmetry-broken "
            "triangles, undirected",
            triangle,
            edges,
            cluster.PARTITIONS,
        ),
        Input(
            "events",
            f"{events:,} payments as {len(transfers):,} event records with 5% deletes by id "
            "(`bench.kafka_input`'s `big_ring` stream), the selective `big_ring` fraud query",
            ring,
            transfers,
            3,
        ),
    ]


class Progress:
    """Lines on stderr, each with the seconds since the run started."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.0f} s] {text}", file=sys.stderr, flush=True)


PROGRESS = Progress()


def start(
    bootstrap: str, tmp: Path, topic: str, source: Input, output_format: str, **settings: Any
) -> tuple[subprocess.Popen[bytes], Path, str]:
    """:func:`bench.kafka_serve.serve` of ``source``'s query in ``output_format`` (one of
    :data:`~bench.kafka_report.FORMATS`)."""
    return serve(
        bootstrap,
        tmp,
        topic,
        query=source.workload.query,
        undirected=source.workload.undirected,
        **format_env(output_format),
        **settings,
    )


def serve_once(
    bootstrap: str, tmp: Path, source: Input, topic: str, output_format: str
) -> tuple[float, float, list[int], str]:
    """``serve`` over the whole input topic: updates/s, match deltas/s, the deltas of each
    epoch and the output topic (to be dropped by the caller)."""
    out = f"{topic}-{output_format}-{time.monotonic_ns() % 10**9}"
    topics(bootstrap, (out, 1), (f"{out}-dlq", 1))
    proc, log, group = start(
        bootstrap,
        tmp,
        topic,
        source,
        output_format,
        SGM_OUTPUT_TOPIC=out,
        SGM_DEAD_LETTER_TOPIC=f"{out}-dlq",
    )
    try:
        wait(bootstrap, group, topic, proc)
    finally:
        stop(proc)
    lines = log_lines(log)
    shutil.rmtree(tmp / group, ignore_errors=True)
    updates, deltas, _ = throughput(lines)
    per_epoch = [int(x["deltas"]) for x in lines if x.get("message") == "epoch committed"]
    return updates, deltas, per_epoch, out


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(60)


def round_of(
    bootstrap: str, tmp: Path, source: Input, topic: str, path: Path, k: int, workers: list[int]
) -> dict[str, float]:
    """One round on ``source``: the file job, the consumer ceiling, ``serve`` in each format
    (order turning with ``k``), the producer ceiling and, with ``workers``, scale-out in each
    format."""
    say = PROGRESS
    got: dict[str, float] = {}
    got["file"], got["file deltas"] = file_job(path, source.workload)
    say(f"{source.name} {k + 1}: file job {got['file']:,.0f} updates/s")
    consumer = consumer_ceiling(bootstrap, topic, len(source.records))
    got["consumer"], got["consumer bytes"] = consumer.rate, consumer.record_bytes
    say(f"{source.name} {k + 1}: bare consumer {consumer.rate:,.0f} records/s")
    for output_format in FORMATS[k % 3 :] + FORMATS[: k % 3]:
        updates, deltas, per_epoch, out = serve_once(bootstrap, tmp, source, topic, output_format)
        got[output_format], got[f"{output_format} deltas"] = updates, deltas
        say(
            f"{source.name} {k + 1}: serve {output_format} {updates:,.0f} updates/s, "
            f"{deltas:,.0f} deltas/s"
        )
        if output_format == "records":
            producer: Ceiling = producer_ceiling(bootstrap, out, per_epoch)
            got["producer"], got["producer bytes"] = producer.rate, producer.record_bytes
            say(f"{source.name} {k + 1}: bare producer {producer.rate:,.0f} records/s")
        drop_topics(bootstrap, out, f"{out}-dlq")
    for n in workers:
        for output_format in FORMATS[k % 3 :] + FORMATS[: k % 3]:
            r = scale_out(bootstrap, tmp, source, n, output_format)
            got[f"{n} {output_format}"] = r["rate"]
            got[f"{n} {output_format} deltas"] = r["deltas_rate"]
            say(
                f"{source.name} {k + 1}: {n} worker(s), {output_format}: {r['rate']:,.0f} "
                f"updates/s, {r['deltas_rate']:,.0f} deltas/s"
            )
    return got


def scale_out(
    bootstrap: str,
    tmp: Path,
    source: Input,
    workers: int,
    output_format: str,
    rate: float = 0,
    seconds: float = 0,
) -> dict[str, float]:
    """:func:`bench.cluster.measure` of ``workers`` on a new topic fed ``source``'s records (as
    fast as the client goes, or ``rate`` a second for ``seconds`` with epochs closing after
    200 ms), dropped once measured."""
    topic = f"{source.name}-w{workers}-{output_format}-{time.monotonic_ns() % 10**9}"
    topics(bootstrap, (topic, source.partitions), (f"{topic}-out", 1), (f"{topic}-dlq", 1))
    env = format_env(output_format)
    records = source.records
    if rate:
        env["SGM_MAX_BATCH_DELAY_MS"] = "200"
        records = records[: int(rate * seconds)]
    measured = cluster.measure(bootstrap, tmp, topic, workers, records, env=env, rate=rate)
    drop_topics(bootstrap, topic, f"{topic}-out", f"{topic}-dlq")
    return measured


def latency(
    bootstrap: str, tmp: Path, source: Input, output_format: str, rate: float, seconds: float
) -> tuple[float, float]:
    """p50 and p99 of produce -> committed output: ``serve`` (epochs closing after 200 ms) on a
    new topic, once assigned its partitions, fed ``rate`` records/s for ``seconds``."""
    topic = f"{source.name}-steady-{output_format}"
    topics(bootstrap, (topic, source.partitions), (f"{topic}-out", 1), (f"{topic}-dlq", 1))
    proc, log, group = start(bootstrap, tmp, topic, source, output_format, delay_ms=200)
    try:
        deadline = time.monotonic() + 120
        while not any(x.get("message") == "partition assigned" for x in log_lines(log)):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"serve was not assigned {topic}")
            time.sleep(0.2)
        produce_records(bootstrap, topic, source.records[: int(rate * seconds)], rate)
        wait(bootstrap, group, topic, proc)
        text = metrics(log)
    finally:
        stop(proc)
    drop_topics(bootstrap, topic, f"{topic}-out", f"{topic}-dlq")
    return quantiles(text)


def measure_all(args: argparse.Namespace, sources: list[Input], tmp: Path) -> list[Figures]:
    """Every round of every workload, then the latency runs, against one broker."""
    broker = KafkaBroker(tmp / "broker")
    broker.start()
    PROGRESS(f"broker up at {broker.bootstrap}")
    figures = []
    try:
        for source in sources:
            topic = f"{source.name}-in"
            topics(broker.bootstrap, (topic, source.partitions))
            produce_records(broker.bootstrap, topic, source.records)
            path = tmp / f"{source.name}.jsonl"
            path.write_bytes(b"".join(value + b"\n" for _, value in source.records))
            PROGRESS(f"{source.name}: {len(source.records):,} records produced and written")
            workers = args.workers if source.name == "triangle" else []
            rounds = [
                round_of(broker.bootstrap, tmp, source, topic, path, k, workers)
                for k in range(args.repeat)
            ]
            steady = {}
            for output_format in FORMATS:
                steady[output_format] = latency(
                    broker.bootstrap, tmp, source, output_format, args.rate, args.seconds
                )
                for n in workers:
                    r = scale_out(
                        broker.bootstrap, tmp, source, n, output_format, args.rate, args.seconds
                    )
                    steady[f"{n} {output_format}"] = (r["p50_s"], r["p99_s"])
            for key, (p50, p99) in steady.items():
                PROGRESS(
                    f"{source.name}: latency, {key}: p50 {p50 * 1000:,.0f} ms, "
                    f"p99 {p99 * 1000:,.0f} ms"
                )
            figures.append(
                Figures(source.name, source.what, source.partitions, rounds, steady, workers)
            )
    finally:
        broker.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--rate", type=float, help="records/s in the latency runs [5,000]")
    parser.add_argument("--seconds", type=float, help="length of the latency runs [20]")
    parser.add_argument("--repeat", type=int, help="rounds of every measure [3]")
    parser.add_argument("--events", type=int, help="payments of the events workload [300,000]")
    parser.add_argument(
        "--workers", help="scale-out worker counts on the triangle workload [1,2,3]; 0: none"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 40,000 ego-Facebook records, 30,000 payments, one round, "
        "scale-out with 1 and 3 workers, latency at 2,000 records/s for 3 s",
    )
    parser.add_argument(
        "--no-avro", action="store_true", help="leave out the Avro runs (bench.kafka_registry)"
    )
    args = parser.parse_args()
    quick = {"rate": 2000.0, "seconds": 3.0, "repeat": 1, "events": 30_000, "workers": "1,3"}
    full = {"rate": 5000.0, "seconds": 20.0, "repeat": 3, "events": 300_000, "workers": "1,2,3"}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.workers = [int(n) for n in args.workers.split(",") if int(n) > 0]
    load = machine_info()["load average at the end (1/5/15 min)"]
    sources = inputs(40_000 if args.quick else 0, args.events)
    PROGRESS(f"load average at the start {load}; workloads ready")
    with tempfile.TemporaryDirectory() as tmp_name:
        figures = measure_all(args, sources, Path(tmp_name))
    minutes = (time.monotonic() - PROGRESS.started) / 60
    text = report(figures, args, load, minutes)
    args.out.write_text(text)
    print(text)
    if args.no_avro:
        return 0
    PROGRESS("the Avro runs: python -m bench.kafka_registry")
    avro = [sys.executable, "-m", "bench.kafka_registry", "--events", str(args.events)]
    avro += ["--repeat", str(args.repeat)]
    return subprocess.run(avro, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
