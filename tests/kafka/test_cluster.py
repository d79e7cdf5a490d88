"""Scale-out against a real broker: several ``serve`` workers in one group, one exact result.

The workers run as subprocesses sharing the input, output, control and changelog topics and the
consumer group, each with its own state directory and instance id. The check is epoch by epoch:
the control topic says what each epoch contained; replaying those epochs through one in-process
:class:`EpochProcessor` (the single worker) gives each epoch's consolidated deltas, and the
workers' output must be exactly that, record for record: no binding twice in an epoch, and read
key by key in offset order (as a keyed consumer reads it) every binding's running sum stays in
{0, 1}. The output is read only once every transaction on it is resolved (a killed worker's open
one aborted), to its end. The final result is also checked against the file job over the same
records (an independent run of the engine).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, IsolationLevel, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from connectors.batches import batch_info, read_message
from monitor.query.load import load_queries
from monitor.service.cluster.control import EpochSpec
from monitor.service.cluster.epoch_input import decode_epoch
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.kafka.test_serve import (
    QUERIES,
    check_exactly_once,
    committed,
    end_offsets,
    expected_matches,
    produce,
    stream_records,
)
from tests.kafka_broker import KafkaCluster

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
Binding = tuple[str, tuple[object, ...]]


class Workers:
    """Topics, group and worker processes of one scale-out deployment."""

    def __init__(self, kafka: KafkaCluster, make_topic: Callable[..., str], tmp: Path) -> None:
        self.bootstrap = kafka.bootstrap
        self.input = make_topic(6)
        self.output = make_topic(1, prefix="sgm-out")
        self.dead = make_topic(1, prefix="sgm-dlq")
        self.group = f"sgm-{uuid.uuid4().hex[:8]}"
        self.control = f"{self.group}-control"
        #: What the workers' seed transactions write: the output and the changelog.
        self.written = (self.output, f"{self.group}-changelog")
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "queries.q").write_text(QUERIES)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def start(self, name: str, **extra: str) -> None:
        env = {
            **os.environ,
            "SGM_BOOTSTRAP_SERVERS": self.bootstrap,
            "SGM_INPUT_TOPICS": self.input,
            "SGM_OUTPUT_TOPIC": self.output,
            "SGM_DEAD_LETTER_TOPIC": self.dead,
            "SGM_GROUP_ID": self.group,
            "SGM_CONTROL_TOPIC": self.control,
            "SGM_INSTANCE_ID": name,
            "SGM_QUERIES": str(self.tmp / "queries.q"),
            "SGM_STATE_DIR": str(self.tmp / name / "state"),
            "SGM_UNDIRECTED": "true",
            "SGM_HTTP_PORT": "0",
            "SGM_BATCH_SIZE": "300",
            "SGM_MAX_BATCH_DELAY_MS": "300",
            "SGM_KAFKA": json.dumps({"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}),
            **extra,
        }
        log = self.tmp / f"{name}-{len(self.logs)}.log"
        self.logs[name] = log
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "monitor", "serve"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )

    def stop(self, name: str, sig: int = signal.SIGTERM) -> int:
        proc = self.procs.pop(name)
        proc.send_signal(sig)
        return proc.wait(timeout=60)

    def feed_until_killed(
        self,
        name: str,
        records: list[Any],
        send: Callable[[str, str, list[Any]], None] = produce,
    ) -> int:
        """Produce ``records`` a wave at a time, giving ``name`` (started with a failpoint) time
        to join the group and reach it between waves, so that the failpoint's hit comes however
        slow the machine; returns how it ended. Every wave is produced either way."""
        dying = self.procs.pop(name)
        self.wait_log_of(dying, name, "partitions assigned")
        for lo in range(0, len(records), 150):
            send(self.bootstrap, self.input, records[lo : lo + 150])
            with contextlib.suppress(subprocess.TimeoutExpired):
                dying.wait(timeout=2.0)
        return dying.wait(timeout=120)

    def wait_log_of(self, proc: subprocess.Popen[bytes], name: str, text: str) -> None:
        """``wait_log`` that gives up at once when the process has already ended."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if text in self.logs[name].read_text(errors="replace"):
                return
            time.sleep(0.2)

    def log_text(self) -> str:
        return "\n".join(
            f"== {n}\n{p.read_text(errors='replace')[-4000:]}" for n, p in self.logs.items()
        )

    def leader(self) -> str:
        """The worker that published the last epoch."""
        return control_epochs(self)[-1].leader

    def wait_consumed(self, timeout: float = 180) -> None:
        ends = end_offsets(self.bootstrap, self.input)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                assert proc.poll() is None, f"worker {name} exited\n{self.log_text()}"
            if committed(self.bootstrap, self.group, self.input, list(ends)) == ends:
                return
            time.sleep(0.5)
        raise AssertionError(f"not consumed to {ends}\n{self.log_text()}")

    def wait_log(self, name: str, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.logs[name].read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise AssertionError(f"{name} never logged {text!r}\n{self.log_text()}")


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[Message]]:
    """Every committed record of ``topic``, per partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    ends = {}
    for p in range(partitions):
        ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[Message]] = defaultdict(list)
    deadline = time.monotonic() + 60
    while True:
        for m in consumer.consume(1000, timeout=0.5):
            if m.error() is None:
                out[m.partition() or 0].append(m)
        positions = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
        if all(tp.offset >= ends[tp.partition] for tp in positions):
            break
        assert time.monotonic() < deadline, f"{topic} not read to its end {ends}: {positions}"
    consumer.close()
    return out


def last_stable_lag(bootstrap: str, *topics: str) -> int:
    """How many offsets of ``topics`` lie past their last stable offset (in open
    transactions)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    lag = 0
    for topic in topics:
        lag += _lag(admin, topic)
    return lag


