"""The per-record Kafka decoding the product used before issue #14, kept as the oracle of the
batch decoder (``test_kafka_records.py``): one ``take_message`` call per message, a dict and an
:class:`~core.records.Update` per record, event sources and times in dicts. Not used by the
product.

A relation has one arity: the one given in ``arities`` (the queries' and the index's), else
its first tuple's, which ``arities`` learns; a tuple of another length is a dead letter (as the
file source makes it one). Before, both decoders built a relation's columns from its first
tuple's length: a longer tuple was cut, a shorter one raised IndexError (a crash loop of
``serve``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import Message

from connectors.events import EventRecord, FieldTypes, parse_json_event
from connectors.formats import decode_json_record
from connectors.kafka_records import (
    MAX_RECORD_BYTES,
    KafkaDeadLetter,
    Partition,
    updates_batch,
)
from core.errors import InputError
from core.records import Update, UpdateBatch
from core.times import TIME_FIELD


@dataclass
class ReferencePolled:
    batch: UpdateBatch
    next_offsets: dict[Partition, int] = field(default_factory=dict)
    dead_letters: list[KafkaDeadLetter] = field(default_factory=list)
    per_topic: dict[str, int] = field(default_factory=dict)
    timestamps: list[float] = field(default_factory=list)
    records: int = 0
    events: list[tuple[int, EventRecord]] = field(default_factory=list)
    times: dict[str, list[float]] = field(default_factory=dict)
    sources: dict[int, tuple[str, int, int, bytes, bool]] = field(default_factory=dict)

    def refused(self, first_seq: int, late: Mapping[str, Any]) -> list[KafkaDeadLetter]:
        out = []
        for relation, seqs in late.items():
            for seq in seqs.tolist():
                source = self.sources.get(int(seq) - first_seq)
                if source is None:
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
    polled: ReferencePolled,
    default_relation: str,
    topic_relations: Mapping[str, str],
    events: FieldTypes | None = None,
    found: list[tuple[int, EventRecord]] | None = None,
    arities: dict[str, int] | None = None,
) -> None:
    found = polled.events if found is None else found
    arities = {} if arities is None else arities
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    assert topic is not None and partition is not None and offset is not None
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
        arity = arities.setdefault(update.relation, len(update.values))
        if len(update.values) != arity:
            raise InputError(
                f"relation {update.relation!r} has {arity} id{'s' * (arity != 1)} per tuple, "
                f"got {len(update.values)}"
            )
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


def reference_poll(
    messages: Sequence[Message],
    first_seq: int,
    default_relation: str,
    topic_relations: Mapping[str, str],
    events: FieldTypes | None,
    arities: dict[str, int] | None = None,
) -> ReferencePolled:
    """What ``KafkaSource.poll`` made of these messages, record by record (``arities``: the
    relations' arities, learning the first tuple's of the others)."""
    updates: list[Update] = []
    polled = ReferencePolled(UpdateBatch())
    arities = {} if arities is None else arities
    for message in messages:
        take_message(
            message, updates, polled, default_relation, topic_relations, events, None, arities
        )
        key = (message.topic(), message.partition())
        polled.next_offsets[key] = message.offset() + 1  # type: ignore[index, operator]
    polled.batch = updates_batch(updates, polled.events, first_seq, events)
    polled.batch.times = {k: np.asarray(v, np.float64) for k, v in polled.times.items()}
    return polled


def reference_epoch(
    messages: Mapping[Partition, list[Message]],
    default_relation: str,
    topic_relations: Mapping[str, str],
    events: FieldTypes | None,
    arities: dict[str, int] | None = None,
) -> tuple[UpdateBatch, list[int], dict[Partition, ReferencePolled]]:
    """What the scale-out worker's ``decode_epoch`` made of an epoch's messages."""
    updates: list[Update] = []
    found: list[tuple[int, EventRecord]] = []
    bounds = []
    polled: dict[Partition, ReferencePolled] = {}
    arities = {} if arities is None else arities
    for p in sorted(messages):
        bounds.append(len(updates) + len(found))
        polled[p] = ReferencePolled(UpdateBatch())
        for message in messages[p]:
            take_message(
                message,
                updates,
                polled[p],
                default_relation,
                topic_relations,
                events,
                found,
                arities,
            )
    batch = updates_batch(updates, found, 0, events)
    batch.times = {
        key: np.asarray(times, np.float64)
        for part in polled.values()
        for key, times in part.times.items()
    }
    return batch, bounds, polled
