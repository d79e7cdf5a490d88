"""The shard changelog's log of byte batches on a real broker: batches given whole or streamed
in pieces come back whole and in order, a streamed batch holds few chunks in memory, a batch
whose writer died half-way is skipped, and a cut drops what is before it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from connectors.kafka_log import CHUNK_BYTES, IN_FLIGHT, KafkaLog, ensure_log_topic
from connectors.kafka_retry import create_topics
from tests.kafka_broker import KafkaCluster

pytestmark = pytest.mark.kafka


def new_log(kafka: KafkaCluster) -> KafkaLog:
    config = {"bootstrap.servers": kafka.bootstrap}
    topic = f"sgm-log-{uuid.uuid4().hex[:12]}"
    ensure_log_topic(config, topic, 2)
    return KafkaLog(config, topic, 1)


def blob(size: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def test_batches_whole_and_streamed_come_back_whole_and_in_order(kafka: KafkaCluster) -> None:
    log = new_log(kafka)
    big = blob(40 * CHUNK_BYTES + 123, seed=1)  # 41 chunks, more than IN_FLIGHT
    held: list[int] = []

    def pieces() -> Iterator[bytes]:
        for at in range(0, len(big), 700_001):
            assert log._producer is not None
            held.append(len(log._producer))
            yield big[at : at + 700_001]

    small, exact = blob(10, seed=2), blob(2 * CHUNK_BYTES, seed=3)
    first = log.append(small)
    log.append(pieces())
    log.append(exact)
    log.append(iter([b"", exact[:5], b"", exact[5:]]))
    log.append(b"")
    assert first == 0
    assert list(log.read()) == [small, big, exact, exact, b""]
    # (len(producer) also counts events waiting to be served, a delivery report or a broker
    # event: a few over IN_FLIGHT; a batch held whole would be its 41 chunks)
    assert max(held) <= IN_FLIGHT + 4, "a streamed batch was held in memory whole"
    log.close()


def test_a_batch_whose_writer_died_is_skipped_and_a_cut_drops_the_front(
    kafka: KafkaCluster,
) -> None:
    log = new_log(kafka)
    before = blob(1000, seed=4)
    log.append(before)

    def dies() -> Iterator[bytes]:
        yield blob(3 * CHUNK_BYTES, seed=5)
        raise RuntimeError("the shard's process died")

    with pytest.raises(RuntimeError, match="died"):
        log.append(dies())
    assert log._producer is not None and log._producer.flush(30) == 0
    after = blob(2 * CHUNK_BYTES + 7, seed=6)
    at = log.append(after)
    assert list(log.read()) == [before, after]
    log.cut_before(at)
    assert list(log.read()) == [after]
    log.close()


def test_create_topics_creates_the_missing_and_takes_the_existing(kafka: KafkaCluster) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    names = [f"create-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    assert create_topics(admin, [NewTopic(names[0], 1)]) == [names[0]]
    both = [NewTopic(n, 1) for n in names]
    assert create_topics(admin, both) == [names[1]], "one created, the other there already"
    assert create_topics(admin, both) == []
