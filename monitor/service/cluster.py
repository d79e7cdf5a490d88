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
Summed per epoch, the output is the same; the README explains it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import numpy as np
import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
)
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec
from confluent_kafka.cimpl import NewTopic

from connectors.kafka import (
    KafkaSink,
    Partition,
    Polled,
    parse_partition_key,
    partition_key,
    take_message,
)
from connectors.records import Update, UpdateBatch
from monitor.engine.owned import change_owner, supports
from monitor.errors import ConfigError, StateError
from monitor.failpoints import failpoint
from monitor.index.graph import Change
from monitor.index.store import StateStore, StoredMeta
from monitor.query.ast import Query
from monitor.service.epochs import EpochOutput, EpochProcessor
from monitor.service.health import Health
from monitor.service.metrics import Metrics
from monitor.service.settings import Settings
from monitor.service.stop import Stop

log = logging.getLogger(__name__)

#: The changelog keeps every record younger than this uncompacted (a rebuild reads them).
CHANGELOG_COMPACTION_LAG_MS = 3_600_000
EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
#: How often the leader looks at the input partitions' end offsets.
LEADER_CHECK_SECONDS = 0.05
#: How long a worker waits between checks of the barrier.
BARRIER_POLL_SECONDS = 0.02
#: A partition's read-ahead buffer is paused above this many records.
MAX_BUFFERED = 200_000


@dataclass(frozen=True)
class EpochSpec:
    """One global epoch: for every input partition, the offsets it covers ``[start, end)``."""

    epoch: int
    starts: dict[Partition, int]
    ends: dict[Partition, int]
    leader: str = ""
    offset: int = -1  # of the control record

    @property
    def records(self) -> int:
        return sum(self.ends[p] - self.starts.get(p, 0) for p in self.ends)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "epoch": self.epoch,
                "starts": {partition_key(p): o for p, o in sorted(self.starts.items())},
                "ends": {partition_key(p): o for p, o in sorted(self.ends.items())},
                "leader": self.leader,
                "at": time.time(),
            }
        )

    @classmethod
    def from_json(cls, value: bytes, offset: int) -> EpochSpec:
        data = orjson.loads(value)
        return cls(
            int(data["epoch"]),
            {parse_partition_key(k): int(v) for k, v in data["starts"].items()},
            {parse_partition_key(k): int(v) for k, v in data["ends"].items()},
            str(data.get("leader", "")),
            offset,
        )


def check_queries(settings: Settings, queries: Sequence[Query]) -> None:
    """Refuse consolidation across workers for queries whose bindings are not join rows."""
    if not settings.consolidate_across_workers:
        return
    projected = [q.name for q in queries if not supports(q)]
    if projected:
        raise ConfigError(
            f"consolidate_across_workers needs every query's head to name all its variables; "
            f"{', '.join(projected)} project some away: drop the setting or list them in the head"
        )


def control_topic(settings: Settings) -> str:
    if not settings.control_topic:
        raise StateError("scale-out needs SGM_CONTROL_TOPIC")
    return settings.control_topic


def changelog_topic(settings: Settings) -> str:
    return settings.changelog_topic or f"{settings.group_id}-changelog"


def ensure_topics(admin: AdminClient, settings: Settings) -> None:
    """Create the control and changelog topics when they do not exist yet."""
    wanted = {
        control_topic(settings): NewTopic(
            control_topic(settings), num_partitions=1, replication_factor=-1
        ),
        changelog_topic(settings): NewTopic(
            changelog_topic(settings),
            num_partitions=1,
            replication_factor=-1,
            config={
                "cleanup.policy": "compact",
                "min.compaction.lag.ms": str(CHANGELOG_COMPACTION_LAG_MS),
            },
        ),
    }
    existing = admin.list_topics(timeout=10).topics
    missing = [t for name, t in wanted.items() if name not in existing]
    created = admin.create_topics(missing, operation_timeout=30) if missing else {}
    for name, future in created.items():
        try:
            future.result(timeout=60)
            log.info("topic created", extra={"topic": name})
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    # A topic another worker has just created may have no leader yet: wait for one.
    deadline = time.monotonic() + 60
    while True:
        topics = admin.list_topics(timeout=10).topics
        ready = all(
            name in topics
            and topics[name].error is None
            and topics[name].partitions
            and all(p.leader >= 0 for p in topics[name].partitions.values())
            for name in wanted
        )
        if ready:
            return
        if time.monotonic() > deadline:
            raise StateError(f"topics {sorted(wanted)} have no leader after 60 s")
        time.sleep(0.2)


