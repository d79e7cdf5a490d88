"""The Kafka service on the partitioned engine (issue #34): ``python -m bench.kafka_distributed``
writes ``bench/kafka_distributed.md``.

One local broker (``scripts/kafka_local``), ``bench.kafka``'s two workloads (ego-Facebook's
stream with triangles; the payments stream with ``big_ring``), each produced once to an input
topic and written once as a JSON Lines file. On them, with ``SGM_OUTPUT_FORMAT=batches``:

- the *file job* of the single process (its own summary line) and of the partitioned engine at
  1, 2 and 4 workers (``run_partitioned`` in this process on a started Ray, timed from its first
  record read to its end: what ``run --workers`` does after Ray started);
- ``serve`` embedded, and ``SGM_ENGINE=distributed`` at 1, 2 and 4 workers (default shards,
  two per worker), each in a new group from the topic's start: updates/s and match deltas/s
  from its first partition assignment (after Ray started and the shards loaded) to its last
  commit (:func:`bench.kafka_serve.throughput`), and the shards' balance read from its
  ``/metrics`` at the end (largest over mean of pairs held and of work done);
- for the triangle workload, today's replicated workers at 1-3 (:func:`bench.cluster.measure`,
  which leaves the first epoch out);
- latency p50/p99 of record timestamp to committed output at a steady rate, embedded and
  distributed at 2 workers, epochs closing after 200 ms;
- recovery on ego-Facebook at 2 workers: a shard killed with ``ray.kill`` mid-stream (from the
  kill to the driver's next committed epoch, and the reload the driver logs); the driver (the
  Kafka owner) killed with SIGKILL mid-stream and started again (from the start to its first
  committed epoch, Ray's start included); and a node lost with its disk
  (``ray.cluster_utils.Cluster``: the shards it ran rebuilt from the shard changelog, seconds
  per GB replayed). Each beside the size of the shards' state on disk.

Every figure is one run on a shared two-core machine; ``--quick`` is a smoke run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench import cluster
from bench.kafka import Input, inputs, start
from bench.kafka_distributed_report import report
from bench.kafka_input import file_job
from bench.kafka_report import format_env
from bench.kafka_serve import (
    drop_topics,
    log_lines,
    metrics,
    produce_records,
    quantiles,
    stamp,
    throughput,
    topics,
    wait,
)
from bench.machine import machine_info
from scripts.kafka_local import KafkaBroker

OUT = Path(__file__).resolve().parent / "kafka_distributed.md"
#: The output format of every run (its settings: :func:`bench.kafka_report.format_env`).
OUTPUT = "batches"
FORMAT = format_env(OUTPUT)


def distributed(workers: int) -> dict[str, str]:
    return {"SGM_ENGINE": "distributed", "SGM_WORKERS": str(workers)}


@dataclass
class Measured:
    """One workload's figures: rates by configuration, balance, latency, recovery."""

    name: str
    what: str
    partitions: int
    #: ``configuration -> (updates/s, match deltas/s)``.
    rates: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: ``workers -> (pairs max/mean, work max/mean)`` of the distributed service.
    balance: dict[int, tuple[float, float]] = field(default_factory=dict)
    latency: dict[str, tuple[float, float]] = field(default_factory=dict)
    recovery: dict[str, dict[str, float]] = field(default_factory=dict)


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def partitioned_file_job(path: Path, source: Input, workers: int) -> tuple[float, float]:
    """The partitioned engine's file job on ``path``: updates/s and match deltas/s, what a
    process pays once left out as ``serve``'s rate leaves it out (Ray's start, the shard
    actors' start, the output encoder's compiled loops); in a subprocess: Ray starts once per
    process."""
    script = (
        "import sys, time, orjson\n"
        "from connectors.files import EdgeFileSource\n"
        "from monitor.distributed.cluster import ray_shards\n"
        "from monitor.distributed.filejob import PartitionedJob, run_partitioned\n"
        "from monitor.plan.events import event_relations\n"
        "from monitor.query.load import load_queries\n"
        "from monitor.service.event_plan import event_field_types\n"
        "from monitor.service.settings import Settings\n"
        "path, query, undirected, workers = sys.argv[1], sys.argv[2], sys.argv[3] == '1', "
        "int(sys.argv[4])\n"
        "settings = Settings(batch_size=10_000, undirected=undirected)\n"
        "queries = load_queries(query)\n"
        "types = event_field_types(queries, event_relations(queries))\n"
        "def source(p, at, skip):\n"
        "    return EdgeFileSource(p, format='json', start=at, skip_to=skip, events=types)\n"
        "from connectors.json_place import warm\n"
        "warm()\n"
        "with ray_shards(workers, None, None) as shards:\n"
        "    shards.call('stats', [()] * shards.count)\n"
        "    started = time.perf_counter()\n"
        "    totals = run_partitioned(queries, settings, PartitionedJob(path, source), shards)\n"
        "    seconds = time.perf_counter() - started\n"
        "sys.stdout.flush()\n"
        "print(orjson.dumps({'updates': totals.updates, 'deltas': sum(totals.deltas.values()), "
        "'seconds': seconds}).decode(), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(path),
            source.workload.query,
            "1" if source.workload.undirected else "0",
            str(workers),
        ],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    got = json.loads(done.stderr.strip().splitlines()[-1])
    return got["updates"] / got["seconds"], got["deltas"] / got["seconds"]