def _lag(admin: AdminClient, topic: str) -> int:
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    lag = 0
    for p in meta.partitions:
        tp = {TopicPartition(topic, p): OffsetSpec.latest()}  # type: ignore[no-untyped-call]
        stable = admin.list_offsets(tp, isolation_level=IsolationLevel.READ_COMMITTED)
        high = admin.list_offsets(tp, isolation_level=IsolationLevel.READ_UNCOMMITTED)
        lag += high[TopicPartition(topic, p)].result().offset
        lag -= stable[TopicPartition(topic, p)].result().offset
    return lag


def wait_resolved(w: Workers, timeout: float) -> float:
    """Wait until no transaction on the output or the changelog is open (read_committed
    readers see their ends); returns the seconds waited."""
    started = time.monotonic()
    while last_stable_lag(w.bootstrap, *w.written):
        assert time.monotonic() - started < timeout, (
            f"{w.written} still have open transactions after {timeout} s\n{w.log_text()}"
        )
        time.sleep(0.5)
    return time.monotonic() - started


def output_rows(w: Workers) -> list[dict[str, object]]:
    """The whole output in offset order (the deltas of a batch in its order), read once every
    transaction on it is resolved."""
    wait_resolved(w, timeout=90)
    messages = read_all(w.bootstrap, w.output, 1)[0]
    offsets = [m.offset() or 0 for m in messages]
    assert offsets == sorted(offsets)
    return [delta for m in messages for delta in read_message(m)]


def check_transitions(rows: list[dict[str, object]]) -> None:
    """Every record is a real transition: no binding twice in one epoch, and every binding's
    running sum, record by record in offset order, stays in {0, 1}."""
    per_epoch: Counter[tuple[int, Binding]] = Counter(
        (int(r["epoch"]), (str(r["query"]), tuple(r["match"].values())))  # type: ignore[call-overload, attr-defined]
        for r in rows
    )
    assert not per_epoch or max(per_epoch.values()) == 1, "a binding published twice in an epoch"
    check_exactly_once(rows)


