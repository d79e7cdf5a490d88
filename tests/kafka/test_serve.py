"""``subgraph-monitor serve`` against a real broker: exact output, exactly once, dead letters.

The service runs as a subprocess configured by ``SGM_`` variables. Its output topic is read with
``read_committed`` and checked against the engine: byte for byte against the file job on a
one-partition topic (where epochs are cut by count and so are the same), and as result sets
(replayed deltas equal the matches of the final graph, every running sum stays in {0, 1}) on
partitioned topics, across SIGKILLs and broker restarts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from connectors.batches import batch_info, read_deltas
from tests.kafka import pods
from tests.kafka_broker import KafkaCluster

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
QUERIES = (
    "tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c.\n"
    "ring(a, b, c) := pays(a, b), pays(b, c), pays(c, a), a < b, a < c.\n"
)


def stream_records(n: int, seed: int) -> list[dict[str, object]]:
    """Inserts and deletes of edges among 60 vertices, with some labelled (pays) records."""
    rng = np.random.default_rng(seed)
    records: list[dict[str, object]] = []
    alive: list[tuple[int, int]] = []
    for _ in range(n):
        if alive and rng.random() < 0.2:
            u, v = alive.pop(int(rng.integers(0, len(alive))))
            records.append({"op": "delete", "src": u, "dst": v})
        elif rng.random() < 0.2:
            a, b = (f"acct-{int(x)}" for x in rng.integers(0, 15, 2))
            records.append({"op": "insert", "src": a, "dst": b, "relation": "pays"})
        else:
            u, v = (int(x) for x in rng.integers(0, 60, 2))
            records.append({"op": "insert", "src": u, "dst": v})
            alive.append((u, v))
    return records


def edge_key(record: dict[str, object]) -> bytes:
    """All updates of one undirected edge share a key, so they stay in order in one partition."""
    ends = sorted((str(record.get("src")), str(record.get("dst"))))
    return f"{record.get('relation', 'e')}:{ends[0]}:{ends[1]}".encode()


def produce(bootstrap: str, topic: str, records: list[dict[str, object]]) -> None:
    # Idempotent, so that retries across a broker restart neither reorder nor repeat records:
    # an insert and a delete of one edge swapped would change what the oracle expects.
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    producer = Producer(config)
    for record in records:
        producer.produce(topic, value=json.dumps(record).encode(), key=edge_key(record))
    assert producer.flush(30) == 0


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4()}"})
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        for p in meta.partitions
    }
    consumer.close()
    return ends


def committed(bootstrap: str, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """The group's committed offsets; a coordinator that loads or moves (a new group, a broker
    restart) is asked again for up to 30 s."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                found = consumer.committed(
                    [TopicPartition(topic, p) for p in partitions], timeout=10
                )
                return {tp.partition: tp.offset for tp in found}
            except KafkaException as exc:
                passing = exc.args[0].retriable() or exc.args[0].code() in COORDINATOR_MOVES
                if not passing or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


COORDINATOR_MOVES = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS)


