"""One epoch's input in the replicated scale-out: its records decoded in the fixed order
(partition by partition, each as one batch), and which of its changes a worker owns: the ones
from the partitions it publishes, and every table change for the worker publishing the first."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import numpy as np
from confluent_kafka import Message

from connectors.events import FieldTypes
from connectors.kafka_records import Partition, Polled, decode_messages, message_columns
from connectors.registry_records import RecordFormats
from core.errors import StateError
from core.records import UpdateBatch
from monitor.index.events import EventChanges
from monitor.index.graph import Change
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings


@dataclass
class EpochInput:
    """One epoch's records decoded: the batch, and per partition its dead letters and range of
    sequence numbers (``bounds[i]`` is the first update of ``partitions[i]``)."""

    batch: UpdateBatch
    partitions: list[Partition]
    bounds: np.ndarray
    polled: dict[Partition, Polled] = field(default_factory=dict)

    def owners(self, seq: np.ndarray) -> np.ndarray:
        """Index into ``partitions`` of the partition each sequence number came from."""
        return np.searchsorted(self.bounds, seq, side="right") - 1

    def from_partitions(self, seq: np.ndarray, partitions: set[Partition]) -> np.ndarray:
        """Which sequence numbers came from ``partitions``."""
        if not self.partitions:
            return np.zeros(seq.shape[0], np.bool_)
        wanted = np.array([p in partitions for p in self.partitions], np.bool_)
        return np.asarray(wanted[self.owners(seq)], np.bool_)


def decode_epoch(
    messages: Mapping[Partition, list[Message]],
    settings: Settings,
    events: FieldTypes | None = None,
    arities: dict[str, int] | None = None,
    formats: RecordFormats | None = None,
) -> EpochInput:
    """The epoch's records in the fixed order, partition by partition, each partition's
    decoded as one batch (records of the ``events`` relations as events, numbered in the
    same order; a relation's tuples of other lengths than its arity in ``arities``, or
    learned there from its first tuple, are dead letters; the values of topics of a schema
    registry format read with ``formats``)."""
    arities = {} if arities is None else arities
    partitions = sorted(messages)
    bounds = np.zeros(len(partitions), np.int64)
    polled: dict[Partition, Polled] = {}
    count = 0
    for i, p in enumerate(partitions):
        bounds[i] = count
        polled[p] = decode_messages(
            message_columns(messages[p]),
            count,
            settings.default_relation,
            settings.topic_relations,
            events,
            arities,
            formats,
        )
        count += polled[p].batch.count
    batch = UpdateBatch.concat([part.batch for part in polled.values()])
    return EpochInput(batch, partitions, bounds, polled)


def owned_changes(
    changes: Mapping[str, Change],
    data: EpochInput,
    partitions: set[Partition],
    tables: Collection[str] = (),
) -> dict[str, Change]:
    """The changes decided by updates from ``partitions``; of the relations kept from tables
    (``tables``), all or none: see :func:`owns_tables`."""
    out: dict[str, Change] = {}
    for name, change in changes.items():
        if change.seq is None:
            raise StateError("staged changes carry no sequence numbers")
        if name in tables:
            mask = np.full(len(change), owns_tables(data, partitions), np.bool_)
        else:
            mask = data.from_partitions(change.seq, partitions)
        if mask.any():
            out[name] = change.take(mask)
    return out


def owns_tables(data: EpochInput, partitions: set[Partition]) -> bool:
    """Whether the worker publishing ``partitions`` of the epoch seeds and decides every change
    of a table's relations: the one publishing its first partition. A table record replaced
    makes a match's old binding ``-1`` and its new one ``+1``, of one identity; when two
    records of one match change in an epoch, the old binding is decided by its first changed
    atom and the new one by its last, so with records of different workers deciding, the
    ``-1`` and the ``+1`` would be published apart, not cancelled. With one worker deciding
    every table change they cancel as in a single worker."""
    return bool(data.partitions) and data.partitions[0] in partitions


def table_relations(processor: EpochProcessor) -> frozenset[str]:
    """The index relations kept from the queries' tables."""
    events = processor.events
    return frozenset(
        name
        for kept in events.kept
        if kept.selection.relation in events.tables
        for name in kept.names
    )


def owned_events(
    changes: Mapping[str, EventChanges], data: EpochInput, partitions: set[Partition]
) -> dict[str, EventChanges]:
    """The event changes decided by updates from ``partitions``."""
    out: dict[str, EventChanges] = {}
    for name, change in changes.items():
        mask = data.from_partitions(change.seq, partitions)
        if mask.any():
            out[name] = EventChanges(change.eids[mask], change.diff[mask], change.seq[mask])
    return out
