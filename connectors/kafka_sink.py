"""Kafka as the transactional sink of match deltas (confluent-kafka).

:class:`KafkaSink` is the transactional producer: per epoch ``begin``, the deltas and dead
letters, then ``commit`` with the consumer's offsets, so that output and input positions are
committed together or not at all. Its deltas go out in one of three formats: ``records``
(below), ``avro`` (the same records in Avro, :mod:`connectors.avro_output`), or ``batches``, one
record per query and epoch (:mod:`connectors.batches`, as JSON Lines or Arrow). Scale-out
workers also write the changelog and the control topic through it.

Output records: key ``[query, [id, ...]]`` (JSON; the binding in head order, so a compacted topic
or a keyed consumer tracks current matches), value ``{"query", "epoch", "diff", "match"}``; a
query with edge variables adds ``"edges"`` (per edge variable the matched event with its fields)
to the value and the events' ids to the key, ``[query, [id, ...], [event id, ...]]``; no
headers (the value says everything, and two headers made each ``produce`` two to three times
slower).
Dead letters carry the raw value and headers ``reason``, ``category`` (the metric's label),
``source-topic``,
``source-partition``, ``source-offset``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
import orjson
from confluent_kafka import Producer, TopicPartition

from connectors import json_place
from connectors.arrow_batch import arrow
from connectors.avro_output import AvroDeltas
from connectors.batches import RECORD_OVERHEAD, BatchEncoding, batches
from connectors.changelog_json import Record, clock_record, event_records, tuple_records
from connectors.delta_json import EdgeColumns, chunks, keys_and_values
from connectors.kafka_records import (
    KafkaDeadLetter,
    Partition,
    epoch_metadata,
)
from connectors.sinks import CHUNK_ROWS, check_deltas
from core.columns import Column, Member

OutputFormat = Literal["records", "batches", "avro"]
"""``records``: one Kafka record per match delta; ``batches``: one per query and epoch;
``avro``: one per match delta, in Avro (:mod:`connectors.avro_output`)."""

PRODUCER_DEFAULTS: dict[str, object] = {
    "compression.type": "lz4",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 262_144,
    "message.max.bytes": 1_000_000,
}
"""librdkafka settings of the sink's producer, each overridden by the same key in ``SGM_KAFKA``
(docs/kafka.md, *Output throughput and producer settings*, says why these)."""


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
        avro: AvroDeltas | None = None,
    ) -> None:
        self.output_topic = output_topic
        self.dead_letter_topic = dead_letter_topic
        self.version = version.encode()
        self.timeout = timeout
        self.output_format = output_format
        if output_format == "avro" and avro is None:
            raise ValueError("the avro output format needs its encoder (a schema registry)")
        #: The Avro encoder of the deltas (``avro`` only).
        self.avro = avro
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
        extra: Mapping[str, Member] | None = None,
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
            if self.avro is not None:
                values = self.avro.encode(values)
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
            ("category", letter.category.encode()),
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

    def commit(
        self, offsets: Mapping[Partition, int], group_metadata: object, epoch: int | None = None
    ) -> None:
        """Commit the epoch: its records, and the consumer offsets after it, each offset with
        ``epoch=N`` as its commit metadata (:func:`~connectors.kafka_records.epoch_metadata`):
        Kafka alone then says which epoch last consumed each partition."""
        if offsets:
            metadata = epoch_metadata(epoch)
            self.producer.send_offsets_to_transaction(
                [TopicPartition(t, p, o, metadata=metadata) for (t, p), o in offsets.items()],
                group_metadata,
                self.timeout,
            )
        self.producer.commit_transaction(self.timeout)

    def abort(self) -> None:
        self.producer.abort_transaction(self.timeout)

    def flush(self) -> None:
        self.producer.flush(self.timeout)
