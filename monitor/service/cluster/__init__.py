"""Scale-out: several workers in one consumer group, one exact result (``SGM_CONTROL_TOPIC``).

Every worker keeps the whole index and applies every epoch; each seeds the delta queries only
with the changes of the input partitions the group assigned to it, and publishes those deltas
with the partitions' offsets in one transaction. Because the delta of an epoch is the sum of
the delta queries over the epoch's changes, and the changes are split by partition without
overlap, the union of the workers' output is the single worker's output, epoch by epoch.

Roles and topics:

- **Epochs are global.** The leader, the worker the group assigned the control topic's only
  partition, publishes each epoch as a record ``{epoch, starts, ends}`` (offsets per input
  partition) in a transaction of the fixed transactional id ``subgraph-monitor-GROUP-leader``.
  A new leader's ``init_transactions`` fences the old one, whose open transaction is aborted,
  and it reads the control topic to its end before publishing: a deposed leader cannot
  publish, and no epoch number is published twice.
- **Every worker reads everything.** A second consumer, assigned (not subscribed) every input
  partition and the control partition, reads each epoch's records in a fixed order (by topic and
  partition, then offset), so every worker stages the same changes and nets them the same way.
  A change belongs to the partition of the update that decided it.
- **Who seeds what is decided by the committed offsets.** For epoch E a worker publishes the
  partitions it owns whose committed group offset is still below E's end. The offsets are
  committed in the transaction (``send_offsets_to_transaction`` with the group's generation), so
  a worker that lost a partition in a rebalance cannot commit it any more (the broker refuses the
  stale generation and the transaction aborts), and its new owner sees from the offset whether
  the epoch is still to do. A worker commits epoch E to its index and state only when every
  input partition's offset reached E's end (the barrier), so a partition taken over mid-epoch is
  always seeded against the index state it needs.
- **The changelog.** With its seeds, the owner of a change writes it to a compacted changelog
  topic (key ``[relation, [ids]]``, value ``{"epoch": E}``, a tombstone on delete). A worker
  with a new or lost volume rebuilds its index from the changelog at the last epoch every
  partition completed, never from the input topics' retention. The changelog is created with
  ``min.compaction.lag.ms`` of an hour, so the records of recent epochs are never compacted
  away under a rebuild that still needs them.

A binding may get +1 from one worker and -1 from another in the same epoch (two of its edges
changed, in partitions of different owners); the single worker would have published nothing.
Summed per epoch, the output is the same; docs/scale-out.md explains it.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from connectors.kafka_records import Partition
from monitor.index.store import StateStore
from monitor.service import registry
from monitor.service.clients import client_config, new_sink, service_version
from monitor.service.cluster.changelog import rebuild_from_changelog
from monitor.service.cluster.control import control_topic, ensure_topics, input_partitions
from monitor.service.cluster.group import GroupMember
from monitor.service.cluster.reader import Reader, check_retention
from monitor.service.cluster.worker import Worker, check_queries, stored_positions, stored_spec
from monitor.service.epochs import EpochProcessor
from monitor.service.health import Health
from monitor.service.metrics import Metrics
from monitor.service.recovery import load_state
from monitor.service.settings import Settings
from monitor.service.stop import Stop

log = logging.getLogger(__name__)


def run_cluster(
    settings: Settings,
    processor: EpochProcessor,
    store: StateStore,
    metrics: Metrics,
    health: Health,
) -> int:
    """Scale-out (``SGM_CONTROL_TOPIC``): one worker of several; see ``cluster``."""
    check_queries(settings, processor.queries)
    # (a worker evaluates the changes of the partitions it owns: the matches are not its own)
    processor.kept.drop_all("scale-out evaluates each worker's partitions apart")
    fresh = store.meta is None
    meta = load_state(settings, processor, store, mode="cluster")
    client = client_config(settings, consumer=False)
    client["group.id"] = settings.group_id
    partitions = _cluster_topics(settings, health)
    if partitions is None:
        return 0
    health.set_broker_reachable(True)
    if fresh or "cluster" not in meta.position:
        meta = rebuild_from_changelog(settings, processor, store, meta, client, partitions)
    metrics.last_committed_epoch.set(meta.epoch)
    positions, control_offset = stored_positions(meta)
    reader = Reader(client, partitions, (control_topic(settings), 0), positions, control_offset)
    check_retention(reader, positions, store.path)
    group = GroupMember(
        client_config(settings, consumer=True),
        [*settings.input_topics, control_topic(settings)],
        metrics,
    )
    worker = Worker(
        settings,
        processor,
        store,
        metrics,
        health,
        reader,
        group,
        partitions,
        client_config(settings, consumer=False),
        service_version(),
        lambda: new_sink(settings),
        new_sink(settings),
        applied=stored_spec(meta),
        formats=registry.record_formats(settings, processor.field_types),
    )
    log.info(
        "worker started",
        extra={
            "epoch": processor.epoch,
            "control_topic": control_topic(settings),
            "partitions": len(partitions),
            "instance": settings.instance_id,
        },
    )
    try:
        while not Stop.requested:
            worker.step()
        log.info("stopping after epoch %d as requested", processor.epoch)
        return 0
    finally:
        worker.close()


def _cluster_topics(settings: Settings, health: Health) -> list[Partition] | None:
    """The input partitions, once the control and changelog topics exist (retrying while
    the broker is unreachable; None when stopped meanwhile)."""
    delay = 1.0
    while not Stop.requested:
        try:
            admin = AdminClient(client_config(settings, consumer=False))
            ensure_topics(admin, settings)
            return input_partitions(admin, settings.input_topics)
        except KafkaException as error:
            health.set_broker_reachable(False)
            log.warning("Kafka is not reachable (%s); retrying in %.0f s", error, delay)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
    return None