def input_partitions(admin: AdminClient, topics: Sequence[str]) -> list[Partition]:
    """Every partition of the input topics, sorted: the order every worker reads an epoch in."""
    meta = admin.list_topics(timeout=10).topics
    found: list[Partition] = []
    for topic in topics:
        t = meta.get(topic)
        if t is None or t.error is not None:
            raise StateError(f"input topic {topic!r} does not exist")
        found.extend((topic, p) for p in t.partitions)
    return sorted(found)


class Reader:
    """Reads every input partition and the control partition; assigned, never committing."""

    def __init__(
        self,
        config: Mapping[str, str | int | float | bool],
        partitions: Sequence[Partition],
        control: Partition,
        positions: Mapping[Partition, int],
        control_offset: int,
    ) -> None:
        self.consumer = Consumer(
            {
                **config,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "logger": logging.getLogger("librdkafka.reader"),
            }
        )
        self.partitions = list(partitions)
        self.control = control
        assignment = [TP(t, p, positions.get((t, p), OFFSET_BEGINNING)) for t, p in partitions]
        assignment.append(TP(control[0], control[1], control_offset))
        self.consumer.assign(assignment)
        self.buffers: dict[Partition, deque[Message]] = {p: deque() for p in self.partitions}
        self.paused: set[Partition] = set()
        self.specs: deque[EpochSpec] = deque()
        self.last_spec: EpochSpec | None = None
        # The offset after the last record seen, per partition (the consumer's position is
        # unknown until a first record or marker is read).
        self.seen: dict[Partition, int] = {p: max(positions.get(p, 0), 0) for p in partitions}
        self.seen[control] = max(control_offset, 0)

    def _pump(self, timeout: float) -> None:
        for message in self.consumer.consume(num_messages=5000, timeout=timeout):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(error)
            where = (message.topic() or "", message.partition() or 0)
            self.seen[where] = (message.offset() or 0) + 1
            if where == self.control:
                spec = EpochSpec.from_json(message.value() or b"{}", message.offset() or 0)
                self.specs.append(spec)
                self.last_spec = spec
                continue
            buffer = self.buffers[where]
            buffer.append(message)
            if len(buffer) > MAX_BUFFERED and where not in self.paused:
                self.consumer.pause([TP(where[0], where[1])])
                self.paused.add(where)

    def next_spec(self, timeout: float) -> EpochSpec | None:
        """The next epoch of the control topic, if one arrives within ``timeout``."""
        if not self.specs:
            self._pump(timeout)
        return self.specs.popleft() if self.specs else None

    def position(self, partition: Partition) -> int:
        """The offset the next record of ``partition`` will have, at least (transaction markers
        advance the consumer's position past the last record)."""
        (tp,) = self.consumer.position([TP(partition[0], partition[1])])
        return max(int(tp.offset), self.seen[partition])

    def read_epoch(self, spec: EpochSpec, health: Health) -> dict[Partition, list[Message]]:
        """The records of ``spec``, per input partition in offset order."""
        out: dict[Partition, list[Message]] = {p: [] for p in self.partitions}
        todo = {p for p in self.partitions if spec.ends.get(p, 0) > spec.starts.get(p, 0)}
        while todo:
            for p in list(todo):
                end, buffer = spec.ends[p], self.buffers[p]
                while buffer and (buffer[0].offset() or 0) < end:
                    message = buffer.popleft()
                    if (message.offset() or 0) >= spec.starts.get(p, 0):
                        out[p].append(message)
                if buffer or self.position(p) >= end:
                    todo.discard(p)
                if p in self.paused and len(buffer) < MAX_BUFFERED // 2:
                    self.consumer.resume([TP(p[0], p[1])])
                    self.paused.discard(p)
            if todo:
                health.beat()
                self._pump(0.2)
        return out

    def close(self) -> None:
        self.consumer.close()


def check_retention(reader: Reader, positions: Mapping[Partition, int], where: object) -> None:
    """Refuse a stored state whose input positions the topics no longer hold: reading on from
    the earliest record would silently skip updates."""
    for p, stored in positions.items():
        low, high = _retry(
            partial(reader.consumer.get_watermark_offsets, TP(*p), timeout=10, cached=False)
        )
        if stored < low <= high and high > stored:
            raise StateError(
                f"the state in {where} reaches {partition_key(p)} offset {stored}, but the "
                f"topic now starts at {low} (retention): this worker cannot catch up from the "
                f"input; give it a new volume (delete its state directory or PVC) and it "
                f"rebuilds from the changelog"
            )


