"""The broker the tests get is a real Kafka that does what exactly-once output needs.

Topics made with the AdminClient; a consume-transform-produce loop with a transactional producer
that commits the consumer group's offsets inside its transactions (one aborted); readers with
``isolation.level=read_committed`` see exactly the committed records; a zombie producer is fenced;
a consumer group resumes from its commit; the committed data outlives a clean stop and a SIGKILL of
the broker (local broker only); ``scripts/kafka-local up|status|down`` work.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from tests.kafka_broker import KafkaCluster, fetch_metadata

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0


# --------------------------------------------------------------------------------------------
# helpers


def _producer(bootstrap: str, **config: str | int | bool) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})


def _consumer(bootstrap: str, group: str, **config: str | int | bool) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **config,
        }
    )


def _produce_plain(bootstrap: str, topic: str, keys: Iterable[str]) -> None:
    producer = _producer(bootstrap, acks="all", **{"enable.idempotence": True})
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err)

    for key in keys:
        producer.produce(topic, key=key, value=f"in:{key}", on_delivery=on_delivery)
    assert producer.flush(TIMEOUT) == 0
    assert errors == []


def _poll(consumer: Consumer, count: int, timeout: float = TIMEOUT) -> list[Message]:
    """Exactly `count` records from a subscribed consumer (fails on errors or a time-out)."""
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=count - len(out), timeout=0.5):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(err)
            out.append(msg)
    assert len(out) == count, f"got {len(out)} of {count} records in {timeout:.0f}s"
    return out


def _read_all(
    bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed"
) -> list[str]:
    """Every value in the topic that a reader with this isolation level sees, up to the end."""
    options: dict[str, str | int | bool] = {
        "isolation.level": isolation,
        "enable.partition.eof": True,
    }
    consumer = _consumer(bootstrap, f"reader-{uuid.uuid4().hex}", **options)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[str] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition() or 0)
                    continue
                raise KafkaException(err)
            value = msg.value()
            assert isinstance(value, bytes)
            values.append(value.decode())
    finally:
        consumer.close()
    assert len(at_end) == partitions, f"reached the end of {sorted(at_end)} of {partitions}"
    return values


def _next_offsets(messages: Iterable[Message]) -> dict[tuple[str, int], int]:
    """Per partition, the offset after the last of these records (what a commit stores)."""
    out: dict[tuple[str, int], int] = {}
    for msg in messages:
        key = (msg.topic() or "", msg.partition() or 0)
        out[key] = max(out.get(key, 0), (msg.offset() or 0) + 1)
    return out


def _as_partitions(offsets: dict[tuple[str, int], int]) -> list[TopicPartition]:
    return [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]


def _committed(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[tuple[str, int], int]:
    """The group's committed offsets (partitions without a commit left out)."""
    consumer = _consumer(bootstrap, group)
    try:
        parts = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT
        )
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in parts if tp.offset >= 0}


def _transform(
    producer: Producer, consumer: Consumer, records: list[Message], out: str, tag: str
) -> None:
    """One epoch of the design's loop: produce the outputs, commit the input offsets with them."""
    producer.begin_transaction()
    for msg in records:
        key = msg.key()
        assert isinstance(key, bytes)
        producer.produce(out, key=key, value=f"{tag}:{key.decode()}")
    producer.send_offsets_to_transaction(
        _as_partitions(_next_offsets(records)), consumer.consumer_group_metadata(), TIMEOUT
    )


def _key(msg: Message) -> str:
    key = msg.key()
    assert isinstance(key, bytes)
    return key.decode()


# --------------------------------------------------------------------------------------------
# tests


def test_admin_client_creates_a_topic_with_three_partitions(
    kafka: KafkaCluster, make_topic: Callable[..., str]
) -> None:
    name = make_topic(partitions=3)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    meta = admin.list_topics(topic=name, timeout=TIMEOUT).topics[name]
    assert meta.error is None
    assert sorted(meta.partitions) == [0, 1, 2]
    assert all(p.leader >= 0 and p.replicas for p in meta.partitions.values())
    if kafka.broker is not None:  # the local broker: one node, loopback only
        cluster = admin.list_topics(timeout=TIMEOUT)
        brokers = [(b.id, str(b.host), b.port) for b in cluster.brokers.values()]
        assert brokers == [(1, "127.0.0.1", kafka.broker.port)]


