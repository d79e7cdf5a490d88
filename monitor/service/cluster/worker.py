"""One worker of the group: stage every epoch, seed and publish its own partitions, commit."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from confluent_kafka import (
    KafkaException,
)

from connectors.kafka_records import (
    Partition,
    parse_partition_key,
    partition_key,
)
from connectors.kafka_sink import KafkaSink
from connectors.registry_records import RecordFormats
from core.errors import ConfigError, StateError
from monitor.engine.owned import ChangedTuples, supports
from monitor.failpoints import failpoint
from monitor.index.events import EventChanges
from monitor.index.graph import Change
from monitor.index.store import StateStore
from monitor.index.stored_meta import StoredMeta
from monitor.query.ast import Query
from monitor.service import registry
from monitor.service.cluster.barrier import wait_for_epoch
from monitor.service.cluster.control import (
    EpochSpec,
    changelog_topic,
    ends_json,
)
from monitor.service.cluster.epoch_input import (
    EpochInput,
    decode_epoch,
    owned_changes,
    owned_events,
    owns_tables,
    table_relations,
)
from monitor.service.cluster.group import GroupMember
from monitor.service.cluster.leader import Leader
from monitor.service.cluster.reader import Reader
from monitor.service.epoch_output import EpochOutput
from monitor.service.epochs import EpochProcessor
from monitor.service.health import Health
from monitor.service.metrics import Metrics
from monitor.service.settings import Settings

log = logging.getLogger(__name__)


def check_queries(settings: Settings, queries: Sequence[Query]) -> None:
    """Refuse, at start, queries whose output scale-out cannot publish as the single worker
    would: consolidation across workers needs every binding to be one join row."""
    if not settings.consolidate_across_workers:
        return
    projected = [q.name for q in queries if not supports(q)]
    if projected:
        raise ConfigError(
            f"scale-out publishes each changed binding once, which needs every query's head to "
            f"name all its body variables; {', '.join(projected)} project some away: list "
            f"every variable in the head, or run one worker (no SGM_CONTROL_TOPIC)"
        )


@dataclass
class Worker:
    """One worker of the group: its index, its consumers, its transactional sink."""

    settings: Settings
    processor: EpochProcessor
    store: StateStore
    metrics: Metrics
    health: Health
    reader: Reader
    group: GroupMember
    partitions: list[Partition]
    producer_config: Mapping[str, str | int | float | bool]
    version: str
    new_sink: Callable[[], KafkaSink]
    sink: KafkaSink
    #: The last epoch this worker applied (from its stored state at start): where the next
    #: epoch must start, and what a new leader numbers on from.
    applied: EpochSpec | None = None
    leader: Leader | None = None
    #: How the input topics' values are read (None: all JSON).
    formats: RecordFormats | None = None

    def step(self, timeout: float = 0.1) -> None:
        """Serve the group and the leadership, then process the next epoch if there is one."""
        self.health.beat()
        self._serve_group()
        spec = self.reader.next_spec(timeout)
        if spec is None:
            self.health.set_recovered(True)
            return
        if spec.epoch <= self.processor.epoch:
            return  # applied already (the control topic is read from the stored position)
        if spec.epoch != self.processor.epoch + 1:
            raise StateError(
                f"the control topic jumps from epoch {self.processor.epoch} to {spec.epoch}"
            )
        check_continues(self.applied, spec)
        if self.reader.specs:
            self.health.set_recovered(False)  # catching up: more epochs are waiting
        self.run_epoch(spec)

    def _serve_group(self) -> None:
        self.group.poll()
        if self.group.assigned_once:
            self.health.set_assigned(True)
        leads = self.reader.control in self.group.owned
        if leads and self.leader is None:
            self.leader = Leader(self.settings, self.producer_config, self.reader, self.version)
        elif not leads and self.leader is not None:
            log.info("no longer leading")
            self.leader.close()
            self.leader = None
        if self.leader is not None:
            try:
                self.leader.tick(self.applied)
            except KafkaException as exc:
                log.warning("publishing an epoch failed (%s); leading anew", exc)
                self.leader.close()
                self.leader = None

    def run_epoch(self, spec: EpochSpec) -> None:
        """Stage ``spec``, publish the partitions this worker owns that are still to do, wait
        until every partition is done, then commit the epoch to the index and the store."""
        started = time.perf_counter()
        messages = self.reader.read_epoch(spec, self.health)
        data = registry.retrying(
            lambda: decode_epoch(
                messages,
                self.settings,
                self.processor.field_types,
                self.processor.arities,
                self.formats,
            ),
            self.health,
            f"epoch {spec.epoch} is decoded again",
            {"epoch": spec.epoch},
        )
        if data is None:  # (a stop requested while the registry did not answer)
            return
        read = time.perf_counter()
        vertices = len(self.processor.index.dictionary)
        staged = self.processor.stage(data.batch)
        deltas = 0
        published = 0.0

        def publish(mine: set[Partition]) -> None:
            nonlocal deltas, published
            deltas += self._publish(spec, staged, data, mine)
            published = time.perf_counter()

        done = wait_for_epoch(
            spec, self.group, self.partitions, publish, self._serve_group, self.health
        )
        if not done:
            self.processor.abort()
            return
        self.processor.commit()
        position = {
            "cluster": {"control": spec.offset + 1, **ends_json(spec.ends)},
            "clock": self.processor.clock.to_dict(),
        }
        previous = self.store.meta or StoredMeta()
        meta = StoredMeta(
            epoch=spec.epoch,
            position=position,
            queries=previous.queries,
            settings=previous.settings,
        )
        self.store.commit_epoch(
            self.processor.index, meta, staged.changes, vertices, event_changes=staged.event_changes
        )
        self.applied = spec
        now = time.time()
        self.metrics.epoch(time.perf_counter() - started, spec.records)
        self.metrics.committed(spec.epoch, 0.0, [], now)
        self.metrics.ignored(staged.ignored)
        self.metrics.index(
            {name: len(rel) for name, rel in self.processor.index.relations.items()},
            self.processor.index.nbytes,
        )
        self.metrics.events(self.processor.events.stored(), self.processor.events.field_bytes())
        self.metrics.time.epoch(
            staged.watermark, self.processor.clock.partitions(), staged.expired_by, staged.late_by
        )
        log.info(
            "epoch committed",
            extra={
                "epoch": spec.epoch,
                "updates": spec.records,
                "deltas": deltas,
                "leader": spec.leader,
                "read_s": round(read - started, 4),
                "published_s": round(published - started, 4) if published else None,
                "barrier_s": round(time.perf_counter() - (published or read), 4),
                "offsets": {partition_key(p): o for p, o in spec.ends.items()},
            },
        )

    def _write_changelog(
        self,
        epoch: int,
        changes: Mapping[str, Change],
        events: Mapping[str, EventChanges],
        mine: set[Partition],
    ) -> None:
        """The owned changes of the epoch's tuples and events (never of the relations derived
        from events: a rebuild derives them again)."""
        index = self.processor.index
        decode = index.dictionary.decode
        topic = changelog_topic(self.settings)
        for name, change in changes.items():
            if name not in index.derived:
                columns = [decode(c) for c in change.columns]
                self.sink.write_changelog(topic, name, epoch, columns, change.diff)
        owned = {partition_key(p) for p in mine}
        for partition, times in sorted(self.processor.clock.staged_times(owned).items()):
            self.sink.write_clock_changelog(topic, epoch, partition, times)
        for name, store in sorted(index.event_stores.items()):
            changed = events.get(name)
            if changed is not None:
                deletes_first = np.argsort(changed.diff > 0, kind="stable")
                eids = changed.eids[deletes_first]
                self.sink.write_event_changelog(
                    topic, name, epoch, store.columns(eids, decode), changed.diff[deletes_first]
                )

    def _publish(
        self, spec: EpochSpec, staged: EpochOutput, data: EpochInput, mine: set[Partition]
    ) -> int:
        """One transaction: the deltas seeded by ``mine``'s changes, their dead letters and
        changelog records, and ``mine``'s offsets at the epoch's end. Returns the deltas."""
        commit_started = time.perf_counter()
        tables = table_relations(self.processor)
        changes = owned_changes(staged.changes, data, mine, tables)
        if mine >= set(data.partitions):
            # Every partition in one transaction: no other worker publishes any of this epoch,
            # so the sum over this worker's seeds is already the single worker's output.
            outputs = self.processor.evaluate(changes)
        elif self.settings.consolidate_across_workers:
            wanted = np.array([p in mine for p in data.partitions], np.bool_)
            changed = ChangedTuples.of(
                self.processor.index,
                staged.changes,
                lambda seq: wanted[data.owners(seq)],
                dict.fromkeys(tables, owns_tables(data, mine)),
            )
            outputs = self.processor.evaluate_decided(changes, changed)
        else:
            outputs = self.processor.evaluate(changes)
        try:
            self.sink.begin()
            for q in outputs:
                self.sink.write_deltas(
                    q.query, spec.epoch, q.variables, q.columns, q.diff, q.edges, q.extra
                )
            refused = {p: data.polled[p].refused(staged.late) for p in mine}
            for p in sorted(mine):
                for letter in [*data.polled[p].dead_letters, *refused[p]]:
                    self.sink.write_dead_letter(letter)
            self._write_changelog(
                spec.epoch, changes, owned_events(staged.event_changes, data, mine), mine
            )
            self.sink.flush()  # on the broker, in the open transaction (commit would flush too)
            failpoint("worker_before_commit")
            self.sink.commit(
                {p: spec.ends[p] for p in mine}, self.group.group_metadata(), spec.epoch
            )
        except KafkaException as exc:
            self.metrics.aborted()
            log.warning(
                "epoch transaction failed; checking the offsets again",
                extra={
                    "epoch": spec.epoch,
                    "partitions": sorted(map(partition_key, mine)),
                    "error": str(exc),
                },
            )
            self.sink = self.new_sink()
            return 0
        now = time.time()
        latencies = [now - t for p in mine for t in data.polled[p].timestamps]
        self.metrics.committed(spec.epoch, time.perf_counter() - commit_started, latencies, now)
        for p in mine:
            polled = data.polled[p]
            for topic, n in polled.per_topic.items():
                self.metrics.consumed(topic, n)
            for letter in [*polled.dead_letters, *refused[p]]:
                self.metrics.dead_letter(letter.category)
        for q in outputs:
            plus = int((q.diff > 0).sum())
            self.metrics.deltas(q.query, plus, len(q) - plus)
        self.metrics.output_waited(self.sink.take_waited())
        n = sum(len(q) for q in outputs)
        log.info(
            "seeds published",
            extra={
                "epoch": spec.epoch,
                "partitions": sorted(partition_key(p) for p in mine),
                "deltas": n,
                "offsets": {partition_key(p): spec.ends[p] for p in sorted(mine)},
            },
        )
        return n

    def close(self) -> None:
        if self.leader is not None:
            self.leader.close()
        self.group.close()
        self.reader.close()
        self.sink.flush()


def stored_positions(meta: StoredMeta) -> tuple[dict[Partition, int], int]:
    """Input offsets and the control offset the stored state reaches."""
    cluster = meta.position.get("cluster") or {}
    kafka = {parse_partition_key(k): int(v) for k, v in (cluster.get("kafka") or {}).items()}
    return kafka, int(cluster.get("control", 0))


def stored_spec(meta: StoredMeta) -> EpochSpec | None:
    """The epoch the stored state applied last: its number, its ends and its control record."""
    if meta.epoch == 0:
        return None
    positions, control_offset = stored_positions(meta)
    return EpochSpec(meta.epoch, {}, positions, offset=control_offset - 1)


def check_continues(applied: EpochSpec | None, spec: EpochSpec) -> None:
    """Refuse an epoch that does not start where the applied one ended: applying it would
    skip or repeat input records (two leaders that numbered epochs apart)."""
    if applied is None:
        return
    gaps = {
        partition_key(p): (applied.ends[p], start)
        for p, start in spec.starts.items()
        if p in applied.ends and applied.ends[p] != start
    }
    if gaps:
        raise StateError(
            f"epoch {spec.epoch} (control offset {spec.offset}, leader {spec.leader or '?'}) "
            f"does not start where epoch {applied.epoch} ended: (ended, starts) {gaps}"
        )
