"""The loop reads top to bottom. Start: load the stored index, open the HTTP endpoints, connect to
Kafka (retrying with backoff, not ready meanwhile), refuse a second instance of the group, and
subscribe. Each epoch: poll up to ``batch_size`` updates or ``max_batch_delay_ms``; stage and
evaluate; in one transaction produce the deltas and dead letters and commit the consumer
offsets after the epoch, while the next epoch's records are read (:mod:`monitor.service.prefetch`);
then commit the index and write the epoch with those offsets to the store. An epoch whose
transaction fails is aborted, forgotten by the index, and read again, with what was read ahead.

Recovery (:mod:`monitor.service.recovery`): on assignment, a partition whose offset committed in
Kafka is ahead of the stored one holds records whose output is already committed but that the
store does not include (a crash between the two commits). They are read again and applied to the
index as one epoch without emitting anything; then the stream goes on from the committed offsets.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from connectors.kafka import KafkaSource
from connectors.kafka_records import Partition, Polled, partition_key
from connectors.kafka_sink import KafkaSink
from core.errors import ConfigError, WorkerLost
from monitor.failpoints import InjectedFailure, failpoint
from monitor.plan.events import event_relations, rewrite
from monitor.plan.planner import delta_queries
from monitor.query.load import load_queries
from monitor.service import registry
from monitor.service.allocator import keep_freed_memory
from monitor.service.clients import client_config, new_sink
from monitor.service.cluster import run_cluster
from monitor.service.engines import EmbeddedEngine, OpenEngine, ServiceEngine, embedded
from monitor.service.health import Health
from monitor.service.http import HealthServer
from monitor.service.metrics import Metrics
from monitor.service.prefetch import Prefetch
from monitor.service.recovery import Positions, assigned, catch_up, resume_at, revoked
from monitor.service.settings import Settings
from monitor.service.stop import Stop, stop_on_signals
from monitor.service.watchdog import Watchdog

log = logging.getLogger(__name__)

#: Held while an epoch commits with the next one's records being read ahead
#: (:mod:`monitor.service.prefetch`): the rebalance callbacks, which run on the reading thread,
#: wait for it.
SETTLING = threading.Lock()


def serve(settings: Settings, open_engine: OpenEngine = embedded) -> int:
    """Run the service until SIGTERM on the engine ``open_engine`` makes (the embedded one by
    default); returns the exit code."""
    queries = load_queries(settings.queries)
    events = event_relations(queries)
    for query in queries:
        delta_queries(rewrite(query, events).internal)  # a query that cannot plan fails here
    grouped = [q.name for q in queries if q.aggregates]
    if settings.control_topic and grouped:
        raise ConfigError(
            f"the aggregate queries {', '.join(grouped)} need all of a group's bindings in one "
            "place, and the replicated scale-out (control_topic) splits them among its "
            "workers; run them on one worker, or partitioned (engine=distributed)"
        )
    metrics = Metrics()
    health = Health(settings.liveness_timeout_s)
    http = HealthServer(settings.http_port, metrics, health)
    http.start()
    try:
        with stop_on_signals():
            tune_collector()
            keep_freed_memory(settings.malloc_keep_bytes)
            with open_engine(settings, tuple(queries), metrics, health) as engine:
                if settings.control_topic and isinstance(engine, EmbeddedEngine):
                    return run_cluster(settings, engine.processor, engine.store, metrics, health)
                return _run(settings, engine, metrics, health)
    finally:
        http.stop()


#: The cyclic garbage collector's thresholds in the service (Python's: 700, 10, 10).
COLLECTOR_THRESHOLDS = (100_000, 50, 100)


def tune_collector() -> None:
    """Collect cycles after 100,000 allocations, not 700. Every consumed message is a tracked
    object, as are the tuples and dicts decoding makes, so with Python's thresholds a poll of
    10,000 records starts dozens of collections, each walking the young objects: 2.7 µs per
    message against 0.45 in the file job (bench/NOTES.md). The service makes little cyclic
    garbage (what it frees, reference counting frees), so collecting it less often costs
    memory only in what cycles wait for the next collection."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