class GroupMember:
    """The worker's membership of the consumer group: which partitions it owns; reads nothing.

    Subscribed to the input topics and the control topic, every assigned partition paused: the
    group only says who seeds which partition and who leads; the offsets it holds are committed
    by the workers' transactions.
    """

    def __init__(
        self,
        config: Mapping[str, str | int | float | bool],
        topics: Sequence[str],
        metrics: Metrics,
    ) -> None:
        self.consumer = Consumer(
            {
                **config,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "logger": logging.getLogger("librdkafka.group"),
            }
        )
        self.owned: set[Partition] = set()
        self.assigned_once = False
        self.metrics = metrics
        self.consumer.subscribe(list(topics), on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TP]) -> None:
        consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)
        self.owned = {(tp.topic, tp.partition) for tp in partitions}
        self.assigned_once = True
        self.metrics.rebalanced()
        log.info(
            "partitions assigned",
            extra={"partitions": sorted(partition_key(p) for p in self.owned)},
        )

    def _revoked(self, consumer: Consumer, partitions: list[TP]) -> None:
        lost = {(tp.topic, tp.partition) for tp in partitions}
        self.owned -= lost
        consumer.unassign()
        log.info("partitions revoked", extra={"partitions": sorted(partition_key(p) for p in lost)})

    def poll(self) -> None:
        message = self.consumer.poll(0)
        error = message.error() if message is not None else None
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            log.warning("group consumer: %s", error)

    def committed(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        """The group's committed offsets (stable: pending transactional commits are waited for);
        a partition never committed is -1."""
        found = committed_offsets(self.consumer, partitions)
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else -1) for tp in found}

    def group_metadata(self) -> object:
        return self.consumer.consumer_group_metadata()

    def close(self) -> None:
        self.consumer.close()


class Leader:
    """Publishes the global epochs while this worker owns the control partition."""

    def __init__(
        self,
        settings: Settings,
        producer_config: Mapping[str, str | int | float | bool],
        reader: Reader,
        version: str,
    ) -> None:
        self.settings = settings
        self.reader = reader
        self.topic = control_topic(settings)
        started = time.perf_counter()
        # init_transactions fences every earlier leader and aborts its open transaction.
        self.sink = KafkaSink(
            producer_config,
            transactional_id=f"subgraph-monitor-{settings.group_id}-leader",
            output_topic=self.topic,
            dead_letter_topic=self.topic,
            version=version,
        )
        control = TP(reader.control[0], reader.control[1])
        _, self.sync_to = _retry(
            partial(reader.consumer.get_watermark_offsets, control, timeout=10, cached=False)
        )
        self.synced = False
        self.published: EpochSpec | None = None
        self.last_publish = time.monotonic()
        self.last_check = 0.0
        self.admin = AdminClient(dict(producer_config))
        log.info(
            "leading: publishing the epochs",
            extra={"control_topic": self.topic, "fenced_in_s": time.perf_counter() - started},
        )

    def _offsets(self, partitions: Sequence[Partition], spec: OffsetSpec) -> dict[Partition, int]:
        """Offsets of ``partitions`` in one request (an admin client: the reader's connection
        is busy with long-polling fetches); latest is the last stable offset."""
        futures = self.admin.list_offsets(
            {TP(t, p): spec for t, p in partitions},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=10,
        )
        return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}

    def _last(self) -> EpochSpec | None:
        candidates = [s for s in (self.reader.last_spec, self.published) if s is not None]
        return max(candidates, key=lambda s: s.epoch) if candidates else None

    def tick(self, applied_epoch: int) -> None:
        """Publish the next epoch when it is due: ``batch_size`` records are waiting, or
        ``max_batch_delay_ms`` passed with at least one; never more than one epoch ahead of
        this worker's own progress."""
        if not self.synced:
            if self.reader.position(self.reader.control) < self.sync_to:
                return
            self.synced = True
        last = self._last()
        if last is not None and last.epoch > applied_epoch + 1:
            return
        now = time.monotonic()
        if now - self.last_check < LEADER_CHECK_SECONDS:
            return
        self.last_check = now
        due = now - self.last_publish >= self.settings.max_batch_delay_ms / 1000
        prev: dict[Partition, int] = dict(last.ends) if last is not None else {}
        missing = [p for p in self.reader.partitions if p not in prev]
        if missing:  # the first epoch starts at each partition's earliest offset
            prev.update(self._offsets(missing, EARLIEST))
        highs = self._offsets(self.reader.partitions, LATEST)
        highs = {p: max(h, prev[p]) for p, h in highs.items()}
        waiting = {p: highs[p] - prev[p] for p in self.reader.partitions}
        total = sum(waiting.values())
        if total == 0 or (total < self.settings.batch_size and not due):
            return
        ends = dict(highs)
        if total > self.settings.batch_size:
            share = self.settings.batch_size / total
            ends = {
                p: prev[p] + max(1, int(n * share)) if n else prev[p] for p, n in waiting.items()
            }
        spec = EpochSpec((last.epoch if last else 0) + 1, prev, ends, self.settings.instance_id)
        self.sink.begin()
        self.sink.write_control(self.topic, spec.to_json())
        failpoint("leader_before_commit")
        self.sink.commit({}, None)
        self.published = spec
        self.last_publish = time.monotonic()
        log.debug("epoch published", extra={"epoch": spec.epoch, "records": spec.records})

    def close(self) -> None:
        with contextlib.suppress(KafkaException):
            self.sink.flush()


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


