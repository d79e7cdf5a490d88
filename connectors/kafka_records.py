"""Kafka input records decoded: partitions, dead letters, and what one poll took.

:func:`take_message` decodes one record of an input topic into a tuple update or, for a
relation the queries read as events, an event (:mod:`connectors.events`); a record that cannot
be decoded becomes a :class:`KafkaDeadLetter`. :func:`updates_batch` numbers a poll's updates and
events in the order they were taken. Both the service's source and the scale-out workers
decode this way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import KafkaException, Message

from connectors.events import EventRecord, FieldTypes, event_updates, parse_json_event
from connectors.formats import decode_json_record
from core.errors import InputError
from core.records import Update, UpdateBatch
from core.times import TIME_FIELD

#: Largest record value accepted; bigger ones are dead letters.
MAX_RECORD_BYTES = 1 << 20

Partition = tuple[str, int]


def partition_key(partition: Partition) -> str:
    """``topic:partition``, as stored positions and logs name a partition."""
    return f"{partition[0]}:{partition[1]}"


def parse_partition_key(key: str) -> Partition:
    """The partition a :func:`partition_key` names."""
    topic, _, number = key.rpartition(":")
    return topic, int(number)


@dataclass(frozen=True)
class KafkaDeadLetter:
    """A record that could not be decoded, where it came from, and why.

    ``category`` is one of :data:`DEAD_LETTER_CATEGORIES` (a metric label); ``reason`` the
    full message.
    """

    topic: str
    partition: int
    offset: int
    reason: str
    value: bytes
    category: str = "invalid_record"


#: Why records become dead letters, coarsely: ``too_large``, ``invalid_json`` (not a JSON
#: document), ``invalid_record`` (JSON, but not a valid update), ``invalid_field`` (an event
#: whose field has another type than the relation's, or is too long or not a scalar);
#: ``late`` (an event older than the window when it arrived) and ``missing_time`` (an event
#: without ``ts`` of a relation with a window) are decided when the epoch is applied.
DEAD_LETTER_CATEGORIES = (
    "too_large",
    "invalid_json",
    "invalid_record",
    "invalid_field",
    "late",
    "missing_time",
)


@dataclass
class Polled:
    """What one epoch's worth of polling returned.

    ``next_offsets`` holds, for every partition a record was taken from, the offset after the
    last one; ``timestamps`` the records' creation times (seconds) for end-to-end latency.
    """

    batch: UpdateBatch
    next_offsets: dict[Partition, int] = field(default_factory=dict)
    dead_letters: list[KafkaDeadLetter] = field(default_factory=list)
    per_topic: dict[str, int] = field(default_factory=dict)
    timestamps: list[float] = field(default_factory=list)
    records: int = 0
    #: Decoded events with their place among the poll's updates (``events`` sources only).
    events: list[tuple[int, EventRecord]] = field(default_factory=list)
    #: Per partition key, the event times of its records (the watermark is per partition).
    times: dict[str, list[float]] = field(default_factory=dict)
    #: Per place of an event among the poll's updates, where its record came from and its
    #: bytes: an event the window refuses becomes a dead letter after the epoch is applied.
    sources: dict[int, tuple[str, int, int, bytes, bool]] = field(default_factory=dict)

    def refused(self, first_seq: int, late: Mapping[str, Any]) -> list[KafkaDeadLetter]:
        """Dead letters for the updates the window refused (``late`` as in
        :attr:`~monitor.service.epochs.EpochOutput.late`: sequence numbers per relation)."""
        out = []
        for relation, seqs in late.items():
            for seq in seqs.tolist():
                source = self.sources.get(int(seq) - first_seq)
                if source is None:  # another partition's (scale-out decodes them all)
                    continue
                topic, partition, offset, value, timed = source
                category = "late" if timed else "missing_time"
                reason = (
                    f"event of {relation} older than the window when it arrived"
                    if timed
                    else f"event of {relation} has no 'ts' and {relation} has a window"
                )
                out.append(KafkaDeadLetter(topic, partition, offset, reason, value, category))
        return out


def take_message(
    message: Message,
    updates: list[Update],
    polled: Polled,
    default_relation: str,
    topic_relations: Mapping[str, str],
    events: FieldTypes | None = None,
    found: list[tuple[int, EventRecord]] | None = None,
) -> None:
    """Decode one data message into ``updates`` or, a record of an event relation, into
    ``found`` (default ``polled.events``) with its place among the updates and events taken;
    or into a dead letter of ``polled``."""
    found = polled.events if found is None else found
    topic, partition, offset = where(message)
    polled.records += 1
    polled.per_topic[topic] = polled.per_topic.get(topic, 0) + 1
    kind, stamp = message.timestamp()
    if kind != 0 and stamp > 0:
        polled.timestamps.append(stamp / 1000.0)
    value = message.value() or b""
    position = f"{topic}[{partition}]@{offset}"
    try:
        if len(value) > MAX_RECORD_BYTES:
            raise InputError(
                f"record of {len(value):,} bytes is larger than {MAX_RECORD_BYTES:,}",
                position=position,
            )
        relation = topic_relations.get(topic, default_relation)
        if events is not None:
            identity = f"{topic}:{partition}@{offset}"
            event = parse_json_event(value, relation, events, identity)
            if event is not None:
                place = len(updates) + len(found)
                found.append((place, event))
                ts = event.fields.get(TIME_FIELD)
                timed = isinstance(ts, float)
                polled.sources[place] = (topic, partition, offset, value, timed)
                if isinstance(ts, float) and event.diff > 0:
                    polled.times.setdefault(f"{topic}:{partition}", []).append(ts)
                return
        update = decode_json_record(value, default_relation=relation, position=position)
    except InputError as error:
        if len(value) > MAX_RECORD_BYTES:
            category = "too_large"
        elif error.message.startswith("field "):
            category = "invalid_field"
        elif error.message.startswith("invalid JSON") or "not valid JSON" in error.message:
            category = "invalid_json"
        else:
            category = "invalid_record"
        polled.dead_letters.append(
            KafkaDeadLetter(topic, partition, offset, error.message, value, category)
        )
        return
    updates.append(update)


def updates_batch(
    updates: list[Update],
    events: list[tuple[int, EventRecord]],
    first_seq: int,
    types: FieldTypes | None,
) -> UpdateBatch:
    """The poll's tuple updates and events as one batch, numbered in the order taken."""
    if not events or types is None:
        return UpdateBatch.from_updates(updates, first_seq)
    count = len(updates) + len(events)
    is_event = np.zeros(count, np.bool_)
    is_event[[i for i, _ in events]] = True
    seq = np.arange(first_seq, first_seq + count, dtype=np.int64)
    batch = UpdateBatch.from_updates(updates, 0)
    tuple_seq = seq[~is_event]
    for part in batch.parts.values():
        part.seq[:] = tuple_seq[part.seq]
    by_relation: dict[str, list[tuple[int, EventRecord]]] = {}
    for at, event in events:
        by_relation.setdefault(event.relation, []).append((at, event))
    batch.events = {
        relation: event_updates(found, seq, types.types.get(relation, {}))
        for relation, found in by_relation.items()
    }
    batch.first_seq, batch.count = first_seq, count
    return batch


def where(message: Message) -> tuple[str, int, int]:
    """Topic, partition and offset of a data message (never None for one)."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or offset is None:
        raise KafkaException(f"message without a position: {message!r}")
    return topic, partition, offset
