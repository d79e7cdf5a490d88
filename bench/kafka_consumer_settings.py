"""The input consumer's librdkafka settings, #32: ``python -m bench.kafka_consumer_settings``.

One local broker (``scripts/kafka_local``); the records of :mod:`bench.kafka`'s *events*
workload (:func:`bench.kafka_input.ring_records`: payments as JSON event records, 112 bytes of
key and value on average, 5% deletes by id; 1,050,000 records for the default 1,000,000
payments) produced once to a 3-partition topic, or with ``--edges`` the small edge records of
``bench.kafka_input``'s ``sparse_triangle``. Then, ``--rounds`` times, every variant in turn
(the order turning by round, so that a drift of the shared machine's load favours none), each
in a process of its own so that its CPU time, its memory and its garbage collector are its own;
every consumer is configured as the service's (:func:`bench.kafka_ceilings.service_consumer`,
the variant's settings in ``SGM_KAFKA``'s place) and runs with the service's collector
thresholds unless the variant says otherwise:

- *settings* (the default), each of :data:`SETTINGS`: the memory of a full pre-fetch queue (a
  consumer assigned the topic that consumes nothing for :data:`FILL` seconds: resident memory
  above what the process held before); a consumer reading the whole topic once from its
  assignment with ``consume(num_messages=10_000)`` and dropping the messages (records/s, CPU
  seconds per 100,000 records of the process, all its threads, and of its main thread, the
  broker's CPU seconds per 100,000 records); the same consumer seeking back to the start once
  at the end of the log (milliseconds to its first record); then
  :func:`bench.kafka_ceilings.consumer_ceiling`, the ceiling :mod:`bench.kafka` reports.
- *breakdown* (``--breakdown``), each of :data:`BREAKDOWN`: where the main thread's CPU time
  per record goes when the consumer takes each call's columns as the service does
  (:func:`connectors.kafka_records.message_columns`): ``consume()`` itself (and its wall time),
  the columns, freeing the messages, and the cyclic garbage collector's passes wherever they
  fell (timed by ``gc.callbacks`` and taken out of the step they fell in); beside it, the same
  values cut out of one buffer (``bytes.split``): what a value per record costs without a
  ``Message``.

Medians over the rounds; every run's figures go to stderr as they come. ``--only 1,13`` picks
variants by their place in the list.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.kafka_ceilings import CONSUME, consumer_ceiling, service_consumer
from bench.kafka_input import PARTITIONS, edge_records, ring_records
from bench.kafka_serve import produce_records, topics
from connectors.kafka_records import message_columns
from monitor.service.serve import COLLECTOR_THRESHOLDS
from scripts.kafka_local import KafkaBroker

TOPIC = "events-in"
#: Seconds a consumer is left assigned without consuming, for its pre-fetch queue to fill.
FILL = 1.5

LIBRDKAFKA: dict[str, object] = {
    "queued.min.messages": 100_000,
    "queued.max.messages.kbytes": 65_536,
    "fetch.queue.backoff.ms": 1000,
    "max.partition.fetch.bytes": 1_048_576,
    "fetch.max.bytes": 52_428_800,
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 500,
}
"""librdkafka's own defaults of the settings measured (CONFIGURATION.md of librdkafka 2.x)."""

#: ``CONSUMER_DEFAULTS`` as issue #14 left them.
ISSUE_14: dict[str, object] = {
    **LIBRDKAFKA,
    "queued.min.messages": 1_000_000,
    "fetch.queue.backoff.ms": 10,
}


@dataclass(frozen=True)
class Variant:
    """A consumer to measure: librdkafka settings over ``CONSUMER_DEFAULTS`` (as ``SGM_KAFKA``
    would set them), messages per ``consume``, the collector's thresholds (None: disabled)."""

    name: str
    settings: dict[str, object] = field(default_factory=dict)
    num_messages: int = CONSUME
    thresholds: tuple[int, int, int] | None = COLLECTOR_THRESHOLDS