def decode_epoch(messages: Mapping[Partition, list[Message]], settings: Settings) -> EpochInput:
    """The epoch's records in the fixed order, partition by partition."""
    updates: list[Update] = []
    partitions = sorted(messages)
    bounds = np.zeros(len(partitions), np.int64)
    polled: dict[Partition, Polled] = {}
    for i, p in enumerate(partitions):
        bounds[i] = len(updates)
        polled[p] = Polled(UpdateBatch())
        for message in messages[p]:
            take_message(
                message, updates, polled[p], settings.default_relation, settings.topic_relations
            )
    return EpochInput(UpdateBatch.from_updates(updates), partitions, bounds, polled)


def owned_changes(
    changes: Mapping[str, Change], data: EpochInput, partitions: set[Partition]
) -> dict[str, Change]:
    """The changes decided by updates from ``partitions``."""
    wanted = np.array([p in partitions for p in data.partitions], np.bool_)
    out: dict[str, Change] = {}
    for name, change in changes.items():
        if change.seq is None:
            raise StateError("staged changes carry no sequence numbers")
        mask = wanted[data.owners(change.seq)] if len(wanted) else np.zeros(len(change), bool)
        if mask.any():
            out[name] = change.take(mask)
    return out


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
            for m in _read_all(probe, [control])
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
        present: dict[bytes, bool] = {}
        records = 0
        for message in _read_all(probe, log_partitions):
            records += 1
            epoch = _epoch_header(message)
            if epoch is None or epoch > frontier.epoch:
                continue
            present[message.key() or b""] = message.value() is not None
    finally:
        probe.close()
    updates = []
    for key, alive in present.items():
        if alive:
            decoded: list[Any] = orjson.loads(key)  # [relation, [ids]]
            updates.append(Update(str(decoded[0]), tuple(decoded[1]), 1))
    processor.preload(UpdateBatch.from_updates(updates))
    processor.index.commit()
    processor.epoch = frontier.epoch
    position = {"cluster": {"control": frontier.offset + 1, **_ends_json(frontier.ends)}}
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


#: Group-coordinator errors that pass: the coordinator moves or loads (a new group, a restart).
RETRIABLE_COORDINATOR_ERRORS = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
)


#: Partition-leadership errors that pass (a topic just created, a leader moving).
RETRIABLE_LEADER_ERRORS = (
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TIMED_OUT,
)

T = TypeVar("T")


