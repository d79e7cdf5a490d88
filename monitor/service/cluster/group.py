"""The worker's membership of the consumer group: which input partitions it seeds, who leads."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from confluent_kafka import (
    Consumer,
    KafkaError,
)
from confluent_kafka import TopicPartition as TP

from connectors.kafka_records import Partition, partition_key
from connectors.kafka_retry import (
    committed_offsets,
)
from monitor.service.metrics import Metrics

log = logging.getLogger(__name__)


class GroupMember:
    """The worker's membership of the consumer group: which partitions it owns; reads nothing.

    Subscribed to the input topics and the control topic, every assigned partition paused: the
    group only says who seeds which partition and who leads; the offsets it holds are committed
    by the workers' transactions.
    """

    def __init__(
        self,
        config: Mapping[str, str | int | float | bool],
        topics: Sequence[str],
        metrics: Metrics,
    ) -> None:
        self.consumer = Consumer(
            {
                # The barrier asks for the committed offsets while other workers' transactions
                # hold theirs: the broker answers "unstable" until those commit, and librdkafka
                # asks again after retry.backoff.ms, doubling up to retry.backoff.max.ms (100 ms
                # to 1 s by default), so a worker saw the last commit up to a second late.
                "retry.backoff.ms": 10,
                "retry.backoff.max.ms": 50,
                **config,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "logger": logging.getLogger("librdkafka.group"),
            }
        )
        self.owned: set[Partition] = set()
        self.assigned_once = False
        self.metrics = metrics
        self.consumer.subscribe(list(topics), on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TP]) -> None:
        consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)
        self.owned = {(tp.topic, tp.partition) for tp in partitions}
        self.assigned_once = True
        self.metrics.rebalanced()
        log.info(
            "partitions assigned",
            extra={"partitions": sorted(partition_key(p) for p in self.owned)},
        )

    def _revoked(self, consumer: Consumer, partitions: list[TP]) -> None:
        lost = {(tp.topic, tp.partition) for tp in partitions}
        self.owned -= lost
        consumer.unassign()
        log.info("partitions revoked", extra={"partitions": sorted(partition_key(p) for p in lost)})

    def poll(self) -> None:
        message = self.consumer.poll(0)
        error = message.error() if message is not None else None
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            log.warning("group consumer: %s", error)

    def committed(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        """The group's committed offsets (stable: pending transactional commits are waited for);
        a partition never committed is -1."""
        found = committed_offsets(self.consumer, partitions)
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else -1) for tp in found}

    def group_metadata(self) -> object:
        return self.consumer.consumer_group_metadata()

    def close(self) -> None:
        self.consumer.close()
