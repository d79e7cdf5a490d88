"""Kafka as a source of updates (confluent-kafka); the sink is :mod:`connectors.kafka_sink`.

:class:`KafkaSource` consumes the edge topics in a consumer group (``read_committed``, no
auto-commit: offsets are committed inside the producer's transactions) and decodes records into
:class:`~core.records.UpdateBatch` es, remembering for every partition the offset after
the last record taken. A record that cannot be decoded becomes a :class:`KafkaDeadLetter`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

from connectors import json_scan
from connectors.events import FieldTypes
from connectors.kafka_records import (
    Partition,
    Polled,
    Records,
    decode_messages,
    merge_polled,
    message_columns,
    metadata_epoch,
)
from connectors.registry_records import RecordFormats, RegistryUnavailable
from core.records import UpdateBatch

CONSUMER_DEFAULTS: dict[str, object] = {
    "fetch.queue.backoff.ms": 10,
    "queued.min.messages": 100_000,
    "queued.max.messages.kbytes": 16_384,
}
"""librdkafka settings of the consumers that read the input (the service's and a scale-out
worker's), each overridden by the same key in ``SGM_KAFKA``. The pre-fetch queue (one for all
of a consumer's partitions) stops fetching once it holds ``queued.min.messages`` records or
``queued.max.messages.kbytes`` KiB of values, and its fetcher then backs off for
``fetch.queue.backoff.ms``: librdkafka's second made ``consume`` wait for records the broker
already had, 10 ms does not. The two limits bound the queue's memory whatever the records' size
(a queued record holds ~350 bytes beside its value): 53-56 MiB resident with the queue full,
against 282-357 MiB with the 1,000,000 records and 64 MiB of before, while the bare consumer
reads as fast or faster (docs/kafka.md, *Input throughput and consumer settings*; bench/NOTES.md,
*Kafka input ceiling*)."""

#: Messages asked of one ``consume``: the poll takes their columns after each call, while the
#: ``Message`` objects are still in the cache. 10,000 a call cost 0.73-0.76 us of the main
#: thread per record, 1,000 cost 0.52-0.63 (bench/NOTES.md, *Kafka input ceiling*).
CONSUME_BATCH = 1_000

#: How long one ``consume`` waits while the consumer holds no partition: an assignment arrives
#: inside ``consume``, which then went on waiting for the first records (up to half a second),
#: only for :meth:`KafkaSource.poll` to give them back so that the caller sees the assignment
#: first. With short waits the poll returns soon after the assignment and nothing is fetched
#: twice.
UNASSIGNED_WAIT = 0.05


#: ``auto.offset.reset`` as the logical offset it starts a partition at. Assigned explicitly, a
#: partition that has no committed offset is fetched at once: left to librdkafka, which asks the
#: group for a committed offset again and then applies the reset policy, it starts on an offset
#: query timer about 100 ms later (measured on a fresh group: 125 ms from assignment to the
#: first records, 25 ms with the explicit offset).
RESET_STARTS = {
    "earliest": OFFSET_BEGINNING,
    "smallest": OFFSET_BEGINNING,
    "beginning": OFFSET_BEGINNING,
    "latest": OFFSET_END,
    "largest": OFFSET_END,
    "end": OFFSET_END,
}


def with_consumer_defaults(config: Mapping[str, object]) -> dict[str, object]:
    """``config`` (the user's ``SGM_KAFKA`` and the service's own keys) over
    :data:`CONSUMER_DEFAULTS`: what every consumer of the input starts from."""
    return {**CONSUMER_DEFAULTS, **config}


class KafkaSource:
    """The consumer of the edge topics."""

    def __init__(
        self,
        config: Mapping[str, str | int | float | bool],
        topics: Sequence[str],
        *,
        default_relation: str,
        topic_relations: Mapping[str, str],
        on_assign: Callable[[list[Partition]], Mapping[Partition, int]] | None = None,
        on_revoke: Callable[[list[Partition]], None] | None = None,
        on_stats: Callable[[str], object] | None = None,
        events: FieldTypes | None = None,
        arities: dict[str, int] | None = None,
        formats: RecordFormats | None = None,
    ) -> None:
        settings: dict[str, object] = {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "statistics.interval.ms": 5000,
            "logger": logging.getLogger("librdkafka.consumer"),
            **with_consumer_defaults(config),
        }
        if on_stats is not None:
            settings["stats_cb"] = on_stats
        self.consumer = Consumer(settings)
        #: Where a partition with no position anywhere starts: ``auto.offset.reset`` as an
        #: explicit logical offset (None: leave it to librdkafka, as for ``error``).
        self.reset_start = RESET_STARTS.get(str(settings["auto.offset.reset"]))
        self.topics = list(topics)
        self.default_relation = default_relation
        self.topic_relations = dict(topic_relations)
        #: The event relations and their field types: JSON records of these are events.
        self.events = events
        #: Each tuple relation's arity: given (the queries'), else its first tuple's, learned
        #: here; a tuple of another length is a dead letter.
        self.arities = {} if arities is None else arities
        #: How values of each topic are read (None: all JSON).
        self.formats = formats
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._seq = 0
        self._rebalanced = False
        self._holding = False  # whether any partition is assigned
        json_scan.warm()  # (the first poll's decoding compiles or loads nothing)
        self.consumer.subscribe(self.topics, on_assign=self._assigned, on_revoke=self._revoked)

    def holds_table(self, topic: str) -> bool:
        """Whether ``topic``'s records are a table's (its relation, ``SGM_TOPIC_RELATIONS``,
        is one): a new group reads it from its beginning."""
        relation = self.topic_relations.get(topic, self.default_relation)
        return self.events is not None and relation in self.events.tables

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Called inside poll when partitions are assigned: start them where the service says."""
        self._rebalanced = True
        self._holding = self._holding or bool(partitions)
        starts: Mapping[Partition, int] = {}
        if self._on_assign is not None:
            starts = self._on_assign([(p.topic, p.partition) for p in partitions])
        for tp in partitions:
            start = starts.get((tp.topic, tp.partition))
            if start is not None:
                tp.offset = start
        consumer.assign(partitions)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalanced = True
        self._holding = False  # eager rebalancing: every partition goes, the new ones follow
        if self._on_revoke is not None:
            self._on_revoke([(p.topic, p.partition) for p in partitions])

    def committed(
        self, partitions: Sequence[Partition], timeout: float = 30.0
    ) -> dict[Partition, int | None]:
        """The group's committed offset of each partition (None where nothing is committed)."""
        return {p: offset for p, (offset, _) in self.committed_epochs(partitions, timeout).items()}

    def committed_epochs(
        self, partitions: Sequence[Partition], timeout: float = 30.0
    ) -> dict[Partition, tuple[int | None, int | None]]:
        """The group's committed offset of each partition and the epoch that committed it (its
        commit metadata, :func:`~connectors.kafka_records.metadata_epoch`); None where absent."""
        found = self.consumer.committed(
            [TopicPartition(t, p) for t, p in partitions], timeout=timeout
        )
        return {
            (tp.topic, tp.partition): (
                tp.offset if tp.offset >= 0 else None,
                metadata_epoch(tp.metadata),
            )
            for tp in found
        }

    def assignment(self) -> list[Partition]:
        """The partitions assigned to this consumer now."""
        return [(tp.topic, tp.partition) for tp in self.consumer.assignment()]

    def seek(self, offsets: Mapping[Partition, int]) -> None:
        """Read on from these offsets (after an aborted epoch, or on assignment)."""
        for (topic, partition), offset in offsets.items():
            self.consumer.seek(TopicPartition(topic, partition, offset))

    def poll(
        self,
        max_updates: int,
        max_delay: float,
        stop_at: Mapping[Partition, int] | None = None,
        interrupted: Callable[[], bool] | None = None,
    ) -> Polled:
        """Records until ``max_updates`` updates or ``max_delay`` seconds, whichever is first.

        With ``stop_at``, only records of its partitions below the given offsets are taken;
        the others are left for the next poll (the consumer is rewound to them). When partitions are
        assigned or revoked during the poll, it returns nothing: whatever it had taken is given
        back (the consumer rewound), so that the caller sees the new assignment first. So it is
        when ``interrupted`` says so (a stop requested): the service stops at once, not after
        ``max_delay``, and the epoch it was reading is read again at the next start.

        Records are decoded as one batch when they could make ``max_updates`` updates (dead
        letters make fewer: then more are consumed and decoded) and at the end. When the schema
        registry does not answer, what was taken is given back and
        :class:`~connectors.registry_records.RegistryUnavailable` raised.
        """
        taken: list[Records] = []
        try:
            return self._poll(max_updates, max_delay, stop_at, interrupted, taken)
        except RegistryUnavailable:
            self._give_back(taken)
            raise

    def _poll(
        self,
        max_updates: int,
        max_delay: float,
        stop_at: Mapping[Partition, int] | None,
        interrupted: Callable[[], bool] | None,
        taken: list[Records],
    ) -> Polled:
        deadline = time.monotonic() + max_delay
        chunks: list[Polled] = []
        decoded = 0  # updates and events in the chunks
        pending = Records()
        rewind: dict[Partition, int] = {}
        self._rebalanced = False
        while decoded + len(pending) < max_updates:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            wanted = max_updates - decoded - len(pending)
            wait = 0.5 if self._holding else UNASSIGNED_WAIT
            messages = self.consumer.consume(
                num_messages=min(CONSUME_BATCH, wanted), timeout=min(remaining, wait)
            )
            if self._rebalanced or (interrupted is not None and interrupted()):
                self._give_back(
                    [*taken, message_columns([m for m in messages if m.error() is None])]
                )
                return Polled(UpdateBatch(first_seq=self._seq), rebalanced=self._rebalanced)
            records = message_columns(messages)
            if stop_at is not None:
                records = _below(records, stop_at, rewind)
            taken.append(records)
            pending.extend(records)
            if decoded + len(pending) >= max_updates:
                chunks.append(self._decode(pending, decoded))
                decoded += chunks[-1].batch.count
                pending = Records()
            if stop_at is not None and rewind and not messages:
                break
        if rewind:
            self.seek(rewind)
        if len(pending) or not chunks:
            chunks.append(self._decode(pending, decoded))
        polled = merge_polled(chunks, self._seq)
        self._seq += polled.batch.count
        return polled

    def _decode(self, records: Records, decoded: int) -> Polled:
        return decode_messages(
            records,
            self._seq + decoded,
            self.default_relation,
            self.topic_relations,
            self.events,
            self.arities,
            self.formats,
        )

    @property
    def next_seq(self) -> int:
        """The sequence number the next poll's first update takes."""
        return self._seq

    def _give_back(self, taken: Sequence[Records]) -> None:
        """Rewind the still assigned partitions to the first record this poll took of them."""
        first: dict[Partition, int] = {}
        for records in taken:
            for key, offset in records.first_offsets().items():
                first[key] = min(offset, first.get(key, offset))
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        self.seek({p: o for p, o in first.items() if p in assigned})

    def group_metadata(self) -> object:
        return self.consumer.consumer_group_metadata()

    def close(self) -> None:
        self.consumer.close()


def _below(
    records: Records, stop_at: Mapping[Partition, int], rewind: dict[Partition, int]
) -> Records:
    """The records below ``stop_at`` (catching up); the first record of each partition at or
    past it, or of a partition not in it, goes into ``rewind``, and nothing after it is taken."""
    keep = []
    for key, offset in zip(records.keys(), records.offsets, strict=True):
        if key in rewind:
            keep.append(False)
        elif key not in stop_at or offset >= stop_at[key]:
            rewind[key] = offset
            keep.append(False)
        else:
            keep.append(True)
    return records.take(keep)