SETTINGS: list[Variant] = [
    Variant("librdkafka's defaults", LIBRDKAFKA),
    Variant("#14's: queued.min.messages 1M, fetch.queue.backoff.ms 10", ISSUE_14),
    Variant("#14's, queued.min.messages 100k", {**ISSUE_14, "queued.min.messages": 100_000}),
    Variant(
        "#14's + queued.max.messages.kbytes 16 MiB",
        {**ISSUE_14, "queued.max.messages.kbytes": 16_384},
    ),
    Variant(
        "#14's + queued.max.messages.kbytes 256 MiB",
        {**ISSUE_14, "queued.max.messages.kbytes": 262_144},
    ),
    Variant(
        "#14's + max.partition.fetch.bytes 256 KiB",
        {**ISSUE_14, "max.partition.fetch.bytes": 262_144},
    ),
    Variant(
        "#14's + max.partition.fetch.bytes 4 MiB",
        {**ISSUE_14, "max.partition.fetch.bytes": 4_194_304},
    ),
    Variant(
        "#14's + max.partition.fetch.bytes 16 MiB",
        {**ISSUE_14, "max.partition.fetch.bytes": 16_777_216},
    ),
    Variant("#14's + fetch.max.bytes 1 MiB", {**ISSUE_14, "fetch.max.bytes": 1_048_576}),
    Variant("#14's + fetch.min.bytes 1 MiB", {**ISSUE_14, "fetch.min.bytes": 1_048_576}),
    Variant("#14's + fetch.wait.max.ms 100", {**ISSUE_14, "fetch.wait.max.ms": 100}),
    Variant("#14's, queued.min.messages 20k", {**ISSUE_14, "queued.min.messages": 20_000}),
    Variant(
        "#14's + queued.max.messages.kbytes 4 MiB",
        {**ISSUE_14, "queued.max.messages.kbytes": 4_096},
    ),
    Variant(
        "#14's, queued.min.messages 100k + queued.max.messages.kbytes 16 MiB",
        {**ISSUE_14, "queued.min.messages": 100_000, "queued.max.messages.kbytes": 16_384},
    ),
    Variant("CONSUMER_DEFAULTS now"),
]
"""The settings table's variants: each names every setting measured, so that the table keeps its
meaning when ``CONSUMER_DEFAULTS`` change (the last row is whatever they are)."""

BREAKDOWN: list[Variant] = [
    Variant("the service's: thresholds 100,000/50/100, 10,000 a call"),
    Variant("Python's thresholds 700/10/10", thresholds=(700, 10, 10)),
    Variant("collector disabled", thresholds=None),
    Variant("1,000 a call", num_messages=1_000),
    Variant("50,000 a call", num_messages=50_000),
    Variant("100,000 a call", num_messages=100_000),
]
"""The breakdown's variants, all under ``CONSUMER_DEFAULTS``."""


def cpu_ticks(pid: int) -> float:
    """CPU seconds (user and system) a process has used: ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def resident() -> float:
    """This process's resident memory now, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure_settings(
    bootstrap: str, count: int, variant: Variant, broker_pid: int, seconds: float
) -> dict[str, float]:
    """One run of the *settings* table under ``variant`` (module doc)."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    before = resident()
    idle, parts = service_consumer(bootstrap, TOPIC, variant.settings)
    idle.assign(parts)
    time.sleep(FILL)
    full = resident() - before
    idle.close()
    consumer, parts = service_consumer(bootstrap, TOPIC, variant.settings)
    broker, cpu, main = cpu_ticks(broker_pid), time.process_time(), time.thread_time()
    started = time.perf_counter()
    consumer.assign(parts)
    read = 0
    deadline = time.monotonic() + 120
    while read < count and time.monotonic() < deadline:
        asked = min(variant.num_messages, count - read)
        messages = consumer.consume(num_messages=asked, timeout=0.5)
        read += len(messages)
    wall = time.perf_counter() - started
    cpu, main = time.process_time() - cpu, time.thread_time() - main
    broker = cpu_ticks(broker_pid) - broker
    if read < count:
        raise RuntimeError(f"a consumer read {read:,} of the {count:,} records of {TOPIC}")
    # At the end of the log its fetch waits at the broker: how long until a seek is served.
    time.sleep(0.1)
    for tp in parts:
        consumer.seek(tp)
    sought = time.perf_counter()
    while not consumer.consume(num_messages=1, timeout=0.5):
        pass
    stall = time.perf_counter() - sought
    consumer.close()
    ceiling = consumer_ceiling(
        bootstrap,
        TOPIC,
        count,
        seconds,
        4 * seconds,
        settings=variant.settings,
        num_messages=variant.num_messages,
    )
    return {
        "rate": count / wall,
        "cpu": cpu / count * 1e5,
        "main": main / count * 1e5,
        "broker": broker / count * 1e5,
        "memory": full,
        "ceiling": ceiling.rate,
        "stall": stall * 1e3,
    }


class Collections:
    """CPU seconds of this thread that the cyclic garbage collector has spent, from
    ``gc.callbacks``."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._began = 0.0
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.thread_time()
        else:
            self.spent += time.thread_time() - self._began