def test_transactions_read_committed_sees_exactly_the_committed_records(
    kafka: KafkaCluster, make_topic: Callable[..., str]
) -> None:
    inp, out = make_topic(partitions=3), make_topic(partitions=3)
    keys = [f"k{i:02d}" for i in range(30)]
    _produce_plain(kafka.bootstrap, inp, keys)
    group = f"eos-{uuid.uuid4().hex}"
    producer = _producer(kafka.bootstrap, **{"transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(TIMEOUT)

    consumer = _consumer(kafka.bootstrap, group)
    consumer.subscribe([inp])
    first = _poll(consumer, 10)
    _transform(producer, consumer, first, out, "txn1")
    producer.commit_transaction(TIMEOUT)
    assert _committed(kafka.bootstrap, group, inp, 3) == _next_offsets(first)

    second = _poll(consumer, 10)
    _transform(producer, consumer, second, out, "txn2-aborted")
    # Flush first: abort_transaction purges records still queued in the client, and this test
    # wants them written to the log (then hidden from read_committed readers by the abort).
    assert producer.flush(TIMEOUT) == 0
    producer.abort_transaction(TIMEOUT)
    # The aborted transaction's offsets were not committed either.
    assert _committed(kafka.bootstrap, group, inp, 3) == _next_offsets(first)
    consumer.close()

    # A restarted worker resumes from the committed offsets: it sees the aborted records again.
    consumer = _consumer(kafka.bootstrap, group)
    consumer.subscribe([inp])
    rest = _poll(consumer, 20)
    assert sorted(map(_key, rest)) == sorted(set(keys) - set(map(_key, first)))
    assert set(map(_key, second)) <= set(map(_key, rest))
    _transform(producer, consumer, rest, out, "txn3")
    producer.commit_transaction(TIMEOUT)
    consumer.close()

    committed = _read_all(kafka.bootstrap, out, 3, "read_committed")
    expected = [f"txn1:{_key(m)}" for m in first] + [f"txn3:{_key(m)}" for m in rest]
    assert Counter(committed) == Counter(expected)  # each input exactly once, nothing aborted
    aborted = [f"txn2-aborted:{_key(m)}" for m in second]
    uncommitted = _read_all(kafka.bootstrap, out, 3, "read_uncommitted")
    assert Counter(uncommitted) == Counter(expected + aborted)  # they were written, then hidden
    # The group's offsets are at the end of the input: everything consumed, committed once.
    assert _committed(kafka.bootstrap, group, inp, 3) == _end_offsets(kafka, inp, 3)


def _end_offsets(kafka: KafkaCluster, topic: str, partitions: int) -> dict[tuple[str, int], int]:
    consumer = _consumer(kafka.bootstrap, f"ends-{uuid.uuid4().hex}")
    try:
        out = {}
        for p in range(partitions):
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)
            if high > 0:
                out[(topic, p)] = high
        return out
    finally:
        consumer.close()


def test_an_open_transaction_is_invisible_to_read_committed(
    kafka: KafkaCluster, make_topic: Callable[..., str]
) -> None:
    out = make_topic(partitions=3)
    producer = _producer(kafka.bootstrap, **{"transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(out, key=f"k{i}", value=f"open:{i}")
    assert producer.flush(TIMEOUT) == 0  # written to the log, not committed
    assert _read_all(kafka.bootstrap, out, 3, "read_committed") == []
    assert len(_read_all(kafka.bootstrap, out, 3, "read_uncommitted")) == 6
    producer.commit_transaction(TIMEOUT)
    assert sorted(_read_all(kafka.bootstrap, out, 3)) == [f"open:{i}" for i in range(6)]


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    kafka: KafkaCluster, make_topic: Callable[..., str]
) -> None:
    out = make_topic(partitions=3)
    txid = f"leader-{uuid.uuid4().hex}"
    zombie = _producer(kafka.bootstrap, **{"transactional.id": txid})
    zombie.init_transactions(TIMEOUT)
    zombie.begin_transaction()
    for i in range(3):
        zombie.produce(out, key=f"z{i}", value=f"zombie:{i}")
    assert zombie.flush(TIMEOUT) == 0

    leader = _producer(kafka.bootstrap, **{"transactional.id": txid})
    leader.init_transactions(TIMEOUT)  # bumps the epoch, aborts the zombie's transaction
    leader.begin_transaction()
    for i in range(2):
        leader.produce(out, key=f"l{i}", value=f"leader:{i}")
    leader.commit_transaction(TIMEOUT)

    with pytest.raises(KafkaException):
        zombie.produce(out, key="z9", value="zombie:9")
        zombie.commit_transaction(TIMEOUT)
    assert sorted(_read_all(kafka.bootstrap, out, 3)) == ["leader:0", "leader:1"]


def test_a_consumer_group_resumes_from_its_commit(
    kafka: KafkaCluster, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=3)
    keys = [f"g{i:02d}" for i in range(20)]
    _produce_plain(kafka.bootstrap, topic, keys)
    group = f"group-{uuid.uuid4().hex}"

    consumer = _consumer(kafka.bootstrap, group)
    consumer.subscribe([topic])
    first = _poll(consumer, 8)
    consumer.commit(asynchronous=False)
    consumer.close()
    assert _committed(kafka.bootstrap, group, topic, 3) == _next_offsets(first)

    consumer = _consumer(kafka.bootstrap, group)
    consumer.subscribe([topic])
    rest = _poll(consumer, 12)
    extra = consumer.consume(num_messages=1, timeout=2.0)
    consumer.close()
    assert [m for m in extra if m.error() is None] == []
    assert sorted(map(_key, first + rest)) == keys  # every record once, none twice


def _port_refuses(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except OSError:
        return True


def test_committed_data_survives_a_broker_stop_and_a_kill(
    kafka: KafkaCluster, make_topic: Callable[..., str]
) -> None:
    if not kafka.restartable:
        pytest.skip(f"the {kafka.kind} Kafka at {kafka.bootstrap} is not ours to restart")
    broker = kafka.local_broker()
    topic = make_topic(partitions=3)
    group, txid = f"restart-{uuid.uuid4().hex}", f"tx-{uuid.uuid4().hex}"
    _produce_plain(kafka.bootstrap, topic, [f"r{i}" for i in range(9)])
    consumer = _consumer(kafka.bootstrap, group)
    consumer.subscribe([topic])
    seen = _poll(consumer, 9)
    producer = _producer(kafka.bootstrap, **{"transactional.id": txid})
    producer.init_transactions(TIMEOUT)
    out = make_topic(partitions=3)
    _transform(producer, consumer, seen, out, "before")
    producer.commit_transaction(TIMEOUT)
    consumer.close()
    producer.flush(TIMEOUT)
    del producer
    expected = sorted(f"before:{_key(m)}" for m in seen)
    offsets = _next_offsets(seen)
    cluster_id = fetch_metadata("127.0.0.1", broker.port or 0).cluster_id
    bootstrap = broker.bootstrap

    try:
        for how in ("stop", "kill"):
            if how == "stop":
                broker.stop()
            else:
                broker.kill()
            assert not broker.running
            assert _port_refuses(broker.port or 0), f"the port still answers after {how}"
            broker.start()
            assert broker.bootstrap == bootstrap  # the same broker, on the same port
            assert fetch_metadata("127.0.0.1", broker.port or 0).cluster_id == cluster_id
            assert sorted(_read_all(bootstrap, out, 3)) == expected, how
            assert _committed(bootstrap, group, topic, 3) == offsets, how

        # The transactional id carries on after the restarts.
        producer = _producer(bootstrap, **{"transactional.id": txid})
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.produce(out, key="after", value="after:1")
        producer.commit_transaction(TIMEOUT)
        assert sorted(_read_all(bootstrap, out, 3)) == sorted([*expected, "after:1"])
    finally:
        if not broker.running:
            broker.start()


def test_kafka_local_script_up_status_down(kafka: KafkaCluster, tmp_path: Path) -> None:
    if kafka.kind != "local":
        pytest.skip("the script starts a local broker; this run uses an external one")
    script = REPO / "scripts" / "kafka-local"
    env = {**os.environ, "SGM_KAFKA_RUN": str(tmp_path / "run")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(script), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    up = run("up")
    try:
        assert up.returncode == 0, up.stderr
        bootstrap = up.stdout.strip()
        host, _, port = bootstrap.rpartition(":")
        assert host == "127.0.0.1" and port.isdigit(), up.stdout
        assert bootstrap != kafka.bootstrap
        meta = fetch_metadata(host, int(port))
        assert [(b[1], b[2]) for b in meta.brokers] == [(host, int(port))]
        again = run("up")  # idempotent: reports the running broker
        assert again.returncode == 0 and again.stdout.strip() == bootstrap, again.stderr
        status = run("status")
        assert status.returncode == 0 and bootstrap in status.stdout
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    assert not (tmp_path / "run").exists()
    assert _port_refuses(int(port))
    status = run("status")
    assert status.returncode == 3 and "not running" in status.stdout