def control_epochs(w: Workers) -> list[EpochSpec]:
    messages = read_all(w.bootstrap, w.control, 1)[0]
    specs = [EpochSpec.from_json(m.value() or b"", m.offset() or 0) for m in messages]
    numbers = [s.epoch for s in specs]
    assert numbers == list(range(1, len(specs) + 1)), f"epochs published: {numbers}"
    for before, after in itertools.pairwise(specs):
        assert after.starts == before.ends, (
            f"epoch {after.epoch} does not start where {before.epoch} ended"
        )
    return specs


def single_worker_deltas(w: Workers, specs: list[EpochSpec]) -> dict[int, dict[Binding, int]]:
    """The single worker's consolidated deltas of every epoch, from the control topic."""
    records = read_all(w.bootstrap, w.input, 6)
    settings = Settings(undirected=True, max_batch_delay_ms=300, batch_size=300)
    processor = EpochProcessor(load_queries(str(w.tmp / "queries.q")), settings)
    out: dict[int, dict[Binding, int]] = {}
    for spec in specs:
        messages = {
            (t, p): [m for m in records[p] if spec.starts[(t, p)] <= (m.offset() or 0) < e]
            for (t, p), e in spec.ends.items()
        }
        epoch = processor.process(decode_epoch(messages, settings).batch)
        processor.commit()
        deltas: dict[Binding, int] = {}
        for q in epoch.queries:
            for i, diff in enumerate(q.diff.tolist()):
                deltas[(q.query, tuple(c[i] for c in q.columns))] = diff
        out[spec.epoch] = deltas
    return out


def workers_deltas(rows: list[dict[str, object]]) -> dict[int, dict[Binding, int]]:
    """The workers' output, summed per epoch and binding (zeros dropped)."""
    sums: dict[int, Counter[Binding]] = defaultdict(Counter)
    for row in rows:
        key = (str(row["query"]), tuple(row["match"].values()))  # type: ignore[attr-defined]
        sums[int(row["epoch"])][key] += int(row["diff"])  # type: ignore[call-overload]
    return {e: {k: v for k, v in c.items() if v} for e, c in sums.items()}


def check_exact(w: Workers, records: list[dict[str, object]], *, transitions: bool = True) -> None:
    rows = output_rows(w)
    if transitions:
        check_transitions(rows)
    specs = control_epochs(w)
    expected = single_worker_deltas(w, specs)
    got = workers_deltas(rows)
    for epoch in sorted(set(expected) | set(got)):
        assert got.get(epoch, {}) == expected.get(epoch, {}), f"epoch {epoch} differs"
    final: Counter[Binding] = Counter()
    for deltas in got.values():
        final.update(deltas)
    oracle = w.tmp / "oracle"
    oracle.mkdir(exist_ok=True)
    assert {k: v for k, v in final.items() if v} == expected_matches(records, oracle)


def test_three_workers_on_six_partitions_equal_the_single_worker(workers: Workers) -> None:
    records = stream_records(6000, seed=11)
    produce(workers.bootstrap, workers.input, records[:2000])
    for name in ("w0", "w1", "w2"):
        workers.start(name)
    for wave in range(2000, 6000, 1000):
        produce(workers.bootstrap, workers.input, records[wave : wave + 1000])
        time.sleep(0.5)
    workers.wait_consumed()
    seeded = {n: workers.logs[n].read_text().count('"seeds published"') for n in workers.procs}
    for name in list(workers.procs):
        assert workers.stop(name) == 0, workers.log_text()
    assert all(seeded.values()), f"every worker seeded some epochs: {seeded}"
    check_exact(workers, records)


