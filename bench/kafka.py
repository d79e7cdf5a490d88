"""End-to-end figures through Kafka: ``python -m bench.kafka`` writes ``bench/kafka.md``.

A local broker (``scripts/kafka_local``) is started; ego-Facebook's edges (inserts, then 10%
deletes, as JSON records keyed by edge over 3 partitions) go through ``subgraph-monitor serve``
with symmetry-broken triangles.

- *throughput*: the whole stream is produced first; the service's rate is the records over the
  time from its first assignment to its last committed epoch (from its JSON logs). Beside it,
  in the same run, the engine alone on the same updates in the same epoch size (in-process
  ``EpochProcessor``): the ratio is the cost of Kafka I/O, transactions and the state store.
- *latency*: records are produced at a steady rate while the service runs with a short epoch
  delay; p50/p99 of record timestamp to committed output are read from the service's
  ``end_to_end_latency_seconds`` histogram.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from core.records import RelationUpdates, UpdateBatch
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from scripts.kafka_local import KafkaBroker

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "kafka.md"
DATASET = ROOT.parent / "shared" / "datasets" / "ego-facebook.txt.gz"
QUERY = "tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c."
BATCH = 10_000


def stream() -> list[tuple[int, int, int]]:
    with gzip.open(DATASET, "rt") as f:
        edges = np.loadtxt(f, dtype=np.int64, comments="#").reshape(-1, 2)
    edges = edges[edges[:, 0] < edges[:, 1]]
    rng = np.random.default_rng(1)
    edges = edges[rng.permutation(edges.shape[0])]
    deletes = edges[rng.choice(edges.shape[0], edges.shape[0] // 10, replace=False)]
    rows = [(int(u), int(v), 1) for u, v in edges] + [(int(u), int(v), -1) for u, v in deletes]
    return rows


def topics(bootstrap: str, *names: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=p, replication_factor=1) for n, p in names]
    )
    for future in futures.values():
        future.result(timeout=60)


def produce(bootstrap: str, topic: str, rows: list[tuple[int, int, int]], rate: float = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    started = time.monotonic()
    for i, (u, v, diff) in enumerate(rows):
        value = json.dumps({"op": "insert" if diff > 0 else "delete", "src": u, "dst": v})
        while True:
            try:
                producer.produce(topic, value=value.encode(), key=f"{u}:{v}".encode())
                break
            except BufferError:
                producer.poll(0.05)
        if rate and i % 100 == 0:
            ahead = i / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
            producer.poll(0)
    producer.flush(60)


#: Errors that mean "ask again": the group's coordinator is moving or loading, or a request
#: timed out (``consumer.committed`` raised NOT_COORDINATOR once while a service started).
_TRANSIENT = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._WAIT_COORD,
}


def consumed(bootstrap: str, group: str, topic: str) -> bool:
    """Whether ``group`` has committed the end of every partition of ``topic`` (False while
    the broker answers with a transient error)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [TopicPartition(topic, p) for p in meta.partitions]
        ends = [consumer.get_watermark_offsets(p, timeout=10)[1] for p in parts]
        done = [tp.offset for tp in consumer.committed(parts, timeout=10)]
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and (error.retriable() or error.code() in _TRANSIENT):
            return False
        raise
    finally:
        consumer.close()
    return done == ends


def serve_env(
    bootstrap: str,
    topic: str,
    group: str,
    state_dir: Path,
    *,
    query: str = QUERY,
    undirected: bool = True,
    delay_ms: int = 1000,
    **extra: str,
) -> dict[str, str]:
    """The environment of one benchmark ``serve`` on ``topic`` (output ``TOPIC-out``, dead
    letters ``TOPIC-dlq``), epochs of :data:`BATCH`; ``extra`` adds or overrides settings."""
    return {
        **os.environ,
        "SGM_BOOTSTRAP_SERVERS": bootstrap,
        "SGM_INPUT_TOPICS": topic,
        "SGM_OUTPUT_TOPIC": f"{topic}-out",
        "SGM_DEAD_LETTER_TOPIC": f"{topic}-dlq",
        "SGM_GROUP_ID": group,
        "SGM_QUERIES": query,
        "SGM_UNDIRECTED": str(undirected).lower(),
        "SGM_STATE_DIR": str(state_dir),
        "SGM_BATCH_SIZE": str(BATCH),
        "SGM_MAX_BATCH_DELAY_MS": str(delay_ms),
        "SGM_HTTP_PORT": "0",
        **extra,
    }


