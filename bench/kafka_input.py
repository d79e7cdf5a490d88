"""Kafka input against the file job on one stream: ``python -m bench.kafka_input``.

Issue #14's measure: on a selective query (few match deltas per update, so that reading the
input is most of the work), how many updates per second ``subgraph-monitor serve`` applies
beside the file job (``subgraph-monitor run``) on the same JSON records, in the same run.

- ``big_ring``: a payments stream (:func:`bench.payments.payments`: Zipf-like accounts, string
  ids ``tx-N``, ``amount`` and ``channel`` fields) with 5% deletes by id, read as events by the
  payments benchmark's ``big_ring`` (amount predicates: few rings close);
- ``sparse_triangle``: a sparse random graph (average degree 4) as tuple records with 10%
  deletes, symmetry-broken triangles, undirected.

The file job reads the records from a JSON Lines file; its rate is its own summary line
(``elapsed``). The service reads them from a 3-partition topic of a local broker
(``scripts/kafka_local``), produced before it starts (keyed by event id or edge, so that a delete
follows its insert); its rate is the records over the time from its first assignment to its
last committed epoch (its JSON logs). ``--repeat`` interleaves the two and prints medians.
``--profile DIR`` also runs the service once under cProfile and writes the top lines there.
"""

from __future__ import annotations

import argparse
import gc
import math
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
from confluent_kafka import Consumer

from bench.kafka_serve import log_lines, produce_records, serve_env, throughput, topics, wait
from bench.payments import QUERIES, payments
from connectors.events import FieldTypes
from connectors.kafka import CONSUMER_DEFAULTS
from connectors.kafka_records import decode_messages, message_columns
from monitor.service.serve import COLLECTOR_THRESHOLDS
from scripts.kafka_local import KafkaBroker

ROOT = Path(__file__).resolve().parents[1]
BATCH = 10_000
PARTITIONS = 3


@dataclass(frozen=True)
class Workload:
    query: str
    undirected: bool
    #: ``(key, value)`` per record, in stream order.
    records: Callable[[int, int], list[tuple[bytes, bytes]]]