def test_a_worker_killed_and_another_added_stays_exact(workers: Workers) -> None:
    """w1 dies inside a transaction and never comes back: the broker aborts its transaction
    after SGM_TRANSACTION_TIMEOUT_MS, readers then go on, and none of it is delivered. w2, on a
    new volume, starts while that transaction is still open below the records w0 commits after
    it: its rebuild waits for the abort (read before it, the changelog ends at the open
    transaction and the state misses every later epoch's records)."""
    records = stream_records(6000, seed=12)
    produce(workers.bootstrap, workers.input, records[:1500])
    workers.start("w0")
    # w1 is SIGKILLed inside its 4th seed transaction (deltas produced, offsets not committed)
    workers.start(
        "w1",
        SGM_FAILPOINT="worker_before_commit",
        SGM_FAILPOINT_HIT="4",
        SGM_TRANSACTION_TIMEOUT_MS="30000",  # (open for 30-40 s: w2 starts well within)
    )
    ended = workers.feed_until_killed("w1", records[1500:3000])
    assert ended == -signal.SIGKILL, workers.log_text()
    produce(workers.bootstrap, workers.input, records[3000:4500])
    workers.wait_consumed()  # w0 took w1's partitions and committed epochs past the open one
    assert last_stable_lag(workers.bootstrap, *workers.written) > 0, "no open transaction left"
    workers.start("w2")  # a new volume: rebuilt from the changelog
    workers.wait_log("w2", "state rebuilt from the changelog")
    workers.wait_log("w2", "waiting for open transactions on the changelog")
    produce(workers.bootstrap, workers.input, records[4500:])
    workers.wait_consumed()
    for name in list(workers.procs):
        assert workers.stop(name) == 0, workers.log_text()
    check_exact(workers, records)


def test_a_worker_restarted_under_its_name_releases_the_readers_at_once(workers: Workers) -> None:
    """w1 dies inside a transaction whose time-out is 15 minutes: read_committed readers stop
    at it (records exist past the last stable offset) until w1 starts again under its instance
    id, whose producer aborts it at once; then the output is exact and every record a real
    transition."""
    records = stream_records(4000, seed=16)
    produce(workers.bootstrap, workers.input, records[:1500])
    workers.start("w0")
    workers.start(
        "w1",
        SGM_FAILPOINT="worker_before_commit",
        SGM_FAILPOINT_HIT="3",
        SGM_TRANSACTION_TIMEOUT_MS="900000",
    )
    ended = workers.feed_until_killed("w1", records[1500:2500])
    assert ended == -signal.SIGKILL, workers.log_text()
    time.sleep(2.0)
    assert last_stable_lag(workers.bootstrap, *workers.written) > 0, "readers are not blocked"
    workers.start("w1", SGM_TRANSACTION_TIMEOUT_MS="900000")  # same id, same volume
    produce(workers.bootstrap, workers.input, records[2500:])
    workers.wait_consumed()
    waited = wait_resolved(workers, timeout=120)  # far below 15 minutes
    for name in list(workers.procs):
        assert workers.stop(name) == 0, workers.log_text()
    assert waited < 120
    check_exact(workers, records)


def test_leader_killed_during_an_epoch_a_new_leader_continues(workers: Workers) -> None:
    records = stream_records(5000, seed=13)
    produce(workers.bootstrap, workers.input, records[:1500])
    # w0 leads first and is SIGKILLed inside its 6th epoch transaction (the control record
    # produced, not committed); the next leader's init_transactions aborts it.
    workers.start("w0", SGM_FAILPOINT="leader_before_commit", SGM_FAILPOINT_HIT="6")
    workers.wait_log("w0", "leading: publishing the epochs")
    workers.start("w1")
    workers.start("w2")
    ended = workers.feed_until_killed("w0", records[1500:3000])
    assert ended == -signal.SIGKILL, workers.log_text()
    leader = "w0"
    produce(workers.bootstrap, workers.input, records[3000:])
    workers.wait_consumed()
    new_leader = workers.leader()
    assert new_leader in ("w1", "w2"), workers.log_text()
    for name in list(workers.procs):
        assert workers.stop(name) == 0, workers.log_text()
    specs = control_epochs(workers)  # consecutive and unique: none published twice
    assert {s.leader for s in specs} >= {leader, new_leader}
    check_exact(workers, records)


