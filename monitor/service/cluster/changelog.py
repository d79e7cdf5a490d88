"""The changelog: a worker with a new or lost volume rebuilds its index from it.

With its seeds, the owner of a change writes it to a compacted changelog topic (key
``[relation, [ids]]``, value ``{"epoch": E}``, a tombstone on delete), in the seed transaction. A
worker with a new or lost volume rebuilds its index from the changelog at the last epoch every
partition completed, never from the input topics' retention. The changelog is created with
``min.compaction.lag.ms`` of an hour, so the records of recent epochs are never compacted away
under a rebuild that still needs them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from confluent_kafka import (
    Consumer,
)
from confluent_kafka import TopicPartition as TP

from connectors.changelog_json import CLOCK_KEY
from connectors.events import EventRecord, FieldTypes, decode_event
from connectors.kafka_records import Partition, updates_batch
from connectors.kafka_retry import (
    committed_offsets,
    epoch_header,
    read_to_end,
)
from core.errors import StateError
from core.records import Update, UpdateBatch
from monitor.index.store import StateStore
from monitor.index.stored_meta import StoredMeta
from monitor.service.cluster.control import (
    EpochSpec,
    changelog_topic,
    control_topic,
    ends_json,
)
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

log = logging.getLogger(__name__)


def rebuild_from_changelog(
    settings: Settings,
    processor: EpochProcessor,
    store: StateStore,
    meta: StoredMeta,
    client: Mapping[str, str | int | float | bool],
    partitions: Sequence[Partition],
) -> StoredMeta:
    """The index at the last epoch every input partition completed, from the changelog.

    Read in this order: the control topic (the epochs' end offsets), the group's committed
    offsets (which epoch every partition completed: F), the changelog's end, then the changelog
    up to that end, keeping per tuple its last record of an epoch up to F. Records of later
    epochs are skipped: their epochs are read from the input as usual.
    """
    started = time.perf_counter()
    probe = Consumer(
        {
            **client,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        control = TP(control_topic(settings), 0)
        specs = [
            EpochSpec.from_json(m.value() or b"{}", m.offset() or 0)
            for m in read_to_end(probe, [control])
        ]
        committed = {
            (tp.topic, tp.partition): tp.offset for tp in committed_offsets(probe, partitions)
        }
        done = [s for s in specs if all(committed.get(p, -1) >= e for p, e in s.ends.items())]
        if not done:
            log.info("state is new and the cluster has no completed epoch: starting at epoch 0")
            return meta
        frontier = done[-1]
        log_partitions = [TP(changelog_topic(settings), 0)]
        present: dict[bytes, bytes | None] = {}
        records = 0
        for message in read_to_end(probe, log_partitions):
            records += 1
            epoch = epoch_header(message)
            if epoch is None or epoch > frontier.epoch:
                continue
            present[message.key() or b""] = message.value()
    finally:
        probe.close()
    processor.preload(_live(present, processor.field_types), timed=False)
    processor.index.commit()
    processor.clock.restore({"watermark": None, "top": _clock(present)})
    processor.epoch = frontier.epoch
    position = {
        "cluster": {"control": frontier.offset + 1, **ends_json(frontier.ends)},
        "clock": processor.clock.to_dict(),
    }
    meta = StoredMeta(
        epoch=frontier.epoch, position=position, queries=meta.queries, settings=meta.settings
    )
    meta = store.commit_epoch(processor.index, meta, {}, 0, snapshot=True)
    log.info(
        "state rebuilt from the changelog",
        extra={
            "changelog_topic": changelog_topic(settings),
            "epoch": frontier.epoch,
            "tuples": processor.index.edge_count(),
            "changelog_records": records,
            "seconds": time.perf_counter() - started,
        },
    )
    return meta


def _clock(present: Mapping[bytes, bytes | None]) -> dict[str, list[float]]:
    """Per input partition the event times its last clock record holds."""
    out = {}
    for key, value in present.items():
        decoded: list[Any] = orjson.loads(key)
        if decoded[0] == CLOCK_KEY and value is not None:
            out[str(decoded[1])] = [float(t) for t in orjson.loads(value)["times"]]
    return out


def _live(present: Mapping[bytes, bytes | None], types: FieldTypes | None) -> UpdateBatch:
    """The live tuples (key ``[relation, [ids]]``) and events (key ``[relation, id]``, the
    event in the value) of the changelog's last records, as one batch."""
    updates: list[Update] = []
    events: list[tuple[int, EventRecord]] = []
    for key, value in present.items():
        if value is None:
            continue
        decoded: list[Any] = orjson.loads(key)
        relation = str(decoded[0])
        if relation == CLOCK_KEY:
            continue
        if isinstance(decoded[1], list):
            updates.append(Update(relation, tuple(decoded[1]), 1))
            continue
        if types is None or relation not in types.relations:
            raise StateError(
                f"the changelog holds events of {relation!r}, which this run's queries do not "
                f"read as events; deploy the queries that wrote it, or a new changelog"
            )
        event = orjson.loads(value)["event"]
        position = f"changelog {key.decode(errors='replace')}"
        events.append(
            (len(updates) + len(events), decode_event(event, relation, 1, position, types))
        )
    return updates_batch(updates, events, 0, types)