def _run(settings: Settings, engine: ServiceEngine, metrics: Metrics, health: Health) -> int:
    positions = engine.load()
    metrics.last_committed_epoch.set(engine.epoch)
    health.set_recovered(True)
    connection = _connect(settings, engine, positions, metrics, health)
    if connection is None:
        return 0
    source, sink = connection
    watchdog = Watchdog(settings.watchdog_s())
    ahead: Prefetch | None = None  # the next epoch's records, read while an epoch commits
    try:
        while not Stop.requested:
            health.beat()
            if positions.catch_up:
                try:
                    catch_up(settings, engine, source, positions, health)
                    health.set_recovered(True)
                except WorkerLost as error:
                    _reload(engine, source, positions, {}, error, metrics, health)
                continue
            polled = ahead.result() if ahead is not None else _poll(settings, source, health)
            ahead = None
            if not polled.records and not engine.expiry_due():
                continue
            sink, ahead = _epoch(
                settings, engine, source, sink, polled, positions, metrics, health, watchdog
            )
        log.info("stopping after epoch %d as requested", engine.epoch)
        return 0
    finally:
        if ahead is not None:  # read ahead, never committed: read again at the next start
            ahead.discard()
        source.close()
        sink.flush()


def _poll(settings: Settings, source: KafkaSource, health: Health) -> Polled:
    return registry.poll(
        source,
        health,
        settings.batch_size,
        settings.max_batch_delay_ms / 1000.0,
        interrupted=lambda: Stop.requested,
    )


def _connect(
    settings: Settings,
    engine: ServiceEngine,
    positions: Positions,
    metrics: Metrics,
    health: Health,
) -> tuple[KafkaSource, KafkaSink] | None:
    """Source and sink, retrying with backoff while the broker is unreachable."""
    delay = 1.0
    while not Stop.requested:
        try:
            _refuse_second_instance(settings)
            sink = new_sink(settings)
            source = _open_source(settings, positions, metrics, health, engine)
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
    settings: Settings,
    positions: Positions,
    metrics: Metrics,
    health: Health,
    engine: ServiceEngine,
) -> KafkaSource:
    holder: list[KafkaSource] = []

    # A rebalance during a poll ahead (:mod:`monitor.service.prefetch`) waits until the epoch
    # in flight has committed or aborted: it reads and changes the stored positions.
    def on_assign(parts: list[Partition]) -> Mapping[Partition, int]:
        with SETTLING:
            return assigned(parts, holder[0], positions, metrics, health)

    def on_revoke(parts: list[Partition]) -> None:
        with SETTLING:
            revoked(parts, metrics, health)

    source = KafkaSource(
        client_config(settings, consumer=True),
        settings.input_topics,
        default_relation=settings.default_relation,
        topic_relations=settings.topic_relations,
        on_assign=on_assign,
        on_revoke=on_revoke,
        on_stats=metrics.observe_librdkafka_stats,
        events=engine.field_types,
        arities=engine.arities,
        formats=registry.record_formats(settings, engine.field_types),
    )
    holder.append(source)
    return source


def _refuse_second_instance(settings: Settings) -> None:
    """One instance per group in this version: refuse to join a group that has members."""
    admin = AdminClient(client_config(settings, consumer=False))
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


