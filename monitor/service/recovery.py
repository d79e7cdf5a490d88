"""Recovery of the service: the stored state, and the records it missed.

At start the stored index is loaded and checked against the settings and queries it was built
with. On assignment, a partition whose offset committed in Kafka is ahead of the stored one holds
records whose output is already committed but that the store does not include (a crash between
the two commits). They are read again and applied to the index as one epoch without emitting
anything (:func:`catch_up`); then the stream goes on from the committed offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_BEGINNING

from connectors.kafka import KafkaSource
from connectors.kafka_records import Partition, parse_partition_key, partition_key
from core.errors import StateError
from core.records import UpdateBatch
from monitor.index.store import StateStore
from monitor.index.stored_meta import StoredMeta
from monitor.service import registry
from monitor.service.epochs import EpochProcessor
from monitor.service.health import Health
from monitor.service.metrics import Metrics
from monitor.service.settings import Settings

if TYPE_CHECKING:
    from monitor.service.engines import ServiceEngine

log = logging.getLogger(__name__)

#: How long reading the records of a catch-up may take.
CATCH_UP_SECONDS = 300.0


@dataclass
class Positions:
    """Per partition, the offset after the last record the stored state includes."""

    stored: dict[Partition, int] = field(default_factory=dict)
    catch_up: dict[Partition, int] = field(default_factory=dict)
    #: The last epoch Kafka committed of the partitions to catch up on (-1: none known).
    catch_up_epoch: int = -1

    @classmethod
    def of(cls, meta: StoredMeta | None) -> Positions:
        return cls.from_json(meta.position if meta else {})

    @classmethod
    def from_json(cls, position: Mapping[str, Any]) -> Positions:
        """The positions of a stored ``position`` (its ``kafka`` part)."""
        raw = position.get("kafka") or {}
        return cls({parse_partition_key(k): int(v) for k, v in raw.items()})

    def to_json(self) -> dict[str, dict[str, int]]:
        return {"kafka": {partition_key(p): o for p, o in sorted(self.stored.items())}}


def load_state(
    settings: Settings, processor: EpochProcessor, store: StateStore, mode: str = "kafka"
) -> StoredMeta:
    meta = store.meta
    texts = tuple(str(q) for q in processor.queries)
    wanted = {
        "mode": mode,
        "undirected": settings.undirected,
        "default_relation": settings.default_relation,
        "topic_relations": dict(sorted(settings.topic_relations.items())),
    }
    if meta is None:
        position: dict[str, object] = {"kafka": {}} if mode == "kafka" else {}
        meta = StoredMeta(epoch=0, position=position, queries=texts, settings=wanted)
        return store.commit_epoch(processor.index, meta, {}, 0)
    for name, value in wanted.items():
        if meta.settings.get(name) != value:
            raise StateError(
                f"state in {store.path} was built with {name}={meta.settings.get(name)!r}, this "
                f"service has {name}={value!r}; use the same setting, or a new state directory "
                f"and consumer group"
            )
    if meta.queries != texts:
        raise StateError(
            f"state in {store.path} was built for the queries {list(meta.queries)}, this "
            f"service has {list(texts)}; changing queries of a running Kafka service is not "
            f"supported yet: deploy the new queries with a new state directory and group id"
        )
    started = time.perf_counter()
    processor.restore(store)
    processor.epoch = meta.epoch
    log.info(
        "state loaded",
        extra={
            "state_dir": str(store.path),
            "epoch": meta.epoch,
            "tuples": processor.index.edge_count(),
            "seconds": time.perf_counter() - started,
        },
    )
    return meta


def assigned(
    partitions: list[Partition],
    source: KafkaSource,
    positions: Positions,
    metrics: Metrics,
    health: Health,
) -> Mapping[Partition, int]:
    """Where each assigned partition starts; partitions to catch up on are noted."""
    metrics.rebalanced()
    starts = resume_at(partitions, source, positions, "partition assigned")
    if positions.catch_up:  # (not ready until the state holds what Kafka committed)
        health.set_recovered(False)
    health.set_assigned(True)
    return starts


def resume_at(
    partitions: list[Partition], source: KafkaSource, positions: Positions, event: str
) -> dict[Partition, int]:
    """Where each partition is read on from, given the stored positions and the group's
    committed offsets; partitions to catch up on are noted in ``positions``."""
    committed = source.committed_epochs(partitions)
    starts: dict[Partition, int] = {}
    for partition in partitions:
        kafka, kafka_epoch = committed.get(partition, (None, None))
        stored = positions.stored.get(partition)
        if stored is not None and kafka is not None and stored > kafka:
            raise StateError(
                f"partition {partition_key(partition)}: the state includes offsets up to "
                f"{stored} but the group's committed offset is {kafka}; the state belongs to "
                f"another group or cluster: give a new state directory"
            )
        if stored is not None:
            starts[partition] = stored
            if kafka is not None and kafka > stored:
                positions.catch_up[partition] = kafka
        elif kafka is not None:
            # The group consumed this partition, but the state holds none of it (the crash came
            # right after its first epoch, or the state directory is new): rebuild it from the
            # start of the partition, emitting nothing up to the committed offset.
            starts[partition] = OFFSET_BEGINNING
            positions.catch_up[partition] = kafka
        elif source.holds_table(partition[0]):
            starts[partition] = OFFSET_BEGINNING  # (a table's topic is read whole, whatever
            # auto.offset.reset says: its compacted records are the table)
        elif source.reset_start is not None:
            # New to the group: where auto.offset.reset says, given now (faster than letting
            # librdkafka look for a committed offset again, :data:`~connectors.kafka.RESET_STARTS`)
            starts[partition] = source.reset_start
        if partition in positions.catch_up and kafka_epoch is not None:
            positions.catch_up_epoch = max(positions.catch_up_epoch, kafka_epoch)
        log.info(
            event,
            extra={
                "partition": partition_key(partition),
                "offset": starts.get(partition),
                "committed": kafka,
                "committed_epoch": kafka_epoch,  # (the epoch whose transaction committed it)
                "stored": stored,
            },
        )
    return starts


def revoked(partitions: list[Partition], metrics: Metrics, health: Health) -> None:
    log.info("partitions revoked", extra={"partitions": [partition_key(p) for p in partitions]})
    health.set_assigned(False)


def catch_up(
    settings: Settings,
    engine: ServiceEngine,
    source: KafkaSource,
    positions: Positions,
    health: Health,
) -> None:
    """Apply the records between the stored and the committed offsets, emitting nothing."""
    batches: list[UpdateBatch] = []
    reached: dict[Partition, int] = {}
    deadline = time.monotonic() + CATCH_UP_SECONDS
    while not all(
        reached.get(p, positions.stored.get(p, 0)) >= o for p, o in positions.catch_up.items()
    ):
        if time.monotonic() > deadline:
            wanted = {partition_key(p): o for p, o in positions.catch_up.items()}
            got = {partition_key(p): o for p, o in reached.items()}
            raise StateError(
                f"could not read the records up to the committed offsets {wanted} within "
                f"{CATCH_UP_SECONDS:.0f} s (read up to {got}); are they still in the topic's "
                f"retention?"
            )
        health.beat()
        polled = registry.poll(source, health, settings.batch_size, 1.0, stop_at=positions.catch_up)
        batches.append(polled.batch)
        reached.update(polled.next_offsets)
        log.debug(
            "catching up", extra={"reached": {partition_key(p): o for p, o in reached.items()}}
        )
    batch = UpdateBatch.concat(batches)
    # (numbered as Kafka numbered the last of them: where the state lost several epochs, the
    # output's epochs go on from Kafka's, never back)
    engine.number_from(positions.catch_up_epoch)
    out = engine.process(batch)
    positions.stored.update(reached)
    positions.stored.update(positions.catch_up)
    engine.commit(out, positions)
    log.info(
        "caught up without emitting: the output of these records was already committed",
        extra={
            "epoch": out.epoch,
            "updates": batch.count,
            "partitions": {partition_key(p): o for p, o in positions.catch_up.items()},
        },
    )
    positions.catch_up = {}
    positions.catch_up_epoch = -1


def stored_meta(
    store: StateStore, processor: EpochProcessor, positions: Positions, epoch: int
) -> StoredMeta:
    previous = store.meta or StoredMeta()
    return StoredMeta(
        epoch=epoch,
        position={**positions.to_json(), "clock": processor.clock.to_dict()},
        queries=previous.queries,
        settings=previous.settings,
    )