def _retry(
    call: Callable[[], T], codes: tuple[int, ...] = RETRIABLE_LEADER_ERRORS, what: str = ""
) -> T:
    """``call()``, retried for a minute while it fails with one of ``codes`` (errors that pass:
    a topic just created, a leader or the group coordinator moving)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            if code not in codes or time.monotonic() > deadline:
                raise
            log.info("%s not available yet (%s); retrying", what or "Kafka", error)
            time.sleep(0.5)


def committed_offsets(consumer: Consumer, partitions: Iterable[Partition]) -> list[TP]:
    """The group's committed offsets of ``partitions`` (stable offsets: librdkafka waits out
    pending transactional commits), retrying coordinator errors."""
    wanted = [TP(t, p) for t, p in partitions]
    return list(
        _retry(
            partial(consumer.committed, wanted, timeout=30),
            RETRIABLE_COORDINATOR_ERRORS,
            "committed offsets",
        )
    )


def _ends_json(ends: Mapping[Partition, int]) -> dict[str, dict[str, int]]:
    return {"kafka": {partition_key(p): o for p, o in sorted(ends.items())}}


def _epoch_header(message: Message) -> int | None:
    headers = message.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    for name, value in pairs:
        if name == "epoch" and value is not None:
            return int(value)
    return None


def _read_all(consumer: Consumer, partitions: list[TP]) -> Iterable[Message]:
    """Every committed record of ``partitions`` up to their end offsets as of now."""
    ends = {}
    for tp in partitions:
        _, high = _retry(partial(consumer.get_watermark_offsets, tp, timeout=10, cached=False))
        ends[(tp.topic, tp.partition)] = high
    todo = {p for p, e in ends.items() if e > 0}
    consumer.assign([TP(t, p, OFFSET_BEGINNING) for t, p in ends])
    while todo:
        for message in consumer.consume(num_messages=5000, timeout=0.5):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(error)
            yield message
        for p in list(todo):
            (tp,) = consumer.position([TP(p[0], p[1])])
            if tp.offset >= ends[p]:
                todo.discard(p)
    consumer.unassign()


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
    leader: Leader | None = None

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
                self.leader.tick(self.processor.epoch)
            except KafkaException as exc:
                log.warning("publishing an epoch failed (%s); leading anew", exc)
                self.leader.close()
                self.leader = None

    def run_epoch(self, spec: EpochSpec) -> None:
        """Stage ``spec``, publish the partitions this worker owns that are still to do, wait
        until every partition is done, then commit the epoch to the index and the store."""
        started = time.perf_counter()
        data = decode_epoch(self.reader.read_epoch(spec, self.health), self.settings)
        read = time.perf_counter()
        vertices = len(self.processor.index.dictionary)
        staged = self.processor.stage(data.batch)
        deltas = 0
        published = 0.0
        while True:
            self._serve_group()
            committed = self.group.committed(self.partitions)
            pending = {p for p in self.partitions if committed.get(p, -1) < spec.ends[p]}
            mine = pending & self.group.owned
            if mine:
                deltas += self._publish(spec, staged, data, mine)
                published = time.perf_counter()
                continue
            if not pending:
                break
            if Stop.requested:
                self.processor.abort()
                return
            self.health.beat()
            time.sleep(BARRIER_POLL_SECONDS)
        self.processor.commit()
        position = {"cluster": {"control": spec.offset + 1, **_ends_json(spec.ends)}}
        previous = self.store.meta or StoredMeta()
        meta = StoredMeta(
            epoch=spec.epoch,
            position=position,
            queries=previous.queries,
            settings=previous.settings,
        )
        self.store.commit_epoch(self.processor.index, meta, staged.changes, vertices)
        now = time.time()
        self.metrics.epoch(time.perf_counter() - started, spec.records)
        self.metrics.committed(spec.epoch, 0.0, [], now)
        self.metrics.ignored(staged.ignored)
        self.metrics.index(
            {name: len(rel) for name, rel in self.processor.index.relations.items()},
            self.processor.index.nbytes,
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

    def _publish(
        self, spec: EpochSpec, staged: EpochOutput, data: EpochInput, mine: set[Partition]
    ) -> int:
        """One transaction: the deltas seeded by ``mine``'s changes, their dead letters and
        changelog records, and ``mine``'s offsets at the epoch's end. Returns the deltas."""
        commit_started = time.perf_counter()
        changes = owned_changes(staged.changes, data, mine)
        if self.settings.consolidate_across_workers:
            wanted = np.array([p in mine for p in data.partitions], np.bool_)
            owns = change_owner(
                self.processor.index, staged.changes, lambda seq: wanted[data.owners(seq)]
            )
            outputs = self.processor.evaluate_decided(changes, owns)
        else:
            outputs = self.processor.evaluate(changes)
        decode = self.processor.index.dictionary.decode
        try:
            self.sink.begin()
            for q in outputs:
                self.sink.write_deltas(q.query, spec.epoch, q.variables, q.columns, q.diff)
            for p in sorted(mine):
                for letter in data.polled[p].dead_letters:
                    self.sink.write_dead_letter(letter)
            for name, change in changes.items():
                columns = [decode(c) for c in change.columns]
                self.sink.write_changelog(
                    changelog_topic(self.settings), name, spec.epoch, columns, change.diff
                )
            failpoint("worker_before_commit")
            self.sink.commit({p: spec.ends[p] for p in mine}, self.group.group_metadata())
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
            for letter in polled.dead_letters:
                self.metrics.dead_letter(letter.category)
        for q in outputs:
            plus = int((q.diff > 0).sum())
            self.metrics.deltas(q.query, plus, len(q) - plus)
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
