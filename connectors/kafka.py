"""Kafka as a source of updates and a transactional sink of match deltas (confluent-kafka).

:class:`KafkaSource` consumes the edge topics in a consumer group (``read_committed``, no
auto-commit: offsets are committed inside the producer's transactions) and decodes records into
:class:`~core.records.UpdateBatch` es, remembering for every partition the offset after
the last record taken. A record that cannot be decoded becomes a :class:`KafkaDeadLetter`.

:class:`KafkaSink` is the transactional producer: per epoch ``begin``, the deltas and dead
letters, then ``commit`` with the consumer's offsets, so that output and input positions are
committed together or not at all. Its deltas go out in one of two formats: ``records`` (below),
or ``batches``, one record per query and epoch (:mod:`connectors.batches`).

Output records: key ``[query, [id, ...]]`` (JSON; the binding in head order, so a compacted topic
or a keyed consumer tracks current matches), value ``{"query", "epoch", "diff", "match"}``; a
query with edge variables adds ``"edges"`` (per edge variable the matched event with its fields)
to the value and the events' ids to the key, ``[query, [id, ...], [event id, ...]]``; no
headers (the value says everything, and two headers made each ``produce`` two to three times
slower).
Dead letters carry the raw value and headers ``reason``, ``source-topic``,
``source-partition``, ``source-offset``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
import orjson
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, Producer, TopicPartition

from connectors import json_place
from connectors.arrow_batch import arrow
from connectors.batches import RECORD_OVERHEAD, BatchEncoding, batches
from connectors.changelog_json import Record, clock_record, event_records, tuple_records
from connectors.delta_json import EdgeColumns, chunks, keys_and_values
from connectors.events import FieldTypes
from connectors.kafka_records import (
    KafkaDeadLetter,
    Partition,
    Polled,
    Records,
    decode_messages,
    merge_polled,
    message_columns,
)
from connectors.sinks import CHUNK_ROWS, check_deltas
from core.columns import Column
from core.records import UpdateBatch

CONSUMER_DEFAULTS: dict[str, object] = {
    "queued.min.messages": 1_000_000,
    "fetch.queue.backoff.ms": 10,
}
"""librdkafka settings of the consumers that read the input (the service's and a scale-out
worker's), each overridden by the same key in ``SGM_KAFKA``: once a partition's pre-fetch queue
holds ``queued.min.messages`` (librdkafka's default: 100,000), its fetcher backs off for
``fetch.queue.backoff.ms`` (default: a second), and ``consume`` then waits for records the
broker already has (README, *Input throughput and consumer settings*). The queue's memory stays
bounded by ``queued.max.messages.kbytes`` (64 MiB)."""

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
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._seq = 0
        self._rebalanced = False
        self._holding = False  # whether any partition is assigned
        self.consumer.subscribe(self.topics, on_assign=self._assigned, on_revoke=self._revoked)

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
        found = self.consumer.committed(
            [TopicPartition(t, p) for t, p in partitions], timeout=timeout
        )
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in found}

    def seek(self, offsets: Mapping[Partition, int]) -> None:
        """Read on from these offsets (after an aborted epoch, or on assignment)."""
        for (topic, partition), offset in offsets.items():
            self.consumer.seek(TopicPartition(topic, partition, offset))

    def poll(
        self,
        max_updates: int,
        max_delay: float,
        stop_at: Mapping[Partition, int] | None = None,
    ) -> Polled:
        """Records until ``max_updates`` updates or ``max_delay`` seconds, whichever is first.

        With ``stop_at``, only records of its partitions below the given offsets are taken;
        the others are left for the next poll (the consumer is rewound to them). When partitions are
        assigned or revoked during the poll, it returns nothing: whatever it had taken is given
        back (the consumer rewound), so that the caller sees the new assignment first.

        Records are decoded as one batch when they could make ``max_updates`` updates (dead
        letters make fewer: then more are consumed and decoded) and at the end.
        """
        deadline = time.monotonic() + max_delay
        chunks: list[Polled] = []
        decoded = 0  # updates and events in the chunks
        pending = Records()
        taken: list[Records] = []
        rewind: dict[Partition, int] = {}
        self._rebalanced = False
        while decoded + len(pending) < max_updates:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            wanted = max_updates - decoded - len(pending)
            wait = 0.5 if self._holding else UNASSIGNED_WAIT
            messages = self.consumer.consume(
                num_messages=min(10_000, wanted), timeout=min(remaining, wait)
            )
            if self._rebalanced:
                self._give_back(
                    [*taken, message_columns([m for m in messages if m.error() is None])]
                )
                return Polled(UpdateBatch(first_seq=self._seq), rebalanced=True)
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
        )

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


OutputFormat = Literal["records", "batches"]
"""``records``: one Kafka record per match delta; ``batches``: one per query and epoch."""

PRODUCER_DEFAULTS: dict[str, object] = {
    "compression.type": "lz4",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 262_144,
    "message.max.bytes": 1_000_000,
}
"""librdkafka settings of the sink's producer, each overridden by the same key in ``SGM_KAFKA``
(README, *Output throughput and producer settings*, says why these)."""


class KafkaSink:
    """The transactional producer of match deltas and dead letters."""

    def __init__(
        self,
        config: Mapping[str, str | int | float | bool],
        *,
        transactional_id: str,
        output_topic: str,
        dead_letter_topic: str,
        version: str,
        timeout: float = 15.0,
        transaction_timeout_ms: int = 30_000,
        output_format: OutputFormat = "records",
        batch_encoding: BatchEncoding = "jsonl",
    ) -> None:
        self.output_topic = output_topic
        self.dead_letter_topic = dead_letter_topic
        self.version = version.encode()
        self.timeout = timeout
        self.output_format = output_format
        #: How a batch's deltas are written (``batches`` only): JSON Lines or Arrow.
        self.batch_encoding = batch_encoding
        settings: dict[str, object] = {
            "transactional.id": transactional_id,
            "enable.idempotence": True,
            **PRODUCER_DEFAULTS,
            # How long the coordinator lets an open transaction live before it aborts it:
            # a dead producer's transaction blocks read_committed readers that long
            # unless a producer with the same transactional id starts first.
            "transaction.timeout.ms": transaction_timeout_ms,
            "logger": logging.getLogger("librdkafka.producer"),
            **config,
        }
        #: The largest batch value: what librdkafka accepts in one record, less its key,
        #: headers and framing.
        self.batch_bytes = int(str(settings["message.max.bytes"])) - RECORD_OVERHEAD
        #: Seconds spent waiting for librdkafka's queue to make room (:meth:`take_waited`).
        self.waited = 0.0
        self.producer = Producer(settings)
        self.producer.init_transactions(timeout)
        json_place.warm()
        if output_format == "batches" and batch_encoding == "arrow":
            arrow()  # imported now, not in the first epoch (and a clear error if missing)

    def begin(self) -> None:
        self.producer.begin_transaction()

    def write_deltas(
        self,
        query: str,
        epoch: int,
        variables: Sequence[str],
        columns: Sequence[npt.NDArray[np.generic]],
        diffs: npt.NDArray[np.integer],
        edges: EdgeColumns | None = None,
        extra: Mapping[str, Column] | None = None,
    ) -> int:
        """Produce the deltas (inside the open transaction): one record per delta, or with
        ``output_format="batches"`` one per query and epoch (:mod:`connectors.batches`).
        A query with edge variables adds its events to the value (``"edges"``) and, for
        ``records``, their ids to the key. Keys and values of up to
        :data:`~connectors.sinks.CHUNK_ROWS` deltas are encoded at once
        (:mod:`connectors.delta_json`); what is left per record is the ``produce`` call."""
        rows = check_deltas(variables, columns, diffs)
        if self.output_format == "batches":
            key = orjson.dumps(query)
            for batch in batches(
                query,
                epoch,
                variables,
                columns,
                diffs,
                edges,
                extra,
                self.batch_bytes,
                self.batch_encoding,
            ):
                headers = batch.headers(query, epoch, rows, self.version)
                self._produce(self.output_topic, key, batch.value, headers)
            return rows
        for part in chunks(columns, diffs, edges, extra, CHUNK_ROWS):
            keys, values = keys_and_values(query, epoch, variables, part)
            self._produce_records(self.output_topic, keys, values)
        return rows

    def _produce_records(self, topic: str, keys: list[bytes], values: list[bytes]) -> None:
        """One record per key and value, without headers: the value says all there is."""
        produce = self.producer.produce
        for key, value in zip(keys, values, strict=True):
            try:
                produce(topic, value, key)
            except BufferError:
                self._produce(topic, key, value, None)

    def write_dead_letter(self, letter: KafkaDeadLetter) -> None:
        headers: list[tuple[str, str | bytes | None]] = [
            ("reason", letter.reason.encode()),
            ("source-topic", letter.topic.encode()),
            ("source-partition", str(letter.partition).encode()),
            ("source-offset", str(letter.offset).encode()),
            ("service-version", self.version),
        ]
        self._produce(self.dead_letter_topic, None, letter.value, headers)

    def write_changelog(
        self,
        topic: str,
        relation: str,
        epoch: int,
        columns: Sequence[npt.NDArray[np.generic]],
        diffs: npt.NDArray[np.integer],
    ) -> int:
        """One changelog record per changed tuple: key ``[relation, [ids]]``, value
        ``{"epoch": E}`` for an insert and a tombstone (no value, header ``epoch``) for a
        delete, so that a compacted topic holds the current graph with each tuple's epoch.
        The keys are encoded a batch at a time (:mod:`connectors.changelog_json`)."""
        self._produce_changelog(topic, epoch, tuple_records(relation, epoch, columns, diffs))
        return int(diffs.shape[0])

    def write_event_changelog(
        self,
        topic: str,
        relation: str,
        epoch: int,
        events: Mapping[str, Column],
        diffs: npt.NDArray[np.integer],
    ) -> int:
        """One changelog record per changed event: key ``[relation, id]``, value ``{"epoch": E,
        "event": {"id", "src", "dst", fields...}}`` for an insert and a tombstone for a delete
        (deletes first: an id deleted and inserted again in the epoch keeps its new event;
        a tombstone has the header ``epoch``). Keys and values are encoded a batch at a time
        (:mod:`connectors.changelog_json`)."""
        self._produce_changelog(topic, epoch, event_records(relation, epoch, events, diffs))
        return int(diffs.shape[0])

    def _produce_changelog(self, topic: str, epoch: int, records: Iterable[Record]) -> None:
        """Changelog records: a value says its epoch, a tombstone has no value and says it in
        the header ``epoch``. Headers only where they carry information: confluent-kafka builds
        a header list per record, which made each ``produce`` two to three times slower."""
        headers: list[tuple[str, str | bytes | None]] = [("epoch", str(epoch).encode())]
        produce = self.producer.produce
        for key, value in records:
            if value is None:
                self._produce(topic, key, None, headers)
                continue
            try:
                produce(topic, value, key)
            except BufferError:
                self._produce(topic, key, value, None)

    def write_clock_changelog(
        self, topic: str, epoch: int, partition: str, times: Sequence[float]
    ) -> None:
        """The event clock of one input partition (its largest event times): key
        ``["#clock", partition]``, value ``{"epoch": E, "times": [...]}``, so that a worker
        rebuilt from the changelog continues with the cluster's watermark."""
        headers: list[tuple[str, str | bytes | None]] = [("epoch", str(epoch).encode())]
        key, value = clock_record(epoch, partition, times)
        self._produce(topic, key, value, headers)

    def write_control(self, topic: str, value: bytes) -> None:
        """One control record (an epoch's definition; the leader's sink only)."""
        self._produce(topic, None, value, [("service-version", self.version)])

    def _produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None,
    ) -> None:
        while True:
            try:
                self.producer.produce(topic, value, key, headers=headers)
                return
            except BufferError:
                self._wait_for_room()

    def _wait_for_room(self) -> None:
        """librdkafka's queue is full (``queue.buffering.max.messages`` or ``.kbytes``): block
        until it has delivered something (``poll`` returns once it has served delivery
        reports, at the latest after a second), and count the time."""
        started = time.perf_counter()
        self.producer.poll(1.0)
        self.waited += time.perf_counter() - started

    def take_waited(self) -> float:
        """The seconds waited for room since the last call (for the metrics)."""
        waited, self.waited = self.waited, 0.0
        return waited

    def commit(self, offsets: Mapping[Partition, int], group_metadata: object) -> None:
        """Commit the epoch: its records, and the consumer offsets after it."""
        if offsets:
            self.producer.send_offsets_to_transaction(
                [TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                group_metadata,
                self.timeout,
            )
        self.producer.commit_transaction(self.timeout)

    def abort(self) -> None:
        self.producer.abort_transaction(self.timeout)

    def flush(self) -> None:
        self.producer.flush(self.timeout)