def measure_breakdown(
    bootstrap: str, count: int, variant: Variant, seconds: float
) -> dict[str, float]:
    """One run of the *breakdown* under ``variant``: microseconds per record, reading the topic
    in passes as :func:`~bench.kafka_ceilings.consumer_ceiling` does (the first call of a pass
    not counted)."""
    if variant.thresholds is None:
        gc.disable()
    else:
        gc.set_threshold(*variant.thresholds)
    collections = Collections()
    consumer, parts = service_consumer(bootstrap, TOPIC, variant.settings)
    consumer.assign(parts)
    steps = dict.fromkeys(("consume wall", "consume", "columns", "free", "gc", "process"), 0.0)
    taken = passes = 0
    wall = 0.0
    values: list[bytes] = []
    began = time.perf_counter()
    while passes == 0 or (wall < seconds and time.perf_counter() - began < 4 * seconds):
        for tp in parts if passes else []:
            consumer.seek(tp)
        read, started, process = 0, 0.0, 0.0
        while read < count:
            n = min(variant.num_messages, count - read)
            gc0, w0, c0 = collections.spent, time.perf_counter(), time.thread_time()
            messages = consumer.consume(num_messages=n, timeout=0.5)
            gc1, w1, c1 = collections.spent, time.perf_counter(), time.thread_time()
            records = message_columns(messages)
            gc2, c2 = collections.spent, time.thread_time()
            values = records.values
            del messages, records
            gc3, c3 = collections.spent, time.thread_time()
            read += len(values)
            if not started:  # the clock starts after the first records: those are not counted
                if values:
                    started, process = time.perf_counter(), time.process_time()
                continue
            taken += len(values)
            steps["consume wall"] += (w1 - w0) - (gc1 - gc0)
            steps["consume"] += (c1 - c0) - (gc1 - gc0)
            steps["columns"] += (c2 - c1) - (gc2 - gc1)
            steps["free"] += (c3 - c2) - (gc3 - gc2)
            steps["gc"] += gc3 - gc0
        if not started:
            raise RuntimeError(f"a consumer read nothing of {TOPIC}")
        wall += time.perf_counter() - started
        steps["process"] += time.process_time() - process
        passes += 1
    consumer.close()
    got = {k: v / taken * 1e6 for k, v in steps.items()}
    got["rate"] = taken / wall
    # The last call's values as one buffer, cut again into as many bytes objects.
    buffer = b"\n".join(values)
    got["split"] = min(_cpu(buffer.split, b"\n") for _ in range(5)) / len(values) * 1e6
    return got


def _cpu(call: Callable[[bytes], object], arg: bytes) -> float:
    started = time.thread_time()
    call(arg)
    return time.thread_time() - started


def run_child(job: dict[str, Any]) -> dict[str, float]:
    """``--child``: one measurement, in this process."""
    variant = Variant(**{**job["variant"], "thresholds": _thresholds(job["variant"])})
    if job["mode"] == "breakdown":
        return measure_breakdown(job["bootstrap"], job["count"], variant, job["seconds"])
    return measure_settings(job["bootstrap"], job["count"], variant, job["broker"], job["seconds"])


def _thresholds(variant: dict[str, Any]) -> tuple[int, int, int] | None:
    value = variant["thresholds"]
    return None if value is None else (int(value[0]), int(value[1]), int(value[2]))


