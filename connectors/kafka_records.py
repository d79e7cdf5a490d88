"""Kafka input records decoded: partitions, dead letters, and what one poll took.

A poll's messages become columns (:func:`message_columns`: one list comprehension over the
``Message`` objects, the only Python work per record), which :func:`decode_messages` decodes as
one batch (:mod:`connectors.json_batch`) into the poll's :class:`~core.records.UpdateBatch`, its
dead letters (:class:`KafkaDeadLetter`, with the record's topic, partition and offset), its
positions and what the metrics count. Records of a relation the queries read as events become
events (:mod:`connectors.events`); one without an ``id`` is identified by its position
``topic:partition@offset``. Both the service's source and the scale-out workers decode this way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import is_not
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import orjson
from confluent_kafka import KafkaError, KafkaException, Message

from connectors.events import EventRecord, FieldTypes, event_updates
from connectors.json_batch import decode_records
from connectors.registry_records import RecordFormats
from core.records import EventUpdates, Update, UpdateBatch
from core.times import TIME_FIELD

#: Largest record value accepted; bigger ones are dead letters.
MAX_RECORD_BYTES = 1 << 20

Partition = tuple[str, int]


def partition_key(partition: Partition) -> str:
    """``topic:partition``, as stored positions and logs name a partition."""
    return f"{partition[0]}:{partition[1]}"


def epoch_metadata(epoch: int | None) -> str:
    """The commit metadata of a partition's offset committed with ``epoch``: ``epoch=N`` (empty
    without one)."""
    return "" if epoch is None else f"epoch={epoch}"


def metadata_epoch(metadata: str | None) -> int | None:
    """The epoch in a committed offset's metadata (None: committed without one, by another
    version or another client)."""
    if metadata and metadata.startswith("epoch="):
        try:
            return int(metadata[len("epoch=") :])
        except ValueError:
            return None
    return None


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
    # a topic of a schema-registry format (connectors.registry_records): a schema id the
    # registry does not know, a value that does not decode, a field the map names or the
    # queries compare that the record does not have
    "unknown_schema",
    "undecodable",
    "missing_field",
)
#: How a message without a value (a table's tombstone) begins once made a record.
TOMBSTONE = b'{"op":"delete","key":'


@dataclass
class Records:
    """Consumed data messages as columns: what decoding needs of each, taken out of the
    ``Message`` objects a column at a time (:func:`message_columns`)."""

    topics: list[str] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    #: The values (``b""`` for a record without one).
    values: list[bytes] = field(default_factory=list)
    #: ``Message.timestamp()``: (timestamp type, milliseconds).
    stamps: list[tuple[int, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, other: Records) -> None:
        self.topics += other.topics
        self.partitions += other.partitions
        self.offsets += other.offsets
        self.values += other.values
        self.stamps += other.stamps

    def take(self, keep: Sequence[bool]) -> Records:
        """The records where ``keep``."""
        return Records(
            list(compress(self.topics, keep)),
            list(compress(self.partitions, keep)),
            list(compress(self.offsets, keep)),
            list(compress(self.values, keep)),
            list(compress(self.stamps, keep)),
        )

    def keys(self) -> list[Partition]:
        return list(zip(self.topics, self.partitions, strict=True))

    def first_offsets(self) -> dict[Partition, int]:
        """Per partition, the offset of its first record here."""
        return self.offset_ranges()[0]

    def offset_ranges(self) -> tuple[dict[Partition, int], dict[Partition, int]]:
        """Per partition, the offset of its first record here and the offset after its last."""
        keys = self.keys()
        first = dict(zip(reversed(keys), reversed(self.offsets), strict=True))
        last = dict(zip(keys, self.offsets, strict=True))
        return first, {key: offset + 1 for key, offset in last.items()}


def message_columns(messages: Sequence[Message]) -> Records:
    """The data messages of a ``consume`` as :class:`Records`; end-of-partition events are
    skipped, any other error raised (as :class:`KafkaException`)."""
    if not messages:
        return Records()
    # A ``map`` of ``Message``'s own method per column: a C call per message and no Python
    # frame, half the time of a comprehension that builds a tuple per message.
    values: list[bytes | None] = list(map(Message.value, messages))
    if None in values:  # (a tombstone: a table's delete of its key)
        values = [_tombstone(m) if v is None else v for m, v in zip(messages, values, strict=True)]
    errors = list(map(Message.error, messages))
    records = Records(
        cast(list[str], list(map(Message.topic, messages))),
        cast(list[int], list(map(Message.partition, messages))),
        cast(list[int], list(map(Message.offset, messages))),
        cast(list[bytes], values),
        list(map(Message.timestamp, messages)),
    )
    if any(map(is_not, errors, repeat(None))):
        for error in errors:
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(error)
        records = records.take([error is None for error in errors])
    if None in records.topics or None in records.partitions or None in records.offsets:
        raise KafkaException(f"a message without a position among {len(messages)} consumed")
    return records


def _tombstone(message: Message) -> bytes:
    """A message without a value: the delete of its key, ``{"op": "delete", "key": KEY}``
    (the key's text; the topic names the table, ``SGM_TOPIC_RELATIONS``), as a compacted
    topic of a table removes a record; ``b""`` without a key (a dead letter)."""
    key = message.key()
    if key is None:
        return b""
    text = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
    return TOMBSTONE + orjson.dumps(text) + b"}"


@dataclass
class EventSources:
    """Where each event of a poll came from, by sequence number (ascending): an event the
    window refuses becomes a dead letter after the epoch is applied."""

    seq: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, np.int64))
    #: Each event's row in ``records``.
    rows: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, np.int64))
    #: Whether the event had a ``ts``.
    timed: npt.NDArray[np.bool_] = field(default_factory=lambda: np.empty(0, np.bool_))
    records: Records = field(default_factory=Records)


@dataclass
class Polled:
    """What one epoch's worth of polling returned.

    ``next_offsets`` holds, for every partition a record was taken from, the offset after the
    last one, and ``first_offsets`` the offset of the first (where to read again when the
    epoch is aborted); ``timestamps`` the records' creation times (seconds) for end-to-end
    latency. ``rebalanced``: partitions were assigned or revoked during the poll, which
    therefore returned nothing.
    """

    batch: UpdateBatch
    next_offsets: dict[Partition, int] = field(default_factory=dict)
    first_offsets: dict[Partition, int] = field(default_factory=dict)
    rebalanced: bool = False
    dead_letters: list[KafkaDeadLetter] = field(default_factory=list)
    per_topic: dict[str, int] = field(default_factory=dict)
    timestamps: list[float] = field(default_factory=list)
    records: int = 0
    sources: EventSources = field(default_factory=EventSources)

    def refused(self, late: Mapping[str, Any]) -> list[KafkaDeadLetter]:
        """Dead letters for the updates the window refused (``late`` as in
        :attr:`~monitor.service.epochs.EpochOutput.late`: sequence numbers per relation)."""
        out = []
        known = self.sources.seq
        records = self.sources.records
        for relation, seqs in late.items():
            wanted = np.asarray(seqs, np.int64)
            at = np.minimum(np.searchsorted(known, wanted), max(known.shape[0] - 1, 0))
            mine = known[at] == wanted if known.shape[0] else np.zeros(wanted.shape, np.bool_)
            for i in at[mine].tolist():  # not mine: another partition's (scale-out)
                row = int(self.sources.rows[i])
                timed = bool(self.sources.timed[i])
                category = "late" if timed else "missing_time"
                reason = (
                    f"event of {relation} older than the window when it arrived"
                    if timed
                    else f"event of {relation} has no 'ts' and {relation} has a window"
                )
                out.append(
                    KafkaDeadLetter(
                        records.topics[row],
                        records.partitions[row],
                        records.offsets[row],
                        reason,
                        records.values[row],
                        category,
                    )
                )
        return out


def decode_messages(
    records: Records,
    first_seq: int,
    default_relation: str,
    topic_relations: Mapping[str, str],
    events: FieldTypes | None = None,
    arities: dict[str, int] | None = None,
    formats: RecordFormats | None = None,
) -> Polled:
    """Decode consumed records as one batch (:mod:`connectors.json_batch`), numbered from
    ``first_seq`` in record order; records of the ``events`` relations as events. A record
    that cannot be decoded becomes a dead letter, and so does a tuple whose length is not its
    relation's arity: the one in ``arities``, else the first tuple's (learned there; None:
    learned for this batch only). With ``formats``, the values of topics of a schema-registry
    format are decoded as columns where the format has a column decoder that takes the whole
    poll (:mod:`connectors.avro_columns`), else first made JSON records
    (:mod:`connectors.registry_records`; raises
    :class:`~connectors.registry_records.RegistryUnavailable`)."""
    if not len(records):
        return Polled(UpdateBatch(first_seq=first_seq))
    relation_of = {t: topic_relations.get(t, default_relation) for t in set(records.topics)}

    def identities(rows: Sequence[int]) -> list[str]:
        t, p, o = records.topics, records.partitions, records.offsets
        return [f"{t[r]}:{p[r]}@{o[r]}" for r in rows]

    defaults: str | list[str] = next(iter(relation_of.values()))
    if len(set(relation_of.values())) > 1:
        defaults = list(map(relation_of.__getitem__, records.topics))
    known = {} if arities is None else arities
    values, failures = records.values, {}
    decoded = None
    if formats is not None and formats.registry_formats:
        decoded = formats.decode_columns(
            records.topics, values, defaults, identities, events, known, MAX_RECORD_BYTES
        )
        if decoded is None:
            translated = formats.translate(records.topics, values, relation_of, TOMBSTONE)
            values, failures = translated.values, translated.failures
    if decoded is None:
        decoded = decode_records(values, defaults, identities, events, known, MAX_RECORD_BYTES)
    seq_of_row = decoded.seq_of_rows(first_seq)
    batch = decoded.batch(first_seq)
    polled = Polled(batch, records=len(records))
    polled.sources = _sources(records, decoded.events, seq_of_row)
    batch.times = _times(records, polled.sources, decoded.events)
    polled.dead_letters = [
        _dead_letter(records, row, message)
        for row, message in decoded.errors
        if row not in failures
    ]
    if failures:
        polled.dead_letters += [
            KafkaDeadLetter(
                records.topics[row],
                records.partitions[row],
                records.offsets[row],
                failure.reason,
                records.values[row],
                failure.category,
            )
            for row, failure in failures.items()
        ]
    polled.first_offsets, polled.next_offsets = records.offset_ranges()
    polled.per_topic = dict(Counter(records.topics))
    kinds, stamps = (np.array(column, np.int64) for column in zip(*records.stamps, strict=True))
    polled.timestamps = (stamps[(kinds != 0) & (stamps > 0)] / 1000.0).tolist()
    return polled


def _sources(
    records: Records, events: Mapping[str, EventUpdates], seq_of_row: npt.NDArray[np.int64]
) -> EventSources:
    """Where the events came from, in sequence order."""
    if not events:
        return EventSources(records=records)
    rows = np.concatenate([part.seq for part in events.values()])
    timed = np.concatenate([_timed(part) for part in events.values()])
    order = np.argsort(rows, kind="stable")
    return EventSources(seq_of_row[rows[order]], rows[order], timed[order], records)


def _timed(part: EventUpdates) -> npt.NDArray[np.bool_]:
    """Which events have a ``ts`` (a number of milliseconds once decoded)."""
    ts = part.fields.get(TIME_FIELD)
    if ts is None or ts.dtype != np.float64:
        return np.zeros(len(part), np.bool_)
    return np.asarray(~np.isnan(ts), np.bool_)


def _times(
    records: Records, sources: EventSources, events: Mapping[str, EventUpdates]
) -> dict[str, npt.NDArray[np.float64]]:
    """Per partition (``topic:partition``), the event times of its timed inserts in order."""
    if not sources.timed.any():
        return {}
    ts = np.full(len(records), np.nan)
    for part in events.values():
        if TIME_FIELD in part.fields and part.fields[TIME_FIELD].dtype == np.float64:
            ts[part.seq] = part.fields[TIME_FIELD]
    rows = sources.rows[sources.timed]
    pairs = list(zip(records.topics, records.partitions, strict=True))
    code_of = {pair: code for code, pair in enumerate(dict.fromkeys(pairs))}
    codes = np.fromiter(map(code_of.__getitem__, pairs), np.intp, len(pairs))[rows]
    keys = [partition_key(pair) for pair in code_of]
    order = np.argsort(codes, kind="stable")
    found, first, counts = np.unique(codes[order], return_index=True, return_counts=True)
    ordered = ts[rows[order]]
    by_first = np.argsort(order[first], kind="stable")  # in order of each one's first event
    return {
        keys[int(found[k])]: ordered[int(first[k]) : int(first[k] + counts[k])]
        for k in by_first.tolist()
    }


def _dead_letter(records: Records, row: int, reason: str) -> KafkaDeadLetter:
    value = records.values[row]
    if len(value) > MAX_RECORD_BYTES:
        category = "too_large"
    elif reason.startswith("field "):
        category = "invalid_field"
    elif reason.startswith("invalid JSON") or "not valid JSON" in reason:
        category = "invalid_json"
    else:
        category = "invalid_record"
    return KafkaDeadLetter(
        records.topics[row], records.partitions[row], records.offsets[row], reason, value, category
    )


def merge_polled(chunks: Sequence[Polled], first_seq: int) -> Polled:
    """The polls of consecutive chunks of records as one (``first_seq``: of the first)."""
    if len(chunks) == 1:
        return chunks[0]
    batch = UpdateBatch.concat([c.batch for c in chunks])
    batch.first_seq = first_seq
    merged = Polled(batch)
    records = Records()
    seq, rows, timed = [], [], []
    for chunk in chunks:
        merged.next_offsets.update(chunk.next_offsets)
        merged.first_offsets = {**chunk.first_offsets, **merged.first_offsets}
        merged.dead_letters += chunk.dead_letters
        for topic, n in chunk.per_topic.items():
            merged.per_topic[topic] = merged.per_topic.get(topic, 0) + n
        merged.timestamps += chunk.timestamps
        merged.records += chunk.records
        seq.append(chunk.sources.seq)
        rows.append(chunk.sources.rows + len(records))
        timed.append(chunk.sources.timed)
        records.extend(chunk.sources.records)
    merged.sources = EventSources(
        np.concatenate(seq), np.concatenate(rows), np.concatenate(timed), records
    )
    return merged


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