def ring_records(n: int, seed: int) -> list[tuple[bytes, bytes]]:
    """``n`` transfers as event records, each block of ``BATCH`` followed by deletes (by id) of
    5% as many earlier transfers."""
    data = payments(n, max(n // 3, 1000), seed)
    rng = np.random.default_rng(seed + 1)
    out: list[tuple[bytes, bytes]] = []
    for lo in range(0, n, BATCH):
        hi = min(lo + BATCH, n)
        for i in range(lo, hi):
            record = {
                "op": "insert",
                "relation": "transfer",
                "id": data["ids"][i],
                "src": int(data["src"][i]),
                "dst": int(data["dst"][i]),
                "amount": float(data["amount"][i]),
                "channel": data["channel"][i],
            }
            out.append((data["ids"][i].encode(), orjson.dumps(record)))
        for i in rng.choice(hi, (hi - lo) // 20, replace=False).tolist():
            record = {"op": "delete", "relation": "transfer", "id": data["ids"][i]}
            out.append((data["ids"][i].encode(), orjson.dumps(record)))
    return out


def edge_records(n: int, seed: int) -> list[tuple[bytes, bytes]]:
    """``n`` edge inserts of a random graph of average degree 4, then deletes of 10% of them."""
    rng = np.random.default_rng(seed)
    vertices = max(n // 2, 10)
    edges = rng.integers(0, vertices, (n, 2))
    deletes = edges[rng.choice(n, n // 10, replace=False)]
    out = []
    for op, rows in (("insert", edges), ("delete", deletes)):
        for u, v in rows.tolist():
            out.append((f"{u}:{v}".encode(), orjson.dumps({"op": op, "src": u, "dst": v})))
    return out


WORKLOADS = {
    "big_ring": Workload(QUERIES["big_ring"], False, ring_records),
    "sparse_triangle": Workload(
        "tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c.", True, edge_records
    ),
}

_ELAPSED = re.compile(r"elapsed ([0-9.]+) s: ([0-9,]+) updates/s, ([0-9,]+) match deltas/s")


def file_job(path: Path, workload: Workload) -> tuple[float, float]:
    """The file job's updates/s and match deltas/s on the records in ``path``."""
    command = [
        sys.executable,
        "-m",
        "monitor",
        "run",
        "-q",
        workload.query,
        "-e",
        str(path),
        "-b",
        str(BATCH),
        "--format",
        "json",
    ]
    if workload.undirected:
        command.append("--undirected")
    done = subprocess.run(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True
    )
    found = _ELAPSED.search(done.stderr.decode())
    if found is None:
        raise RuntimeError(f"no summary from the file job: {done.stderr.decode()[-2000:]}")
    return float(found[2].replace(",", "")), float(found[3].replace(",", ""))


def serve(
    bootstrap: str, tmp: Path, topic: str, workload: Workload, profile: Path | None = None
) -> tuple[float, int]:
    """The service's updates/s over the whole topic, and how many epochs it committed."""
    group = f"bench-{uuid.uuid4().hex[:8]}"
    log = tmp / f"{group}.log"
    env = serve_env(
        bootstrap, topic, group, tmp / group, query=workload.query, undirected=workload.undirected
    )
    python = [sys.executable]
    if profile is not None:
        python += ["-m", "cProfile", "-o", str(profile)]
    proc = subprocess.Popen(
        [*python, "-m", "monitor", "serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    try:
        wait(bootstrap, group, topic, proc)
    finally:
        proc.terminate()
        proc.wait(120)
    updates, _, epochs = throughput(log_lines(log))
    return updates, epochs


def consumer_alone(bootstrap: str, topic: str, count: int) -> tuple[float, float]:
    """Milliseconds per epoch of ``BATCH`` records that a consumer configured as the service's
    spends in ``consume`` and in decoding (:func:`~connectors.kafka_records.message_columns`
    and :func:`~connectors.kafka_records.decode_messages`), reading the whole topic: the
    service's consumer defaults and its garbage collector's thresholds."""
    thresholds = gc.get_threshold()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    try:
        return _consume_alone(bootstrap, topic, count)
    finally:
        gc.set_threshold(*thresholds)


def _consume_alone(bootstrap: str, topic: str, count: int) -> tuple[float, float]:
    consumer = Consumer(
        {
            **CONSUMER_DEFAULTS,
            "bootstrap.servers": bootstrap,
            "group.id": f"alone-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    types = FieldTypes.of({"transfer": {}})
    consuming = decoding = 0.0
    taken = epochs = 0
    deadline = time.monotonic() + 300
    while taken < count and time.monotonic() < deadline:
        started = time.perf_counter()
        messages = consumer.consume(num_messages=min(BATCH, count - taken), timeout=0.5)
        read = time.perf_counter()
        polled = decode_messages(message_columns(messages), taken, "e", {}, types)
        if taken:  # the first call also waits for the group to form
            consuming += read - started
            decoding += time.perf_counter() - read
        taken += polled.records
        epochs += 1
    consumer.close()
    per_epoch = 1000.0 * BATCH / max(taken, 1)
    return consuming * per_epoch, decoding * per_epoch


def top_lines(profile: Path, epochs: int, count: int = 25) -> str:
    """The profile's top functions by own time and by cumulative time, per epoch."""
    lines = [f"cProfile of serve, {epochs} epochs of {BATCH:,} records; ms per epoch"]
    stats = pstats.Stats(str(profile))
    rows = stats.stats  # type: ignore[attr-defined]
    # The cumulative ranking starts at the service's loop (not the interpreter and click).
    loop = max((r[3] for (f, _, name), r in rows.items() if name == "_run"), default=math.inf)
    for key, title in ((2, "own time"), (3, "cumulative, from serve's loop down")):
        lines += ["", f"by {title}:", "  own ms  cum ms   calls/epoch  function"]
        shown = [item for item in rows.items() if key == 2 or item[1][3] <= loop]
        ranked = sorted(shown, key=lambda item: -item[1][key])[:count]
        for (file, line, name), (_, calls, own, cum, _) in ranked:
            where = f"{Path(file).name}:{line}({name})" if line else name
            lines.append(
                f"{own / epochs * 1e3:8.1f} {cum / epochs * 1e3:7.1f} "
                f"{calls / epochs:12,.0f}  {where}"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="big_ring")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--profile", type=Path, help="also profile serve: top lines to here, stats beside"
    )
    args = parser.parse_args()
    workload = WORKLOADS[args.workload]
    records = workload.records(args.records, 1)
    file_rates: list[float] = []
    serve_rates: list[float] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        path = tmp / "stream.jsonl"
        path.write_bytes(b"".join(value + b"\n" for _, value in records))
        broker = KafkaBroker(tmp / "broker")
        broker.start()
        try:
            bootstrap = broker.bootstrap
            runs = args.repeat + (args.profile is not None)
            names = [f"in{i}" for i in range(runs)]
            topics(
                bootstrap,
                *[(n, PARTITIONS) for n in names],
                *[(f"{n}-{s}", 1) for n in names for s in ("out", "dlq")],
            )
            for name in names:
                produce_records(bootstrap, name, records)
            for i in range(args.repeat):
                rate, deltas = file_job(path, workload)
                file_rates.append(rate)
                through, epochs = serve(bootstrap, tmp, names[i], workload)
                serve_rates.append(through)
                print(
                    f"run {i + 1}: file job {rate:,.0f} updates/s ({deltas:,.0f} match "
                    f"deltas/s); serve {through:,.0f} updates/s over {epochs} epochs; "
                    f"ratio {through / rate:.2f}",
                    file=sys.stderr,
                )
            consuming, decoding = consumer_alone(bootstrap, names[0], len(records))
            if args.profile is not None:
                prof = args.profile.with_suffix(".prof")
                _, epochs = serve(bootstrap, tmp, names[-1], workload, prof)
                args.profile.write_text(top_lines(prof, epochs) + "\n")
        finally:
            broker.close()
    ours, theirs = statistics.median(serve_rates), statistics.median(file_rates)
    print(
        f"{args.workload}, {len(records):,} records, epochs of {BATCH:,}, medians of "
        f"{args.repeat}: file job {theirs:,.0f} updates/s, serve {ours:,.0f} updates/s, "
        f"serve/file {ours / theirs:.2f} ({time.strftime('%Y-%m-%d')}); a consumer alone on the "
        f"topic: consume {consuming:,.0f} ms, decode {decoding:,.0f} ms per epoch; the file job "
        f"{1000 * BATCH / theirs:,.0f} ms per epoch in all"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
