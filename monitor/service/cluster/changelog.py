"""The changelog: a worker with a new or lost volume rebuilds its index from it.

With its seeds, the owner of a change writes it to a compacted changelog topic (key
``[relation, [ids]]``, value ``{"epoch": E}``, a tombstone on delete), in the seed transaction. A
worker with a new or lost volume rebuilds its index from the changelog at the last epoch every
partition completed, never from the input topics' retention. The changelog is created with
``min.compaction.lag.ms`` of an hour, so the records of recent epochs are never compacted away
under a rebuild that still needs them. The rebuild reads the records, keeps each key's last one
of an epoch up to the frontier, and decodes the live ones together
(:func:`connectors.changelog_json.live_batch`).
"""

from __future__ import annotations

import gc
import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import compress

import numpy as np
from confluent_kafka import (
    Consumer,
)
from confluent_kafka import TopicPartition as TP

from connectors.changelog_json import live_batch
from connectors.kafka_records import Partition
from connectors.kafka_retry import (
    committed_offsets,
    read_to_end,
    wait_resolved,
)
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

#: The epoch of a changelog record without an epoch header: later than any.
NO_EPOCH = str(2**63 - 1).encode()

#: The epoch a changelog value begins with (``connectors.changelog_json`` writes it first).
VALUE_EPOCH = re.compile(rb'\{"epoch":(\d+)[,}]')

Headers = dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None


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
    offsets (which epoch every partition completed: F), the changelog's end (waiting until no
    transaction open below it hides records: a worker killed inside one leaves it open until
    the broker aborts it), then the changelog up to that end, keeping per tuple its last record
    of an epoch up to F. Records of later epochs are skipped: their epochs are read from the
    input as usual.
    """
    started = time.perf_counter()
    uncommitted = Consumer({**client, "isolation.level": "read_uncommitted"})
    probe = Consumer(
        {
            # Fetches of up to 16 MiB: the changelog is read from its start, and librdkafka's
            # 1 MiB per partition took twice as long (bench/NOTES.md, issue #14). A fetch that
            # finds nothing new returns at once: the broker answers a connection's requests in
            # order, so the changelog's end offset waited behind the control topic's last fetch.
            "max.partition.fetch.bytes": 16 << 20,
            "fetch.max.bytes": 64 << 20,
            "fetch.wait.max.ms": 10,
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
        # The frontier's records were committed before its offsets were, so they lie below the
        # changelog's end now; a zombie's open transaction below them would hide them.
        changelog = TP(changelog_topic(settings), 0)
        wait_resolved(probe, uncommitted, changelog, "the changelog")
        keys: list[bytes] = []
        values: list[bytes | None] = []
        epochs: list[bytes] = []
        for message in read_to_end(probe, [changelog]):
            keys.append(message.key() or b"")
            values.append(message.value())
            epochs.append(_epoch(message.headers(), values[-1]))
    finally:
        probe.close()
        uncommitted.close()
    read = time.perf_counter()
    records = len(keys)
    kept = (np.array(epochs, np.bytes_).astype(np.int64) <= frontier.epoch).tolist()
    present = dict(zip(compress(keys, kept), compress(values, kept), strict=True))
    live = [(k, v) for k, v in present.items() if v is not None]
    with collection_paused():
        batch, clock = live_batch([k for k, _ in live], [v for _, v in live], processor.field_types)
    processor.preload(batch, timed=False)
    processor.index.commit()
    processor.clock.restore({"watermark": None, "top": clock})
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
            "read_s": round(read - started, 3),
            "seconds": time.perf_counter() - started,
        },
    )
    return meta


def _epoch(headers: Headers, value: bytes | None) -> bytes:
    """The text of a record's epoch: its ``epoch`` header (tombstones, and every record of
    earlier versions), else the leading ``{"epoch":E`` of its value; a record with neither is of
    no epoch a rebuild keeps (the largest)."""
    for name, text in headers.items() if isinstance(headers, dict) else headers or ():
        if name == "epoch" and text is not None:
            return text.encode() if isinstance(text, str) else text
    found = VALUE_EPOCH.match(value) if value is not None else None
    return found.group(1) if found is not None else NO_EPOCH


@contextmanager
def collection_paused() -> Iterator[None]:
    """No garbage collection while a whole changelog is decoded: it makes a list per key at
    once, and the collections they set off walk the worker's whole heap (decoding the keys of
    ego-Facebook's changelog took 0.82 s with them and 0.07 s without, under cProfile)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