def scraped(text: str) -> dict[str, dict[str, float]]:
    """``family sample name -> {shard: value}`` of the shard families in a /metrics text."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "shard" in sample.labels:
                found.setdefault(sample.name, {})[sample.labels["shard"]] = sample.value
    return found


def ratio(values: dict[str, float]) -> float:
    """Largest over mean."""
    mean = sum(values.values()) / max(len(values), 1)
    return max(values.values()) / mean if mean else float("nan")


def serve_run(
    bootstrap: str, tmp: Path, source: Input, topic: str, env: dict[str, str]
) -> tuple[float, float, dict[str, dict[str, float]], Path]:
    """``serve`` over the whole topic in a new group: updates/s, match deltas/s, the shard
    families at the end, and its log."""
    out = f"{topic}-out-{uuid.uuid4().hex[:6]}"
    topics(bootstrap, (out, 1), (f"{out}-dlq", 1))
    proc, log, group = start(
        bootstrap,
        tmp,
        topic,
        source,
        OUTPUT,
        SGM_OUTPUT_TOPIC=out,
        SGM_DEAD_LETTER_TOPIC=f"{out}-dlq",
        **env,
    )
    try:
        wait(bootstrap, group, topic, proc)
        shards = scraped(metrics(log))
    finally:
        stop(proc)
    drop_topics(bootstrap, out, f"{out}-dlq")
    shutil.rmtree(tmp / group, ignore_errors=True)
    updates, deltas, _ = throughput(log_lines(log))
    return updates, deltas, shards, log


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(120)


def steady_latency(
    bootstrap: str, tmp: Path, source: Input, env: dict[str, str], rate: float, seconds: float
) -> tuple[float, float]:
    """p50 and p99 of record timestamp to committed output, ``rate`` records/s for
    ``seconds`` into a new topic once the service holds its partitions."""
    topic = f"{source.name}-steady-{uuid.uuid4().hex[:6]}"
    topics(bootstrap, (topic, source.partitions), (f"{topic}-out", 1), (f"{topic}-dlq", 1))
    proc, log, group = start(bootstrap, tmp, topic, source, OUTPUT, delay_ms=200, **env)
    try:
        wait_for(log, "partition assigned", proc)
        produce_records(bootstrap, topic, source.records[: int(rate * seconds)], rate)
        wait(bootstrap, group, topic, proc)
        text = metrics(log)
    finally:
        stop(proc)
    drop_topics(bootstrap, topic, f"{topic}-out", f"{topic}-dlq")
    return quantiles(text)


def wait_for(
    log: Path, message: str, proc: subprocess.Popen[bytes] | None, after: float = 0.0
) -> dict[str, Any]:
    """The first log line with ``message`` stamped at or after ``after`` (10 minutes at most)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        for line in log_lines(log):
            if line.get("message") == message and stamp(line) >= after:
                return line
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"serve exited before {message!r}: {log}")
        time.sleep(0.1)
    raise RuntimeError(f"no {message!r} in {log}")


