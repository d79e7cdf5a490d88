"""``subgraph-monitor serve``: edge topics in, match-delta topic out, exactly once.

The loop reads top to bottom. Start: load the stored index, open the HTTP endpoints, connect to
Kafka (retrying with backoff, not ready meanwhile), refuse a second instance of the group, and
subscribe. Each epoch: poll up to ``batch_size`` updates or ``max_batch_delay_ms``; stage and
evaluate; in one transaction produce the deltas and dead letters and commit the consumer
offsets after the epoch; then commit the index and write the epoch with those offsets to the
store. An epoch whose transaction fails is aborted, forgotten by the index, and read again.

Recovery: on assignment, a partition whose offset committed in Kafka is ahead of the stored one
holds records whose output is already committed but that the store does not include (a crash
between the two commits). They are read again and applied to the index as one epoch without
emitting anything; then the stream goes on from the committed offsets.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

from confluent_kafka import OFFSET_BEGINNING, KafkaException
from confluent_kafka.admin import AdminClient

from connectors.kafka import (
    KafkaSink,
    KafkaSource,
    Partition,
    Polled,
    parse_partition_key,
    partition_key,
)
from connectors.records import UpdateBatch
from monitor.errors import ConfigError, StateError
from monitor.failpoints import failpoint
from monitor.index.store import StateStore, StoredMeta
from monitor.plan.planner import delta_queries
from monitor.query.load import load_queries
from monitor.service import cluster
from monitor.service.epochs import EpochProcessor
from monitor.service.health import Health
from monitor.service.http import HealthServer
from monitor.service.metrics import Metrics
from monitor.service.settings import Settings
from monitor.service.stop import Stop, stop_on_signals

log = logging.getLogger(__name__)


def service_version() -> str:
    try:
        return version("subgraph-monitor")
    except PackageNotFoundError:
        return "unknown"


#: How long reading the records of a catch-up may take.
CATCH_UP_SECONDS = 300.0

#: How long one epoch's transaction may take before the watchdog ends the process.
WATCHDOG_SECONDS = 90.0


class Watchdog:
    """Ends the process when a Kafka call blocks far past its time-out.

    librdkafka can block in ``send_offsets_to_transaction`` past its time-out when the group
    coordinator goes away (confluentinc/librdkafka#5456, #5511). Nothing of the epoch in flight
    is in the store yet, so the safe way out is to exit (code 75, "temporary failure") and let
    the supervisor restart the service, whose recovery is exact; this is logged as critical.
    """

    EXIT_CODE = 75

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._what = ""
        threading.Thread(target=self._watch, name="sgm-watchdog", daemon=True).start()

    def arm(self, what: str) -> None:
        with self._lock:
            self._deadline, self._what = time.monotonic() + self.seconds, what

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(1.0)
            with self._lock:
                late = self._deadline is not None and time.monotonic() > self._deadline
                what = self._what
            if late:
                log.critical(
                    "%s is stuck in Kafka for more than %.0f s; exiting so that the service "
                    "restarts and recovers",
                    what,
                    self.seconds,
                )
                logging.shutdown()
                os._exit(self.EXIT_CODE)


@dataclass
class Positions:
    """Per partition, the offset after the last record the stored state includes."""

    stored: dict[Partition, int] = field(default_factory=dict)
    catch_up: dict[Partition, int] = field(default_factory=dict)

    @classmethod
    def of(cls, meta: StoredMeta | None) -> Positions:
        raw = (meta.position.get("kafka") if meta else None) or {}
        return cls({parse_partition_key(k): int(v) for k, v in raw.items()})

    def to_json(self) -> dict[str, dict[str, int]]:
        return {"kafka": {partition_key(p): o for p, o in sorted(self.stored.items())}}


def serve(settings: Settings) -> int:
    """Run the service until SIGTERM; returns the exit code."""
    queries = load_queries(settings.queries)
    for query in queries:
        delta_queries(query)
    metrics = Metrics()
    health = Health(settings.liveness_timeout_s)
    http = HealthServer(settings.http_port, metrics, health)
    http.start()
    store = StateStore.open(
        settings.state_dir or "state",
        cache_bytes=settings.rocksdb_cache_bytes,
        snapshot_ratio=settings.snapshot_ratio,
        snapshot_min_bytes=settings.snapshot_min_bytes,
    )
    try:
        with stop_on_signals():
            return _run(settings, queries, store, metrics, health)
    finally:
        store.close()
        http.stop()


def _run(
    settings: Settings,
    queries: tuple[object, ...],
    store: StateStore,
    metrics: Metrics,
    health: Health,
) -> int:
    processor = EpochProcessor(queries, settings)  # type: ignore[arg-type]
    if settings.control_topic:
        return _run_cluster(settings, processor, store, metrics, health)
    meta = _recover(settings, processor, store)
    metrics.last_committed_epoch.set(meta.epoch)
    positions = Positions.of(meta)
    health.set_recovered(True)
    connection = _connect(settings, processor, store, positions, metrics, health)
    if connection is None:
        return 0
    source, sink = connection
    watchdog = Watchdog(WATCHDOG_SECONDS)
    try:
        while not Stop.requested:
            health.beat()
            if positions.catch_up:
                _catch_up(settings, processor, store, source, positions, health)
                continue
            polled = source.poll(settings.batch_size, settings.max_batch_delay_ms / 1000.0)
            if not polled.records:
                continue
            sink = _epoch(
                settings, processor, store, source, sink, polled, positions, metrics, watchdog
            )
        log.info("stopping after epoch %d as requested", processor.epoch)
        return 0
    finally:
        source.close()
        sink.flush()


def _run_cluster(
    settings: Settings,
    processor: EpochProcessor,
    store: StateStore,
    metrics: Metrics,
    health: Health,
) -> int:
    """Scale-out (``SGM_CONTROL_TOPIC``): one worker of several; see ``cluster``."""
    cluster.check_queries(settings, processor.queries)
    fresh = store.meta is None
    meta = _recover(settings, processor, store, mode="cluster")
    client = _client_config(settings, consumer=False)
    client["group.id"] = settings.group_id
    partitions = _cluster_topics(settings, health)
    if partitions is None:
        return 0
    health.set_broker_reachable(True)
    if fresh or "cluster" not in meta.position:
        meta = cluster.rebuild_from_changelog(settings, processor, store, meta, client, partitions)
    metrics.last_committed_epoch.set(meta.epoch)
    positions, control_offset = cluster.stored_positions(meta)
    reader = cluster.Reader(
        client, partitions, (cluster.control_topic(settings), 0), positions, control_offset
    )
    cluster.check_retention(reader, positions, store.path)
    group = cluster.GroupMember(
        _client_config(settings, consumer=True),
        [*settings.input_topics, cluster.control_topic(settings)],
        metrics,
    )
    worker = cluster.Worker(
        settings,
        processor,
        store,
        metrics,
        health,
        reader,
        group,
        partitions,
        _client_config(settings, consumer=False),
        service_version(),
        lambda: _new_sink(settings),
        _new_sink(settings),
    )
    log.info(
        "worker started",
        extra={
            "epoch": processor.epoch,
            "control_topic": cluster.control_topic(settings),
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
            admin = AdminClient(_client_config(settings, consumer=False))
            cluster.ensure_topics(admin, settings)
            return cluster.input_partitions(admin, settings.input_topics)
        except KafkaException as error:
            health.set_broker_reachable(False)
            log.warning("Kafka is not reachable (%s); retrying in %.0f s", error, delay)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
    return None


def _recover(
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
    store.load(processor.index)
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


def _connect(
    settings: Settings,
    processor: EpochProcessor,
    store: StateStore,
    positions: Positions,
    metrics: Metrics,
    health: Health,
) -> tuple[KafkaSource, KafkaSink] | None:
    """Source and sink, retrying with backoff while the broker is unreachable."""
    delay = 1.0
    while not Stop.requested:
        try:
            _refuse_second_instance(settings)
            sink = _new_sink(settings)
            source = _open_source(settings, positions, metrics, health)
            health.set_broker_reachable(True)
            return source, sink
        except KafkaException as error:
            health.set_broker_reachable(False)
            log.warning("Kafka is not reachable (%s); retrying in %.0f s", error, delay)
            end = time.monotonic() + delay
            while time.monotonic() < end and not Stop.requested:
                health.beat()
                time.sleep(0.2)
            delay = min(delay * 2, 30.0)
    return None


def _open_source(
    settings: Settings, positions: Positions, metrics: Metrics, health: Health
) -> KafkaSource:
    holder: list[KafkaSource] = []

    def on_assign(parts: list[Partition]) -> Mapping[Partition, int]:
        return _assigned(parts, holder[0], positions, metrics, health)

    source = KafkaSource(
        _client_config(settings, consumer=True),
        settings.input_topics,
        default_relation=settings.default_relation,
        topic_relations=settings.topic_relations,
        on_assign=on_assign,
        on_revoke=lambda parts: _revoked(parts, metrics, health),
        on_stats=metrics.observe_librdkafka_stats,
    )
    holder.append(source)
    return source


def _client_config(settings: Settings, *, consumer: bool) -> dict[str, str | int | float | bool]:
    config: dict[str, str | int | float | bool] = {
        "bootstrap.servers": settings.bootstrap_servers,
        **settings.kafka_config(),
    }
    if consumer:
        config["group.id"] = settings.group_id
        # Static membership: a restarted instance takes its old place at once, and a
        # member with another instance id is another instance.
        config["group.instance.id"] = settings.instance_id
        config.setdefault("client.id", f"subgraph-monitor-{settings.instance_id}")
    return config


def _transactional_id(settings: Settings) -> str:
    if settings.transactional_id:
        return settings.transactional_id
    if settings.control_topic:  # one producer per worker, fenced by its stable instance id
        return f"subgraph-monitor-{settings.group_id}-{settings.instance_id}"
    return f"subgraph-monitor-{settings.group_id}"


def _new_sink(settings: Settings) -> KafkaSink:
    return KafkaSink(
        _client_config(settings, consumer=False),
        transactional_id=_transactional_id(settings),
        output_topic=settings.output_topic,
        dead_letter_topic=settings.dead_letter_topic,
        version=service_version(),
    )


def _refuse_second_instance(settings: Settings) -> None:
    """One instance per group in this version: refuse to join a group that has members."""
    admin = AdminClient(_client_config(settings, consumer=False))
    futures = admin.describe_consumer_groups([settings.group_id], request_timeout=10)
    description = futures[settings.group_id].result()
    others = [m for m in description.members or [] if m.group_instance_id != settings.instance_id]
    if others:
        who = ", ".join(f"{m.group_instance_id or m.client_id}@{m.host}" for m in others)
        raise ConfigError(
            f"consumer group {settings.group_id!r} already has {len(others)} other member(s) "
            f"({who}); this version runs one instance per group: stop the other instance, or "
            f"give this one its own SGM_GROUP_ID and SGM_STATE_DIR"
        )


def _assigned(
    partitions: list[Partition],
    source: KafkaSource,
    positions: Positions,
    metrics: Metrics,
    health: Health,
) -> Mapping[Partition, int]:
    """Where each assigned partition starts; partitions to catch up on are noted."""
    metrics.rebalanced()
    committed = source.committed(partitions)
    starts: dict[Partition, int] = {}
    for partition in partitions:
        kafka = committed.get(partition)
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
        log.info(
            "partition assigned",
            extra={
                "partition": partition_key(partition),
                "offset": starts.get(partition),
                "committed": kafka,
                "stored": stored,
            },
        )
    health.set_assigned(True)
    return starts


def _revoked(partitions: list[Partition], metrics: Metrics, health: Health) -> None:
    log.info("partitions revoked", extra={"partitions": [partition_key(p) for p in partitions]})
    health.set_assigned(False)


def _catch_up(
    settings: Settings,
    processor: EpochProcessor,
    store: StateStore,
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
        polled = source.poll(settings.batch_size, 1.0, stop_at=positions.catch_up)
        batches.append(polled.batch)
        reached.update(polled.next_offsets)
        log.debug(
            "catching up", extra={"reached": {partition_key(p): o for p, o in reached.items()}}
        )
    batch = UpdateBatch.concat(batches)
    vertices = len(processor.index.dictionary)
    out = processor.process(batch)
    processor.commit()
    positions.stored.update(reached)
    positions.stored.update(positions.catch_up)
    meta = _meta(store, processor, positions, out.epoch)
    store.commit_epoch(processor.index, meta, out.changes, vertices)
    log.info(
        "caught up without emitting: the output of these records was already committed",
        extra={
            "epoch": out.epoch,
            "updates": batch.count,
            "partitions": {partition_key(p): o for p, o in positions.catch_up.items()},
        },
    )
    positions.catch_up = {}


def _meta(
    store: StateStore, processor: EpochProcessor, positions: Positions, epoch: int
) -> StoredMeta:
    previous = store.meta or StoredMeta()
    return StoredMeta(
        epoch=epoch,
        position=positions.to_json(),
        queries=previous.queries,
        settings=previous.settings,
    )


def _epoch(
    settings: Settings,
    processor: EpochProcessor,
    store: StateStore,
    source: KafkaSource,
    sink: KafkaSink,
    polled: Polled,
    positions: Positions,
    metrics: Metrics,
    watchdog: Watchdog,
) -> KafkaSink:
    """One epoch, exactly once; returns the sink to use next (recreated after fatal errors)."""
    started = time.perf_counter()
    vertices = len(processor.index.dictionary)
    out = processor.process(polled.batch)
    try:
        commit_started = time.perf_counter()
        watchdog.arm(f"the transaction of epoch {out.epoch}")
        sink.begin()
        for q in out.queries:
            sink.write_deltas(q.query, out.epoch, q.variables, q.columns, q.diff)
        for letter in polled.dead_letters:
            sink.write_dead_letter(letter)
        sink.commit(polled.next_offsets, source.group_metadata())
        watchdog.disarm()
        failpoint("serve_after_kafka_commit")
    except KafkaException as exc:
        watchdog.disarm()
        error = exc.args[0] if exc.args else None
        processor.abort()
        metrics.aborted()
        restart = {p: positions.stored.get(p, o) for p, o in polled.next_offsets.items()}
        log.warning(
            "epoch aborted; reading it again",
            extra={
                "epoch": out.epoch,
                "error": str(exc),
                "offsets": {partition_key(p): o for p, o in restart.items()},
            },
        )
        sink = _recover_sink(settings, sink, error)
        source.seek(restart)
        return sink
    processor.commit()
    positions.stored.update(polled.next_offsets)
    store.commit_epoch(
        processor.index, _meta(store, processor, positions, out.epoch), out.changes, vertices
    )
    now = time.time()
    metrics.epoch(time.perf_counter() - started, polled.records)
    metrics.committed(
        out.epoch, time.perf_counter() - commit_started, [now - t for t in polled.timestamps], now
    )
    for topic, n in polled.per_topic.items():
        metrics.consumed(topic, n)
    metrics.ignored(out.ignored)
    for letter in polled.dead_letters:
        metrics.dead_letter(letter.category)
    for q in out.queries:
        plus = int((q.diff > 0).sum())
        metrics.deltas(q.query, plus, len(q) - plus)
    metrics.index(
        {name: len(rel) for name, rel in processor.index.relations.items()},
        processor.index.nbytes,
    )
    log.info(
        "epoch committed",
        extra={
            "epoch": out.epoch,
            "updates": polled.records,
            "deltas": out.deltas,
            "dead_letters": len(polled.dead_letters),
            "offsets": {partition_key(p): o for p, o in polled.next_offsets.items()},
        },
    )
    return sink


def _recover_sink(settings: Settings, sink: KafkaSink, error: object) -> KafkaSink:
    """After a failed transaction: abort it if that is what the error asks and it works;
    otherwise (fatal errors, time-outs, a failed abort) a new producer, whose
    ``init_transactions`` fences the old one and aborts its open transaction."""
    abortable = error is not None and getattr(error, "txn_requires_abort", lambda: False)()
    if abortable:
        try:
            sink.abort()
            return sink
        except KafkaException as exc:
            log.warning("aborting the transaction failed (%s); recreating the producer", exc)
    while not Stop.requested:
        try:
            return _new_sink(settings)
        except KafkaException as exc:
            log.warning("recreating the producer failed (%s); retrying in 2 s", exc)
            time.sleep(2.0)
    return sink