def _epoch(
    settings: Settings,
    engine: ServiceEngine,
    source: KafkaSource,
    sink: KafkaSink,
    polled: Polled,
    positions: Positions,
    metrics: Metrics,
    health: Health,
    watchdog: Watchdog,
) -> tuple[KafkaSink, Prefetch | None]:
    """One epoch, exactly once; returns the sink to use next (recreated after fatal errors)
    and the next epoch's records, read while this one committed."""
    started = time.perf_counter()
    try:
        out = engine.process(polled.batch)
    except WorkerLost as error:
        _reload(engine, source, positions, polled.first_offsets, error, metrics, health)
        return sink, None
    refused = polled.refused(out.late)
    ahead: Prefetch | None = None
    failed: KafkaException | InjectedFailure | None = None
    try:
        with SETTLING:
            try:
                commit_started = time.perf_counter()
                watchdog.arm(f"the transaction of epoch {out.epoch}")
                sink.begin()
                for q in out.queries:
                    sink.write_deltas(
                        q.query, out.epoch, q.variables, q.columns, q.diff, q.edges, q.extra
                    )
                for letter in [*polled.dead_letters, *refused]:
                    sink.write_dead_letter(letter)
                group = source.group_metadata()
                if not Stop.requested:
                    ahead = Prefetch(lambda: _poll(settings, source, health))
                failpoint("serve_before_kafka_commit")
                sink.commit(polled.next_offsets, group, out.epoch)
                watchdog.disarm()
                failpoint("serve_after_kafka_commit")
            except (KafkaException, InjectedFailure) as exc:
                watchdog.disarm()
                engine.abort()
                failed = exc
            else:
                positions.stored.update(polled.next_offsets)
                engine.commit(out, positions)
    except WorkerLost as error:
        read = ahead.result() if ahead is not None else None
        restart = {**(read.first_offsets if read else {}), **polled.first_offsets}
        _reload(engine, source, positions, restart, error, metrics, health)
        return sink, None
    except BaseException:
        if ahead is not None:
            ahead.discard()
        raise
    if failed is not None:
        return _aborted(settings, source, sink, polled, ahead, out.epoch, failed, metrics), None
    now = time.time()
    metrics.epoch(time.perf_counter() - started, polled.records)
    for topic, n in polled.per_topic.items():
        metrics.consumed(topic, n)
    metrics.ignored(out.ignored)
    for letter in [*polled.dead_letters, *refused]:
        metrics.dead_letter(letter.category)
    for q in out.queries:
        plus = int((q.diff > 0).sum())
        metrics.deltas(q.query, plus, len(q) - plus)
    metrics.output_waited(sink.take_waited())
    engine.observe(metrics)
    metrics.time.epoch(out.watermark, engine.clock.partitions(), out.expired_by, out.late_by)
    # (last: a scrape that sees this epoch as the last committed one sees all its figures)
    metrics.committed(
        out.epoch, time.perf_counter() - commit_started, [now - t for t in polled.timestamps], now
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
    return sink, ahead


def _reload(
    engine: ServiceEngine,
    source: KafkaSource,
    positions: Positions,
    restart: Mapping[Partition, int],
    error: WorkerLost,
    metrics: Metrics,
    health: Health,
) -> None:
    """After a worker of the engine died: not ready while the engine loads its state again at
    its last stored epoch; then every assigned partition is read on from there (``restart``,
    the first records read since, for a partition the state and the group hold nothing of),
    catching up on what Kafka committed past it."""
    health.set_recovered(False)
    metrics.reloaded()
    log.warning(
        "a worker of the engine was lost; loading the state again", extra={"error": str(error)}
    )
    started = time.perf_counter()
    loaded = engine.reload()
    positions.stored, positions.catch_up = loaded.stored, {}
    starts = resume_at(source.assignment(), source, positions, "partition resumed")
    for partition, offset in restart.items():  # (neither stored nor committed: where it began)
        if partition not in positions.stored and partition not in positions.catch_up:
            starts[partition] = offset
    source.seek(starts)
    metrics.last_committed_epoch.set(engine.epoch)
    health.set_recovered(not positions.catch_up)  # (ready once caught up)
    log.info(
        "state loaded again",
        extra={"epoch": engine.epoch, "seconds": round(time.perf_counter() - started, 3)},
    )


def _aborted(
    settings: Settings,
    source: KafkaSource,
    sink: KafkaSink,
    polled: Polled,
    ahead: Prefetch | None,
    epoch: int,
    exc: KafkaException | InjectedFailure,
    metrics: Metrics,
) -> KafkaSink:
    """After a failed transaction (the index has forgotten the epoch): the epoch is read again
    from its first record, and what was read ahead of it from its own first record, unless
    partitions moved meanwhile (the assignment then started them at their stored positions).
    Returns the sink to use next."""
    metrics.aborted()
    read = ahead.result() if ahead is not None else None
    restart = {**(read.first_offsets if read else {}), **polled.first_offsets}
    if read is not None and read.rebalanced:
        restart = {}
    log.warning(
        "epoch aborted; reading it again",
        extra={
            "epoch": epoch,
            "error": str(exc),
            "offsets": {partition_key(p): o for p, o in restart.items()},
        },
    )
    sink = _recover_sink(settings, sink, exc.args[0] if exc.args else None)
    source.seek(restart)
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
            return new_sink(settings)
        except KafkaException as exc:
            log.warning("recreating the producer failed (%s); retrying in 2 s", exc)
            time.sleep(2.0)
    return sink
