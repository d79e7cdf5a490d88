"""The leader: the worker the group assigned the control partition publishes the global epochs.

It publishes each epoch as a record ``{epoch, starts, ends}`` in a transaction of the fixed
transactional id ``subgraph-monitor-GROUP-leader``. A new leader's ``init_transactions`` fences the
old one, whose open transaction is aborted, and it reads the control topic to its end before
publishing: a deposed leader cannot publish, and no epoch number is published twice.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from functools import partial

from confluent_kafka import (
    IsolationLevel,
    KafkaException,
)
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from connectors.kafka_records import Partition
from connectors.kafka_retry import retry
from connectors.kafka_sink import KafkaSink
from monitor.failpoints import failpoint
from monitor.service.cluster.control import (
    EARLIEST,
    LATEST,
    EpochSpec,
    control_topic,
)
from monitor.service.cluster.reader import Reader
from monitor.service.settings import Settings

log = logging.getLogger(__name__)

#: How often the leader looks at the input partitions' end offsets.
LEADER_CHECK_SECONDS = 0.05


class Leader:
    """Publishes the global epochs while this worker owns the control partition."""

    def __init__(
        self,
        settings: Settings,
        producer_config: Mapping[str, str | int | float | bool],
        reader: Reader,
        version: str,
    ) -> None:
        self.settings = settings
        self.reader = reader
        self.topic = control_topic(settings)
        started = time.perf_counter()
        # init_transactions fences every earlier leader and aborts its open transaction.
        self.sink = KafkaSink(
            producer_config,
            transactional_id=f"subgraph-monitor-{settings.group_id}-leader",
            output_topic=self.topic,
            dead_letter_topic=self.topic,
            version=version,
            transaction_timeout_ms=settings.transaction_timeout_ms,
        )
        control = TP(reader.control[0], reader.control[1])
        _, self.sync_to = retry(
            partial(reader.consumer.get_watermark_offsets, control, timeout=10, cached=False)
        )
        self.synced = False
        self.published: EpochSpec | None = None
        self.last_publish = time.monotonic()
        self.last_check = 0.0
        self.admin = AdminClient(dict(producer_config))
        log.info(
            "leading: publishing the epochs",
            extra={"control_topic": self.topic, "fenced_in_s": time.perf_counter() - started},
        )

    def _offsets(self, partitions: Sequence[Partition], spec: OffsetSpec) -> dict[Partition, int]:
        """Offsets of ``partitions`` in one request (an admin client: the reader's connection
        is busy with long-polling fetches); latest is the last stable offset."""
        futures = self.admin.list_offsets(
            {TP(t, p): spec for t, p in partitions},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=10,
        )
        return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}

    def _last(self, applied: EpochSpec | None) -> EpochSpec | None:
        """The last published epoch: the latest of what the reader read of the control topic
        (it starts at the worker's stored position, so it may have read nothing), what this
        leader published and what this worker applied."""
        candidates = [s for s in (self.reader.last_spec, self.published, applied) if s]
        return max(candidates, key=lambda s: s.epoch) if candidates else None

    def tick(self, applied: EpochSpec | None) -> None:
        """Publish the next epoch when it is due: ``batch_size`` records are waiting, or
        ``max_batch_delay_ms`` passed with at least one; never more than one epoch ahead of
        this worker's own progress (``applied``, its last applied epoch)."""
        if not self.synced:
            if self.reader.position(self.reader.control) < self.sync_to:
                return
            self.synced = True
        last = self._last(applied)
        if last is not None and last.epoch > (applied.epoch if applied else 0) + 1:
            return
        now = time.monotonic()
        if now - self.last_check < LEADER_CHECK_SECONDS:
            return
        self.last_check = now
        due = now - self.last_publish >= self.settings.max_batch_delay_ms / 1000
        prev: dict[Partition, int] = dict(last.ends) if last is not None else {}
        missing = [p for p in self.reader.partitions if p not in prev]
        if missing:  # the first epoch starts at each partition's earliest offset
            prev.update(self._offsets(missing, EARLIEST))
        highs = self._offsets(self.reader.partitions, LATEST)
        highs = {p: max(h, prev[p]) for p, h in highs.items()}
        waiting = {p: highs[p] - prev[p] for p in self.reader.partitions}
        total = sum(waiting.values())
        if total == 0 or (total < self.settings.batch_size and not due):
            return
        ends = dict(highs)
        if total > self.settings.batch_size:
            share = self.settings.batch_size / total
            ends = {
                p: prev[p] + max(1, int(n * share)) if n else prev[p] for p, n in waiting.items()
            }
        spec = EpochSpec((last.epoch if last else 0) + 1, prev, ends, self.settings.instance_id)
        self.sink.begin()
        self.sink.write_control(self.topic, spec.to_json())
        failpoint("leader_before_commit")
        self.sink.commit({}, None)
        self.published = spec
        self.last_publish = time.monotonic()
        log.debug("epoch published", extra={"epoch": spec.epoch, "records": spec.records})

    def close(self) -> None:
        with contextlib.suppress(KafkaException):
            self.sink.flush()