def recoveries(
    bootstrap: str, tmp: Path, source: Input, topic: str, quick: bool
) -> dict[str, dict[str, float]]:
    """Recovery at 2 workers: a shard killed, the driver killed, a node lost."""
    from bench.kafka_distributed_faults import (
        changelog_rebuild,
        driver_killed,
        node_lost,
        shard_killed,
    )

    found = {}
    for name, fault in (
        ("shard killed (ray.kill)", shard_killed),
        ("driver killed (SIGKILL), restarted", driver_killed),
        ("node lost with its disk", node_lost),
    ):
        found[name] = fault(bootstrap, tmp, source, topic)
        say(f"{source.name}: {name}: {found[name]}")
    megabytes = 64 if quick else 512
    name = f"a shard's rebuild from its changelog, {megabytes} MiB"
    found[name] = changelog_rebuild(bootstrap, tmp, megabytes)
    say(f"{name}: {found[name]}")
    return found


def measure(args: argparse.Namespace, sources: list[Input], tmp: Path) -> list[Measured]:
    broker = KafkaBroker(tmp / "broker")
    broker.start()
    say(f"broker up at {broker.bootstrap}")
    out = []
    try:
        for source in sources:
            got = Measured(source.name, source.what, source.partitions)
            topic = f"{source.name}-in"
            topics(broker.bootstrap, (topic, source.partitions))
            produce_records(broker.bootstrap, topic, source.records)
            path = tmp / f"{source.name}.jsonl"
            path.write_bytes(b"".join(value + b"\n" for _, value in source.records))
            say(f"{source.name}: {len(source.records):,} records")
            got.rates["file job, single process"] = file_job(path, source.workload)
            for n in args.workers:
                got.rates[f"file job, {n} worker(s)"] = partitioned_file_job(path, source, n)
                say(f"{source.name}: file job on {n}: {got.rates[f'file job, {n} worker(s)']}")
            got.rates["serve, embedded"] = serve_run(broker.bootstrap, tmp, source, topic, {})[:2]
            for n in args.workers:
                updates, deltas, shards, _ = serve_run(
                    broker.bootstrap, tmp, source, topic, distributed(n)
                )
                got.rates[f"serve, {n} worker(s)"] = (updates, deltas)
                tuples = shards.get("subgraph_monitor_shard_tuples", {})
                work = shards.get("subgraph_monitor_shard_work_total", {})
                got.balance[n] = (ratio(tuples), ratio(work))
                say(f"{source.name}: serve on {n}: {updates:,.0f} updates/s")
            if source.name == "triangle":
                for n in args.replicated:
                    fresh = f"{topic}-r{n}-{uuid.uuid4().hex[:6]}"
                    made = [(fresh, cluster.PARTITIONS), (f"{fresh}-out", 1), (f"{fresh}-dlq", 1)]
                    topics(broker.bootstrap, *made)
                    r = cluster.measure(broker.bootstrap, tmp, fresh, n, source.records, env=FORMAT)
                    drop_topics(broker.bootstrap, *(name for name, _ in made))
                    got.rates[f"replicated, {n} worker(s)"] = (r["rate"], r["deltas_rate"])
                    say(f"{source.name}: replicated {n}: {r['rate']:,.0f} updates/s")
            for label, env in (("embedded", {}), ("2 workers", distributed(2))):
                got.latency[label] = steady_latency(
                    broker.bootstrap, tmp, source, env, args.rate, args.seconds
                )
            if source.name == "triangle" and not args.no_recovery:
                got.recovery = recoveries(broker.bootstrap, tmp, source, topic, args.quick)
            out.append(got)
    finally:
        broker.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run on small inputs")
    parser.add_argument("--no-recovery", action="store_true", help="leave the faults out")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    started = time.monotonic()
    args.workers = [1, 2] if args.quick else [1, 2, 4]
    args.replicated = [1, 2] if args.quick else [1, 2, 3]
    args.rate, args.seconds = (2000.0, 3.0) if args.quick else (5000.0, 20.0)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    sources = inputs(20_000 if args.quick else 0, 20_000 if args.quick else 300_000)
    with tempfile.TemporaryDirectory(prefix="sgm-kafka-distributed-") as tmp:
        figures = measure(args, sources, Path(tmp))
    text = report(figures, machine_info(), (time.monotonic() - started) / 60, args.quick)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