def settled_metrics(svc: Service, timeout: float = 30) -> str:
    """The service's /metrics text once it shows the epoch whose offsets the group committed
    last (the service sets an epoch's figures after its Kafka transaction, the epoch's number
    last)."""
    port = _port_from_log(svc)
    marks = committed_metadata(svc.bootstrap, svc.group, svc.input, list(range(svc.partitions)))
    epoch = max((int(m.removeprefix("epoch=")) for m in marks.values() if m), default=0)
    deadline = time.monotonic() + timeout
    while True:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        shown = [
            float(line.rsplit(b" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(b"subgraph_monitor_last_committed_epoch ")
        ]
        if shown and shown[0] >= epoch:
            return str(text.decode())
        assert time.monotonic() < deadline, f"the metrics never showed epoch {epoch}: {shown}"
        time.sleep(0.1)


def committed_metadata(
    bootstrap: str, group: str, topic: str, partitions: list[int]
) -> dict[int, str]:
    """The commit metadata of the group's committed offsets, read as any Kafka client reads
    it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
        return {tp.partition: tp.metadata or "" for tp in found}
    finally:
        consumer.close()


def wait_consumed(
    bootstrap: str, group: str, topic: str, timeout: float = 120, svc: Service | None = None
) -> None:
    ends = end_offsets(bootstrap, topic)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if committed(bootstrap, group, topic, list(ends)) == ends:
            return
        if svc is not None and svc.proc is not None:
            exited = svc.proc.poll()
            if exited is not None and not svc.restarted_after(exited):
                raise AssertionError(f"the service exited with {exited}:\n{svc.log_text()[-5000:]}")
        time.sleep(0.5)
    # (enough of the log to follow a rebalance to its end: a broker restart's is ~10 kB)
    logs = svc.log_text()[-20000:] if svc is not None else ""
    raise AssertionError(
        f"group {group} did not consume {topic} to {ends} in {timeout}s "
        f"(committed: {committed(bootstrap, group, topic, list(ends))})\n{logs}"
    )


def read_topic(
    bootstrap: str, topic: str, idle: float = 3.0
) -> list[tuple[bytes, bytes, dict[str, bytes]]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    out = []
    last = time.monotonic()
    while time.monotonic() - last < idle:
        for message in consumer.consume(1000, timeout=0.5):
            if message.error() is None:
                raw = message.headers() or []
                items = raw.items() if isinstance(raw, dict) else raw
                headers = {k: v if isinstance(v, bytes) else b"" for k, v in items}
                out.append((message.key() or b"", message.value() or b"", headers))
                last = time.monotonic()
    consumer.close()
    return out


class Service:
    """A ``serve`` subprocess with its topics, group and state directory."""

    def __init__(
        self,
        kafka: KafkaCluster,
        make_topic: Callable[..., str],
        tmp: Path,
        partitions: int,
        **env: str,
    ) -> None:
        self.bootstrap = kafka.bootstrap
        self.input = make_topic(partitions)
        self.partitions = partitions
        self.output = make_topic(1, prefix="sgm-out")
        self.dead = make_topic(1, prefix="sgm-dlq")
        self.group = f"sgm-{uuid.uuid4().hex[:8]}"
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        queries = tmp / "queries.q"
        queries.write_text(QUERIES)
        self.env = {
            **os.environ,
            "SGM_BOOTSTRAP_SERVERS": kafka.bootstrap,
            "SGM_INPUT_TOPICS": self.input,
            "SGM_OUTPUT_TOPIC": self.output,
            "SGM_DEAD_LETTER_TOPIC": self.dead,
            "SGM_GROUP_ID": self.group,
            "SGM_QUERIES": str(queries),
            "SGM_STATE_DIR": str(tmp / "state"),
            "SGM_UNDIRECTED": "true",
            "SGM_HTTP_PORT": "0",
            "SGM_BATCH_SIZE": "200",
            "SGM_MAX_BATCH_DELAY_MS": "300",
            "SGM_LOG_LEVEL": "INFO",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []
        self.restarts = 0
        self._stopping = False
        #: Run in a pod of its own (tests.kafka.pods), as in the chart's container.
        self.pod = False

    def start(self) -> subprocess.Popen[bytes]:
        """Start the service, and restart it whenever it exits with the watchdog's code 75,
        as Kubernetes would (the watchdog ends a process stuck in librdkafka)."""
        self._stopping = False
        self._spawn()
        threading.Thread(target=self._supervise, daemon=True).start()
        assert self.proc is not None
        return self.proc

    def _spawn(self) -> None:
        log = self.tmp / f"serve-{len(self.logs)}.log"
        self.logs.append(log)
        command = [sys.executable, "-m", "monitor", "serve"]
        self.proc = subprocess.Popen(
            pods.in_pod(command) if self.pod else command,
            cwd=ROOT,
            env=pods.pod_env(self.tmp / "ray", self.env) if self.pod else self.env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )

    def _supervise(self) -> None:
        proc = self.proc
        while proc is not None and not self._stopping:
            code = proc.wait()
            if self._stopping or not self.restarted_after(code) or proc is not self.proc:
                return
            self.restarts += 1
            self._spawn()
            proc = self.proc

    def restarted_after(self, code: int) -> bool:
        """Whether an exit with ``code`` is one a pod is restarted after, as Kubernetes would:
        the watchdog's 75, or librdkafka aborting on one of its own assertions (SIGABRT,
        ``rdkafka_*: ... Assertion ... failed``: seen once in a broker restart, in
        ``rd_kafka_enq_once_del_source_return``), which the restart recovers from exactly."""
        if code == 75:
            return True
        tail = self.logs[-1].read_text(errors="replace")[-4000:] if self.logs else ""
        return (
            code == -signal.SIGABRT
            and re.search(r"rdkafka\w*\.[ch]:\d+: .*Assertion", tail) is not None
        )

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self._stopping = True
        if self.pod:  # (its first process; unshare forwards no signal)
            os.kill(pods.first_process(self.proc), sig)
        else:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs)


def deltas(records: list[tuple[bytes, bytes, dict[str, bytes]]]) -> list[dict[str, object]]:
    return [json.loads(value) for _, value, _ in records]


def check_exactly_once(rows: list[dict[str, object]]) -> dict[tuple[str, tuple[object, ...]], int]:
    """Replay: every running sum stays in {0, 1} (a duplicate or a lost delta breaks that)."""
    current: Counter[tuple[str, tuple[object, ...]]] = Counter()
    epochs = [int(r["epoch"]) for r in rows]  # type: ignore[call-overload]
    assert epochs == sorted(epochs), "epochs out of order"
    for row in rows:
        key = (str(row["query"]), tuple(row["match"].values()))  # type: ignore[attr-defined]
        current[key] += int(row["diff"])  # type: ignore[call-overload]
        assert current[key] in (0, 1), f"running sum {current[key]} for {key}"
    return {k: v for k, v in current.items() if v}


def expected_matches(
    records: list[dict[str, object]], tmp: Path
) -> dict[tuple[str, tuple[object, ...]], int]:
    """The file job on the same records, replayed: the current matches of the final graph."""
    path = tmp / "records.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    queries = tmp / "q.q"
    queries.write_text(QUERIES)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "run",
            "-q",
            str(queries),
            "--edges",
            str(path),
            "--undirected",
            "--quiet",
            "-b",
            "200",
        ],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return check_exactly_once(rows)


def test_sigterm_during_a_long_epoch_stops_at_once_and_the_epoch_is_read_again(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    """An epoch that closes by count or after ten minutes is half read when SIGTERM comes: the
    service stops without waiting for it (a pod's grace period is shorter), commits nothing of
    it, and the next start reads it again; the output is exactly once."""
    svc = service(partitions=1, SGM_BATCH_SIZE="1000", SGM_MAX_BATCH_DELAY_MS="600000")
    records = stream_records(2500, seed=9)
    produce(svc.bootstrap, svc.input, records)
    svc.start()
    deadline = time.monotonic() + 120
    while committed(svc.bootstrap, svc.group, svc.input, [0]) != {0: 2000}:
        assert time.monotonic() < deadline, svc.log_text()
        time.sleep(0.5)
    time.sleep(1.0)  # (the third epoch's 500 records read, 500 more awaited)
    assert svc.stop() == 0, svc.log_text()  # (waits 60 s at most: far less than the epoch)
    assert committed(svc.bootstrap, svc.group, svc.input, [0]) == {0: 2000}
    assert "stopping after epoch 2 as requested" in svc.log_text()
    svc.env["SGM_MAX_BATCH_DELAY_MS"] = "300"
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    assert svc.stop() == 0, svc.log_text()
    got = check_exactly_once(deltas(read_topic(svc.bootstrap, svc.output)))
    assert got == expected_matches(records, tmp_path)


def test_one_partition_output_equals_the_file_job_line_for_line(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    svc = service(partitions=1, SGM_MAX_BATCH_DELAY_MS="10000")
    records = stream_records(3000, seed=1)
    produce(svc.bootstrap, svc.input, records)
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input)
    wait_ready(svc)
    assert svc.stop() == 0, svc.log_text()
    out = read_topic(svc.bootstrap, svc.output)
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    queries = tmp_path / "q.q"
    queries.write_text(QUERIES)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "run",
            "-q",
            str(queries),
            "--edges",
            str(path),
            "--undirected",
            "--quiet",
            "-b",
            "200",
        ],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    assert [value for _, value, _ in out] == done.stdout.splitlines()
    key, value, headers = out[0]
    row = json.loads(value)
    assert json.loads(key) == [row["query"], list(row["match"].values())]
    assert headers == {}, "a records-format delta carries no headers: its value says it all"


def test_partitioned_input_gives_the_engine_result_exactly_once(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    svc = service(partitions=3)
    records = stream_records(4000, seed=2)
    produce(svc.bootstrap, svc.input, records[:2000])
    svc.start()
    produce(svc.bootstrap, svc.input, records[2000:])
    wait_consumed(svc.bootstrap, svc.group, svc.input)
    wait_ready(svc)
    assert svc.stop() == 0, svc.log_text()
    got = check_exactly_once(deltas(read_topic(svc.bootstrap, svc.output)))
    assert got == expected_matches(records, tmp_path)
    assert "epoch committed" in svc.log_text()


def produce_slowly(
    bootstrap: str,
    topic: str,
    records: list[dict[str, object]],
    chunk: int = 150,
    pause: float = 0.15,
) -> threading.Thread:
    """Produce in the background, a chunk at a time, so that the stream outlasts the kills."""

    def run() -> None:
        for lo in range(0, len(records), chunk):
            produce(bootstrap, topic, records[lo : lo + chunk])
            time.sleep(pause)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait_ready(svc: Service, timeout: float = 60) -> None:
    port = _port_from_log(svc)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("the service did not become ready:\n" + svc.log_text())


#: The outputs the exactly-once tests run with: ``SGM_OUTPUT_FORMAT`` and, for ``arrow``,
#: batches encoded as Arrow.
OUTPUTS = {
    "records": {"SGM_OUTPUT_FORMAT": "records"},
    "batches": {"SGM_OUTPUT_FORMAT": "batches"},
    "arrow": {"SGM_OUTPUT_FORMAT": "batches", "SGM_BATCH_ENCODING": "arrow"},
}


def published(svc: Service, output_format: str) -> list[dict[str, object]]:
    """The deltas the service published (committed), read with the package's reader; every
    record of the ``batches`` and ``arrow`` outputs is a batch of the encoding asked for."""
    deltas_read: list[dict[str, object]] = []
    for _, value, headers in read_topic(svc.bootstrap, svc.output):
        pairs = list(headers.items())
        assert (batch_info(pairs) is not None) == (output_format != "records"), headers
        if output_format != "records":
            expected = b"arrow" if output_format == "arrow" else b"jsonl"
            assert dict(pairs)["format"] == expected, headers
        deltas_read.extend(read_deltas(value, pairs))
    return deltas_read


def test_a_lost_state_directory_is_rebuilt_from_the_input_and_numbered_on(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    """The state directory lost between runs (a new volume): the service rebuilds the state
    from the start of its input, emitting nothing up to what the group committed, and numbers
    its epochs on from the epoch Kafka recorded with the offsets, never back."""
    svc = service(partitions=2, SGM_BATCH_SIZE="200", SGM_MAX_BATCH_DELAY_MS="10000")
    records = stream_records(3000, seed=49)
    produce(svc.bootstrap, svc.input, records[:1600])
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    assert svc.stop() == 0, svc.log_text()
    shutil.rmtree(svc.tmp / "state")
    produce(svc.bootstrap, svc.input, records[1600:])
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    assert svc.stop() == 0, svc.log_text()
    assert "caught up without emitting" in svc.logs[-1].read_text(), svc.log_text()
    rows = deltas(read_topic(svc.bootstrap, svc.output))
    assert check_exactly_once(rows) == expected_matches(records, tmp_path)
    first_run = max(int(r["epoch"]) for r in log_records_of(svc.logs[0], "epoch committed"))
    assert min(int(r["epoch"]) for r in log_records_of(svc.logs[1], "epoch committed")) > first_run


def log_records_of(path: Path, message: str) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")]
    return [r for r in lines if r["message"] == message]


@pytest.mark.parametrize("output_format", ["records", "batches", "arrow"])
def test_sigkill_at_random_moments_loses_and_duplicates_nothing(
    service: Callable[..., Service], tmp_path: Path, output_format: str
) -> None:
    svc = service(
        partitions=3,
        SGM_BATCH_SIZE="100",
        SGM_MAX_BATCH_DELAY_MS="100",
        **OUTPUTS[output_format],
    )
    records = stream_records(6000, seed={"records": 3, "batches": 23, "arrow": 33}[output_format])
    producing = produce_slowly(svc.bootstrap, svc.input, records)
    rng = np.random.default_rng(4)
    kills = 0
    while producing.is_alive():
        svc.start()
        time.sleep(float(rng.uniform(1.5, 3.5)))
        svc.stop(signal.SIGKILL)
        kills += 1
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, timeout=180, svc=svc)
    wait_ready(svc)
    assert svc.stop() == 0, svc.log_text()
    assert kills >= 3
    got = check_exactly_once(published(svc, output_format))
    assert got == expected_matches(records, tmp_path)


@pytest.mark.parametrize("output_format", ["records", "batches", "arrow"])
def test_killed_between_the_kafka_commit_and_the_store_write_catches_up_silently(
    service: Callable[..., Service], tmp_path: Path, output_format: str
) -> None:
    svc = service(
        partitions=3,
        SGM_BATCH_SIZE="100",
        SGM_MAX_BATCH_DELAY_MS="100",
        **OUTPUTS[output_format],
        SGM_FAILPOINT="serve_after_kafka_commit",
        SGM_FAILPOINT_HIT="7",
    )
    records = stream_records(3000, seed=10 if output_format == "records" else 22)
    produce(svc.bootstrap, svc.input, records)
    killed = svc.start()
    assert killed.wait(timeout=120) == -signal.SIGKILL, svc.log_text()
    # Kafka alone says which epoch committed last: the 7th, whose store write never happened.
    partitions = [0, 1, 2]
    epochs = committed_metadata(svc.bootstrap, svc.group, svc.input, partitions)
    assert max(int(m.removeprefix("epoch=")) for m in epochs.values() if m) == 7, epochs
    assert max(r["epoch"] for r in log_records(svc, "epoch committed")) == 6
    svc.env.pop("SGM_FAILPOINT")
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, timeout=120, svc=svc)
    wait_ready(svc)
    assert svc.stop() == 0, svc.log_text()
    assert "caught up without emitting" in svc.log_text()
    assigned = log_records(svc, "partition assigned")[-len(partitions) :]  # (the restart's)
    assert max(r["committed_epoch"] or 0 for r in assigned) == 7, assigned
    # Each partition's offset carries the last epoch that consumed from it.
    last: dict[int, int] = {}
    for record in log_records(svc, "epoch committed"):
        for key in record["offsets"]:
            last[int(key.rsplit(":", 1)[1])] = record["epoch"]
    after = committed_metadata(svc.bootstrap, svc.group, svc.input, partitions)
    assert after == {p: f"epoch={last[p]}" for p in partitions}
    got = check_exactly_once(published(svc, output_format))
    assert got == expected_matches(records, tmp_path)


@pytest.mark.parametrize("hit", [1, 2])
def test_a_failed_transaction_reads_its_epoch_and_what_was_read_ahead_again(
    service: Callable[..., Service], tmp_path: Path, hit: int
) -> None:
    """The n-th epoch's transaction fails after the next epoch's records were read ahead
    (:mod:`monitor.service.prefetch`): the epoch is aborted, and both it and the records read
    ahead of it are read again, from partitions of either; epochs of 1,200 records over three
    partitions of 1,000, so that the two polls take different partitions. The first epoch
    (``hit`` 1) reads partitions with no stored position yet."""
    svc = service(
        partitions=3,
        SGM_BATCH_SIZE="1200",
        SGM_MAX_BATCH_DELAY_MS="200",
        SGM_FAILPOINT="serve_before_kafka_commit",
        SGM_FAILPOINT_ACTION="raise",
        SGM_FAILPOINT_HIT=str(hit),
    )
    records = stream_records(3000, seed=30 + hit)
    produce(svc.bootstrap, svc.input, records)
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, timeout=120, svc=svc)
    wait_ready(svc)
    assert svc.stop() == 0, svc.log_text()
    assert svc.log_text().count("epoch aborted; reading it again") == 1, svc.log_text()
    got = check_exactly_once(published(svc, "records"))
    assert got == expected_matches(records, tmp_path)


def test_broker_restart_mid_stream_loses_and_duplicates_nothing(
    kafka: KafkaCluster, service: Callable[..., Service], tmp_path: Path
) -> None:
    if kafka.broker is None:
        pytest.skip("the broker is not ours to restart (external cluster or container)")
    # (librdkafka may stay stuck in the transaction the restart cut: the watchdog ends the
    # service after SGM_WATCHDOG_SECONDS, shortened with the transaction time-out, and its
    # supervisor, the fixture, restarts it)
    svc = service(
        partitions=3,
        SGM_BATCH_SIZE="100",
        SGM_MAX_BATCH_DELAY_MS="100",
        SGM_TRANSACTION_TIMEOUT_MS="10000",
        SGM_WATCHDOG_SECONDS="20",
    )
    records = stream_records(5000, seed=5)
    producing = produce_slowly(svc.bootstrap, svc.input, records[:2500])
    svc.start()
    producing.join()
    kafka.broker.stop()
    time.sleep(3.0)
    kafka.broker.start()
    produce(svc.bootstrap, svc.input, records[2500:])
    wait_consumed(svc.bootstrap, svc.group, svc.input, timeout=240, svc=svc)
    wait_ready(svc)
    assert svc.stop() == 0, svc.log_text()
    got = check_exactly_once(deltas(read_topic(svc.bootstrap, svc.output)))
    assert got == expected_matches(records, tmp_path)
    if svc.restarts:
        assert "stuck in Kafka" in svc.log_text()


GARBAGE: list[bytes] = [
    b"not json at all",
    b"\xff\xfe\x00garbage",
    b"[1, 2, 3]",
    b'{"op": "upsert", "src": 1, "dst": 2}',
    b'{"src": 1}',
    b'{"src": 1.5, "dst": 2}',
    b'{"src": true, "dst": 2}',
    b'{"src": 99999999999999999999999, "dst": 2}',
    b'{"src": 1, "dst": 2, "relation": "bad relation!"}',
    b'{"tuple": [], "relation": "r"}',
    b"{" * 10_000,
    b'{"src": "' + b"x" * 500_000 + b'", "dst": 1}',
    b'{"src": 1, "dst": 2, "relation": "' + b"r" * 300_000 + b'"}',
]


def test_garbage_records_land_in_the_dead_letter_topic_and_change_nothing(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    svc = service(partitions=1, SGM_MAX_BATCH_DELAY_MS="10000")
    records = stream_records(1000, seed=6)
    rng = np.random.default_rng(7)
    fuzz = [
        bytes(rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8)) for _ in range(30)
    ]
    bad = GARBAGE + fuzz
    mixed = [json.dumps(r).encode() for r in records]
    for value in bad:
        mixed.insert(int(rng.integers(0, len(mixed) + 1)), value)
    producer = Producer({"bootstrap.servers": svc.bootstrap})
    for value in mixed:
        producer.produce(svc.input, value=value)
    assert producer.flush(30) == 0
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input)
    port = _port_from_log(svc)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    assert svc.stop() == 0, svc.log_text()
    dead = read_topic(svc.bootstrap, svc.dead)
    good = [v for v in mixed if _is_update(v)]
    assert len(dead) == len(mixed) - len(good)
    for _, value, headers in dead:
        assert not _is_update(value)
        assert headers["source-topic"] == svc.input.encode() and headers["reason"]
        assert int(headers["source-offset"]) >= 0 and headers["source-partition"] == b"0"
    got = check_exactly_once(deltas(read_topic(svc.bootstrap, svc.output)))
    assert got == expected_matches(records, tmp_path)
    assert b"subgraph_monitor_dead_letters_total" in metrics


def _is_update(value: bytes) -> bool:
    from connectors.formats import decode_json_record
    from core.errors import InputError

    try:
        decode_json_record(value)
    except InputError:
        return False
    return len(value) <= 1 << 20


def _port_from_log(svc: Service, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in svc.logs[-1].read_text(errors="replace").splitlines():
            if "serving /metrics" in line:
                return int(json.loads(line)["port"])
        time.sleep(0.2)
    raise AssertionError("the service did not log its HTTP port:\n" + svc.log_text())


def test_metrics_and_health_during_a_run(service: Callable[..., Service]) -> None:
    svc = service(partitions=2)
    produce(svc.bootstrap, svc.input, stream_records(1500, seed=8))
    svc.start()
    port = _port_from_log(svc)
    wait_consumed(svc.bootstrap, svc.group, svc.input)
    base = f"http://127.0.0.1:{port}"
    assert urllib.request.urlopen(f"{base}/healthz", timeout=10).status == 200
    ready = json.loads(urllib.request.urlopen(f"{base}/readyz", timeout=10).read())
    assert ready["ready"] is True
    text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
    for name in (
        "updates_consumed_total",
        "match_deltas_total",
        "epoch_duration_seconds",
        "last_committed_epoch",
        "index_edges",
        "build_info",
    ):
        assert f"subgraph_monitor_{name}" in text, name
    assert svc.stop() == 0, svc.log_text()


def test_a_second_instance_in_the_group_is_refused(service: Callable[..., Service]) -> None:
    svc = service(partitions=1)
    produce(svc.bootstrap, svc.input, stream_records(200, seed=9))
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input)
    second = subprocess.run(
        [sys.executable, "-m", "monitor", "serve"],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        env={**svc.env, "SGM_STATE_DIR": str(svc.tmp / "state2"), "SGM_INSTANCE_ID": "other"},
    )
    assert second.returncode == 2
    assert b"already has 1 other member" in second.stderr
    assert svc.proc is not None and svc.proc.poll() is None
    assert svc.stop() == 0


def log_records(svc: Service, message: str) -> list[dict[str, Any]]:
    """The service's JSON log records with ``message``."""
    lines = [line for line in svc.log_text().splitlines() if line.startswith("{")]
    return [r for r in map(json.loads, lines) if r.get("message") == message]


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_a_new_group_starts_where_auto_offset_reset_says(
    service: Callable[..., Service], reset: str
) -> None:
    """A partition with no stored position and no committed offset is assigned at the start
    or the end (``auto.offset.reset``, earliest by default, ``latest`` through ``SGM_KAFKA``)
    explicitly, so that it is fetched at once: with ``latest``, only what comes after."""
    env = {"SGM_KAFKA": json.dumps({"auto.offset.reset": reset})} if reset == "latest" else {}
    svc = service(partitions=2, **env)
    before, after = stream_records(300, seed=31), stream_records(120, seed=32)
    produce(svc.bootstrap, svc.input, before)
    svc.start()
    deadline = time.monotonic() + 60
    while len(log_records(svc, "partition assigned")) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assigned = log_records(svc, "partition assigned")
    starts = {OFFSET_BEGINNING if reset == "earliest" else OFFSET_END}
    assert {r["offset"] for r in assigned} == starts and len(assigned) == 2, svc.log_text()
    time.sleep(2)  # the end is looked up right after the assignment: produce after that
    produce(svc.bootstrap, svc.input, after)
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    assert svc.stop() == 0, svc.log_text()
    applied = sum(int(r["updates"]) for r in log_records(svc, "epoch committed"))
    assert applied == len(after) + (len(before) if reset == "earliest" else 0)