def serve(
    bootstrap: str, tmp: Path, topic: str, delay_ms: int
) -> tuple[subprocess.Popen[bytes], Path, str]:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    log = tmp / f"{group}.log"
    env = serve_env(bootstrap, topic, group, tmp / group, delay_ms=delay_ms)
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    return proc, log, group


def wait(bootstrap: str, group: str, topic: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if consumed(bootstrap, group, topic):
            return
        time.sleep(0.5)
    raise RuntimeError(f"serve did not consume {topic}")


def log_lines(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def stamp(line: dict[str, Any]) -> float:
    return time.mktime(time.strptime(line["timestamp"][:19], "%Y-%m-%dT%H:%M:%S")) + float(
        "0." + line["timestamp"][20:23]
    )


def quantiles(metrics: str, name: str) -> tuple[float, float]:
    buckets = []
    for line in metrics.splitlines():
        if line.startswith(f"{name}_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
    total = buckets[-1][1] if buckets else 0.0

    def q(p: float) -> float:
        target = p * total
        previous_le, previous_count = 0.0, 0.0
        for le, count in buckets:
            if count >= target:
                if le == float("inf"):
                    return previous_le
                span = count - previous_count
                return previous_le + (le - previous_le) * (
                    (target - previous_count) / span if span else 0
                )
            previous_le, previous_count = le, count
        return float("nan")

    return q(0.5), q(0.99)


def engine_only(rows: list[tuple[int, int, int]]) -> float:
    processor = EpochProcessor(parse_queries(QUERY), Settings(undirected=True, batch_size=BATCH))
    data = np.asarray(rows, dtype=np.int64)
    started = time.perf_counter()
    for lo in range(0, data.shape[0], BATCH):
        part = data[lo : lo + BATCH]
        seq = np.arange(lo, lo + part.shape[0], dtype=np.int64)
        batch = UpdateBatch(
            {
                "e": RelationUpdates(
                    [part[:, 0].copy(), part[:, 1].copy()], part[:, 2].astype(np.int8), seq
                )
            },
            lo,
            part.shape[0],
        )
        processor.process(batch)
        processor.commit()
    return float(data.shape[0] / (time.perf_counter() - started))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--rate", type=float, default=5000.0, help="records/s in the latency run")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the latency run")
    args = parser.parse_args()
    rows = stream()
    engine = engine_only(rows)
    print(f"engine alone: {engine:,.0f} updates/s", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        broker = KafkaBroker(tmp / "broker")
        broker.start()
        try:
            bootstrap = broker.bootstrap
            topics(
                bootstrap,
                ("through", 3),
                ("through-out", 1),
                ("through-dlq", 1),
                ("steady", 3),
                ("steady-out", 1),
                ("steady-dlq", 1),
            )
            produce(bootstrap, "through", rows)
            proc, log, group = serve(bootstrap, tmp, "through", 1000)
            wait(bootstrap, group, "through", proc)
            proc.terminate()
            proc.wait(60)
            lines = log_lines(log)
            first = min(stamp(x) for x in lines if x.get("message") == "partition assigned")
            last = max(stamp(x) for x in lines if x.get("message") == "epoch committed")
            through = len(rows) / (last - first)
            print(f"through Kafka: {through:,.0f} updates/s", file=sys.stderr)
            steady = rows[: int(args.rate * args.seconds)]
            proc, log, group = serve(bootstrap, tmp, "steady", 200)
            time.sleep(3.0)
            produce(bootstrap, "steady", steady, rate=args.rate)
            wait(bootstrap, group, "steady", proc)
            port = next(x["port"] for x in log_lines(log) if "port" in x)
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
            proc.terminate()
            proc.wait(60)
            p50, p99 = quantiles(metrics, "subgraph_monitor_end_to_end_latency_seconds")
        finally:
            broker.close()
    text = (
        "Generated by `python -m bench.kafka`: a local single-node broker, ego-Facebook as "
        f"{len(rows):,} JSON records (inserts, then 10% deletes) over 3 partitions, "
        f"symmetry-broken triangles, epochs of {BATCH:,} updates.\n\n"
        "| measure | figure |\n|---|---|\n"
        f"| engine alone, updates/s (same updates, same epochs, in process) | {engine:,.0f} |\n"
        f"| through Kafka, updates/s (consume, evaluate, produce, transaction, state store) | "
        f"{through:,.0f} |\n"
        f"| ratio (Kafka I/O overhead) | {engine / through:.2f}x |\n"
        f"| produce -> committed output latency, p50 / p99 at {args.rate:,.0f} records/s, "
        f"epochs closing after 200 ms | {p50 * 1000:,.0f} ms / {p99 * 1000:,.0f} ms |\n"
    )
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
