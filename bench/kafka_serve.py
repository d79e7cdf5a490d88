"""A benchmark's ``subgraph-monitor serve`` against a local broker (``scripts/kafka_local``),
for the Kafka benchmarks (``bench.kafka``, ``bench.kafka_input``, ``bench.kafka_output``,
``bench.cluster``): ego-Facebook's stream as records, topics made and dropped, records produced
(as fast as the client goes or at a steady rate), the service's environment, waiting until its
group has committed a topic's end, and reading its JSON logs and its metrics.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT.parent / "shared" / "datasets" / "ego-facebook.txt.gz"
QUERY = "tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c."
BATCH = 10_000
#: The service's histogram of record timestamp to committed output.
LATENCY = "subgraph_monitor_end_to_end_latency_seconds"


def stream() -> list[tuple[int, int, int]]:
    """ego-Facebook's edges (``u < v``) in a seeded random order as inserts, then deletes of a
    random 10% of them: ``(u, v, diff)``."""
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


def edge_records(rows: list[tuple[int, int, int]]) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` per row: the JSON record of an insert or delete, keyed by edge (so that
    a delete follows its insert in one partition)."""
    return [
        (
            f"{u}:{v}".encode(),
            json.dumps({"op": "insert" if diff > 0 else "delete", "src": u, "dst": v}).encode(),
        )
        for u, v, diff in rows
    ]


def produce(bootstrap: str, topic: str, rows: list[tuple[int, int, int]], rate: float = 0) -> None:
    """:func:`edge_records` of ``rows`` to ``topic`` (see :func:`produce_records`)."""
    produce_records(bootstrap, topic, edge_records(rows), rate)


def produce_records(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], rate: float = 0
) -> None:
    """``(key, value)`` records to ``topic`` in order: as fast as the client goes, or with
    ``rate``, that many records per second (each record's timestamp is when it was produced)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    started = time.monotonic()
    for i, (key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, value=value, key=key)
                break
            except BufferError:
                producer.poll(0.05)
        if rate and i % 100 == 0:
            ahead = i / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
            producer.poll(0)
    producer.flush(60)


def drop_topics(bootstrap: str, *names: str) -> None:
    """Delete topics once measured: a run writes gigabytes, more than a disk may hold."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(list(names), operation_timeout=30).values():
        future.result(timeout=60)


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
    bootstrap: str, tmp: Path, topic: str, **settings: Any
) -> tuple[subprocess.Popen[bytes], Path, str]:
    """``subgraph-monitor serve`` on ``topic`` in a new group, its JSON logs to a file in
    ``tmp``; ``settings`` are :func:`serve_env`'s keywords. Returns the process, the log, the
    group."""
    group = f"bench-{uuid.uuid4().hex[:8]}"
    log = tmp / f"{group}.log"
    env = serve_env(bootstrap, topic, group, tmp / group, **settings)
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "monitor", "serve"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    return proc, log, group


def wait(bootstrap: str, group: str, topic: str, proc: subprocess.Popen[bytes]) -> None:
    """Until ``group`` has committed the end of ``topic`` (at most 10 minutes, and while the
    service runs)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if consumed(bootstrap, group, topic):
            return
        time.sleep(0.5)
    raise RuntimeError(f"serve did not consume {topic}")


def log_lines(log: Path) -> list[dict[str, Any]]:
    """The JSON lines of a service's log."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def stamp(line: dict[str, Any]) -> float:
    """A log line's timestamp in seconds (millisecond precision)."""
    return time.mktime(time.strptime(line["timestamp"][:19], "%Y-%m-%dT%H:%M:%S")) + float(
        "0." + line["timestamp"][20:23]
    )


def throughput(lines: list[dict[str, Any]], *, steady: bool = False) -> tuple[float, float, int]:
    """A service's updates/s and match deltas/s over its log: the updates and deltas of its
    committed epochs over the time from its first partition assignment to its last commit;
    and how many epochs it committed. A last epoch smaller than the others is left out: it
    waited ``max_batch_delay_ms`` for records that the end of the stream never brought, idle
    time that a stream going on would not have. ``steady``: from the first epoch's commit
    instead, leaving out what a service does once (the first fetch after the assignment, the
    first transaction's round trips to a coordinator that is just starting)."""
    commits = sorted(
        (x for x in lines if x.get("message") == "epoch committed"), key=lambda x: stamp(x)
    )
    if len(commits) > 1 and int(commits[-1]["updates"]) < max(int(x["updates"]) for x in commits):
        commits = commits[:-1]
    first = min(stamp(x) for x in lines if x.get("message") == "partition assigned")
    if steady and len(commits) > 1:
        first, commits = stamp(commits[0]), commits[1:]
    seconds = stamp(commits[-1]) - first
    updates = sum(int(x["updates"]) for x in commits)
    deltas = sum(int(x.get("deltas", 0)) for x in commits)
    return updates / seconds, deltas / seconds, len(commits)


def metrics(log: Path) -> str:
    """A running service's Prometheus text (its HTTP port read from its log)."""
    port = next(x["port"] for x in log_lines(log) if "port" in x)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as answer:
        text: str = answer.read().decode()
    return text


def quantiles(metrics: str | list[str], name: str = LATENCY) -> tuple[float, float]:
    """p50 and p99 of the Prometheus histogram ``name`` (linear within a bucket); of several
    services' ``metrics``, of their histograms summed."""
    summed: dict[float, float] = {}
    for text in [metrics] if isinstance(metrics, str) else metrics:
        for line in text.splitlines():
            if line.startswith(f"{name}_bucket"):
                le = line.split('le="')[1].split('"')[0]
                bound = float("inf") if le == "+Inf" else float(le)
                summed[bound] = summed.get(bound, 0.0) + float(line.split()[-1])
    buckets = sorted(summed.items())
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
