"""A log of byte batches in one partition of a Kafka topic: appended synchronously, read back
whole, cut at the front.

The partitioned engine's shards mirror their RocksDB writes into it (the *shard changelog*,
:mod:`monitor.distributed.shard_changelog`), as Kafka Streams backs a state store with a
changelog topic: a shard whose disk is lost is rebuilt by replaying its partition. A batch may be
larger than a Kafka record may be, so it is cut into chunks of :data:`CHUNK_BYTES`, each record
``nonce:u64 index:u32 count:u32 chunk``, where ``count`` is the batch's number of chunks on its
last chunk and 0 on the others (so that a batch can be streamed, its size unknown until it
ends); a batch is read back only when all its chunks are (a writer that died half-way left a
batch nobody waits for: it is skipped). Appends are acknowledged
by every in-sync replica (``acks=all``) and idempotent, so a batch is never reordered or written
twice by a retry.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from connectors.kafka_retry import create_topics
from core.errors import StateError

#: Bytes of a batch per Kafka record (under the brokers' default ``message.max.bytes``).
CHUNK_BYTES = 900 * 1024
HEADER = struct.Struct(">QII")
#: Chunks of a streamed batch waiting for the broker at most (what it holds in memory).
IN_FLIGHT = 16


class KafkaLog:
    """Partition ``partition`` of ``topic`` as a log of byte batches."""

    def __init__(self, config: Mapping[str, Any], topic: str, partition: int) -> None:
        self.config = dict(config)
        self.topic = topic
        self.partition = partition
        self._producer: Producer | None = None

    def append(self, batch: bytes | Iterable[bytes], timeout: float = 60.0) -> int:
        """Write ``batch``, given whole or as pieces (streamed: at most :data:`IN_FLIGHT`
        chunks held at a time), and wait until every chunk is acknowledged; the offset of its
        first record."""
        if self._producer is None:
            self._producer = Producer(
                {**self.config, "enable.idempotence": True, "acks": "all", "linger.ms": 0}
            )
        producer = self._producer
        nonce = int.from_bytes(os.urandom(8), "big")
        offsets: list[int] = []
        errors: list[KafkaError] = []

        def delivered(error: KafkaError | None, message: Any) -> None:
            if error is not None:
                errors.append(error)
            else:
                offsets.append(int(message.offset() or 0))

        def send(index: int, chunk: bytes, last: bool) -> None:
            value = HEADER.pack(nonce, index, index + 1 if last else 0) + chunk
            while True:
                try:
                    producer.produce(
                        self.topic, value, partition=self.partition, on_delivery=delivered
                    )
                    break
                except BufferError:  # the queue is full: let it drain
                    producer.poll(0.1)
            while len(producer) > IN_FLIGHT and not errors:
                producer.poll(0.1)

        index, buffer = 0, bytearray()
        for piece in [batch] if isinstance(batch, bytes) else batch:
            buffer += piece
            while len(buffer) > CHUNK_BYTES:  # (the last chunk is never empty but for b"")
                send(index, bytes(buffer[:CHUNK_BYTES]), last=False)
                del buffer[:CHUNK_BYTES]
                index += 1
        send(index, bytes(buffer), last=True)
        left = producer.flush(timeout)
        if errors or left:
            why = errors[0] if errors else f"{left} records not acknowledged in {timeout:.0f} s"
            raise StateError(
                f"could not write to the shard changelog {self.topic}[{self.partition}] ({why})"
            )
        return min(offsets)

    def read(self, timeout: float = 300.0) -> Iterator[bytes]:
        """Every complete batch, in order, from the start of the partition to its end now."""
        consumer = Consumer(
            {
                **self.config,
                "group.id": f"shard-changelog-reader-{os.getpid()}",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
                "fetch.max.bytes": 64 << 20,
            }
        )
        try:
            low, high = consumer.get_watermark_offsets(
                KafkaTopicPartition(self.topic, self.partition), timeout=30
            )
            if high <= low:
                return
            consumer.assign([KafkaTopicPartition(self.topic, self.partition, OFFSET_BEGINNING)])
            pending: tuple[int, list[bytes]] | None = None
            deadline = time.monotonic() + timeout
            at = low
            while at < high:
                if time.monotonic() > deadline:
                    raise StateError(
                        f"reading the shard changelog {self.topic}[{self.partition}] took "
                        f"over {timeout:.0f} s (at offset {at} of {high})"
                    )
                for message in consumer.consume(1000, timeout=1.0):
                    if message.error() is not None:
                        raise KafkaException(message.error())
                    at = int(message.offset() or 0) + 1
                    value = message.value() or b""
                    nonce, index, count = HEADER.unpack_from(value)
                    if index == 0:
                        pending = (nonce, [])
                    if pending is None or pending[0] != nonce or len(pending[1]) != index:
                        pending = None  # (the rest of a batch whose start was cut or lost)
                        continue
                    pending[1].append(value[HEADER.size :])
                    if index + 1 == count:
                        yield b"".join(pending[1])
                        pending = None
                    if at >= high:
                        break
        finally:
            consumer.close()

    def cut_before(self, offset: int) -> None:
        """Delete the records before ``offset`` (the first of a batch that holds everything)."""
        admin = AdminClient(self.config)
        futures = admin.delete_records([KafkaTopicPartition(self.topic, self.partition, offset)])
        for future in futures.values():
            future.result(timeout=60)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None


def ensure_log_topic(config: Mapping[str, Any], topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions, kept until cut (no retention by time
    or size), when it does not exist; refuse one with fewer partitions."""
    admin = AdminClient(dict(config))
    existing = admin.list_topics(timeout=10).topics
    if topic not in existing:
        new = NewTopic(
            topic,
            num_partitions=partitions,
            replication_factor=-1,
            config={"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
        )
        create_topics(admin, [new])
    deadline = time.monotonic() + 60
    while True:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            if len(found.partitions) < partitions:
                raise StateError(
                    f"the shard changelog topic {topic} has {len(found.partitions)} partitions, "
                    f"the engine has {partitions} shards: give another topic, or the same shards"
                )
            if all(p.leader >= 0 for p in found.partitions.values()):
                return
        if time.monotonic() > deadline:
            raise StateError(f"the shard changelog topic {topic} has no leader after 60 s")
        time.sleep(0.2)