def test_a_restarted_leader_numbers_on_from_its_stored_epoch(workers: Workers) -> None:
    """A worker restarted on its volume reads the control topic from its stored position, past
    every epoch already published; leading again, it continues the numbering and the offsets
    from the epoch it applied last, never from epoch 1 and the earliest offsets."""
    records = stream_records(3000, seed=17)
    produce(workers.bootstrap, workers.input, records[:1500])
    workers.start("w0")
    workers.wait_consumed()
    before = len(control_epochs(workers))
    assert workers.stop("w0") == 0, workers.log_text()
    workers.start("w0")
    workers.wait_log("w0", "leading: publishing the epochs")
    produce(workers.bootstrap, workers.input, records[1500:])
    workers.wait_consumed()
    assert workers.stop("w0") == 0, workers.log_text()
    specs = control_epochs(workers)  # consecutive, each starting where the last ended
    assert len(specs) > before
    check_exact(workers, records)


def test_batches_from_workers_one_killed_and_restarted_equal_the_single_worker(
    workers: Workers,
) -> None:
    """SGM_OUTPUT_FORMAT=batches: each worker publishes one record per query and epoch with the
    deltas its seeds decided; w1 dies inside a transaction and comes back under its name. The
    batches of every epoch, decoded, are the single worker's deltas, each binding in one of
    them, and every record of a binding a real transition."""
    records = stream_records(5000, seed=18)
    produce(workers.bootstrap, workers.input, records[:1500])
    batches = {"SGM_OUTPUT_FORMAT": "batches"}
    workers.start("w0", **batches)
    workers.start("w1", **batches, SGM_FAILPOINT="worker_before_commit", SGM_FAILPOINT_HIT="3")
    workers.start("w2", **batches)
    ended = workers.feed_until_killed("w1", records[1500:3000])
    assert ended == -signal.SIGKILL, workers.log_text()
    workers.start("w1", **batches)
    produce(workers.bootstrap, workers.input, records[3000:])
    workers.wait_consumed()
    for name in list(workers.procs):
        assert workers.stop(name) == 0, workers.log_text()
    check_exact(workers, records)
    messages = read_all(workers.bootstrap, workers.output, 1)[0]
    per_epoch: Counter[tuple[str, int]] = Counter()
    for m in messages:
        info = batch_info(m.headers())
        assert info is not None and info.count == len(read_message(m))
        per_epoch[(info.query, info.epoch)] += 1
    assert max(per_epoch.values()) > 1, "some epochs came from more than one worker"


def test_unconsolidated_opt_in_is_exact_summed_per_epoch(workers: Workers) -> None:
    """SGM_CONSOLIDATE_ACROSS_WORKERS=false publishes each worker's own sum: summed per epoch
    and binding the output is the single worker's (records need not be transitions)."""
    records = stream_records(5000, seed=14)
    produce(workers.bootstrap, workers.input, records[:2000])
    for name in ("w0", "w1", "w2"):
        workers.start(name, SGM_CONSOLIDATE_ACROSS_WORKERS="false")
    produce(workers.bootstrap, workers.input, records[2000:])
    workers.wait_consumed()
    for name in list(workers.procs):
        assert workers.stop(name) == 0, workers.log_text()
    check_exact(workers, records, transitions=False)


def test_a_state_older_than_the_input_retention_is_refused(workers: Workers) -> None:
    records = stream_records(1200, seed=15)
    produce(workers.bootstrap, workers.input, records[:600])
    workers.start("w0")
    workers.wait_consumed()
    assert workers.stop("w0") == 0, workers.log_text()
    produce(workers.bootstrap, workers.input, records[600:])
    admin = AdminClient({"bootstrap.servers": workers.bootstrap})
    ends = end_offsets(workers.bootstrap, workers.input)
    gone = [TopicPartition(workers.input, p, o) for p, o in ends.items()]
    for future in admin.delete_records(gone).values():
        future.result(timeout=30)  # as retention would: the records after the state are gone
    workers.start("w0")
    proc = workers.procs.pop("w0")
    assert proc.wait(timeout=120) == 4, workers.log_text()
    assert "cannot catch up from the input" in workers.logs["w0"].read_text()