def in_child(job: dict[str, Any]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.kafka_consumer_settings", "--child", json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"a measurement failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def rounds(
    variants: list[Variant], job: dict[str, Any], count: int
) -> dict[str, list[dict[str, float]]]:
    """Every variant ``count`` times, the order turning by round."""
    got: dict[str, list[dict[str, float]]] = {v.name: [] for v in variants}
    for k in range(count):
        turn = k % len(variants)
        for variant in variants[turn:] + variants[:turn]:
            result = in_child({**job, "variant": asdict(variant)})
            got[variant.name].append(result)
            shown = ", ".join(f"{key} {value:,.3f}" for key, value in result.items())
            print(f"round {k + 1}, {variant.name}: {shown}", file=sys.stderr, flush=True)
    return got


def settings_table(got: dict[str, list[dict[str, float]]]) -> str:
    lines = [
        "| consumer settings | records/s from the assignment (median; runs) | CPU s per 100k "
        "records, process (main thread) | broker CPU s per 100k | memory of the full queue, MiB "
        "| `consumer_ceiling`, records/s | seek to first records, ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs in got.items():
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        each = ", ".join(f"{r['rate'] / 1000:,.0f}k" for r in runs)
        lines.append(
            f"| {name} | **{med['rate']:,.0f}** ({each}) | {med['cpu']:.3f} ({med['main']:.3f}) "
            f"| {med['broker']:.3f} | {med['memory']:,.0f} | {med['ceiling']:,.0f} "
            f"| {med['stall']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def breakdown_table(got: dict[str, list[dict[str, float]]]) -> str:
    lines = [
        "| consumer (collector, messages a call) | records/s | µs of CPU per record, main thread: "
        "`consume()` (its wall time) | the columns | freeing | collector | in all | the process "
        "(every thread) | the values split out of one buffer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in got.items():
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        total = med["consume"] + med["columns"] + med["free"] + med["gc"]
        lines.append(
            f"| {name} | {med['rate']:,.0f} | {med['consume']:.3f} ({med['consume wall']:.3f}) "
            f"| {med['columns']:.3f} | {med['free']:.3f} | {med['gc']:.3f} | {total:.3f} "
            f"| {med['process']:.3f} | {med['split']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="payments [1,000,000]")
    parser.add_argument(
        "--edges",
        type=int,
        help="instead of the events, this many edge records (`bench.kafka_input`'s "
        "sparse_triangle stream, ~40 bytes a record)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs of every variant [3]")
    parser.add_argument("--seconds", type=float, default=1.0, help="counted per run [1]")
    parser.add_argument("--breakdown", action="store_true", help="the per-record breakdown")
    parser.add_argument("--only", help="variants by number, comma-separated (0 is the first)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(json.loads(args.child))))
        return 0
    variants = BREAKDOWN if args.breakdown else SETTINGS
    if args.only:
        variants = [variants[int(i)] for i in args.only.split(",")]
    records = edge_records(args.edges, 1) if args.edges else ring_records(args.events, 1)
    with tempfile.TemporaryDirectory() as tmp:
        broker = KafkaBroker(Path(tmp) / "broker")
        broker.start()
        try:
            topics(broker.bootstrap, (TOPIC, PARTITIONS))
            produce_records(broker.bootstrap, TOPIC, records)
            size = sum(len(k) + len(v) for k, v in records) / len(records)
            what = (
                f"{len(records):,} records of {size:.0f} bytes (key and value) on {PARTITIONS} "
                f"partitions, medians of {args.rounds} runs; load average at the start "
                f"{os.getloadavg()[0]:.2f}"
            )
            print(what, file=sys.stderr, flush=True)
            job = {
                "mode": "breakdown" if args.breakdown else "settings",
                "bootstrap": broker.bootstrap,
                "count": len(records),
                "seconds": args.seconds,
                "broker": json.loads(broker.state_path.read_text())["pid"],
            }
            got = rounds(variants, job, args.rounds)
        finally:
            broker.close()
    print(f"{what}, at the end {os.getloadavg()[0]:.2f}\n")
    print(breakdown_table(got) if args.breakdown else settings_table(got))
    return 0


if __name__ == "__main__":
    sys.exit(main())
