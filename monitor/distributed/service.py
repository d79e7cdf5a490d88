"""``serve`` with ``SGM_ENGINE=distributed``: the Kafka service on the partitioned engine.

The serve process is the driver. It owns the Kafka consumer and the transactional producer,
runs the epochs (:class:`~monitor.distributed.delta.ShardedEpochs`) over shard actors on Ray, and
serves ``/metrics``, ``/healthz`` and ``/readyz`` for the whole service. The serve loop is the
embedded engine's (:mod:`monitor.service.serve`); this module is the engine it runs on.

An epoch, exactly once:

1. the shards stage the epoch's updates and every query's deltas are evaluated;
2. the deltas, the dead letters and the input offsets (``epoch=N`` as their commit metadata)
   are committed in one Kafka transaction;
3. every shard *prepares* the epoch: writes its changes to its RocksDB, synced;
4. the driver records the epoch with the offsets it includes (its own RocksDB, synced);
5. every shard folds the epoch into its adjacencies.

Every death is a restart at the driver's last record (:mod:`monitor.distributed.durable`):
shards holding an epoch prepared after it drop it; the offsets Kafka committed past the recorded
ones are the epoch the store missed, read again and applied without emitting
(:func:`~monitor.service.recovery.catch_up`). So the input topic stages an epoch until the
store has it, and a shard prepares an epoch only once its output is committed; an epoch whose
transaction fails is forgotten in memory (step 1 staged nothing durable). A shard lost while the
service runs (its actor killed, its process or node gone) is the same restart inside the
process: every shard is made anew, loads its part at the driver's record, and the consumer is
rewound (:func:`~monitor.service.serve._reload`). The output read with ``read_committed`` is
the single process's on the same epochs.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from connectors.events import FieldTypes
from connectors.kafka_log import ensure_log_topic
from core.errors import StateError, WorkerLost
from core.records import UpdateBatch, mirrored
from monitor.distributed.cluster import ray_shards
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.durable import DriverMeta, DriverStore
from monitor.distributed.shard_calls import RayShards
from monitor.failpoints import failpoint
from monitor.query.ast import Query
from monitor.service.clients import client_config
from monitor.service.clock import EventClock
from monitor.service.epoch_output import EpochOutput
from monitor.service.health import Health
from monitor.service.metrics import Metrics
from monitor.service.recovery import Positions
from monitor.service.settings import Settings
from monitor.service.stop import reclaim_signals

log = logging.getLogger(__name__)


class PartitionedEngine:
    """The serve loop's engine over shard actors: the driver's half of every epoch."""

    def __init__(
        self,
        settings: Settings,
        queries: Sequence[Query],
        shards: RayShards,
        store: DriverStore,
        changelog: tuple[dict[str, Any], str] | None = None,
    ) -> None:
        self.settings = settings
        #: The Kafka client settings and topic of the shard changelog (None: none).
        self.changelog = changelog
        self.queries = tuple(queries)
        self.shards = shards
        self.store = store
        self.epochs = self._epochs()
        #: Held by the Kafka source: the same objects for the whole run (a reload makes new
        #: epochs, whose relations' arities are copied in).
        self.field_types: FieldTypes | None = self.epochs.field_types
        self.arities: dict[str, int] = self.epochs.index.arity
        self._deadline = math.inf
        #: The shards' reports after the last commit (:meth:`observe` shows them).
        self._reports: list[dict[str, Any]] = []

    def _epochs(self) -> ShardedEpochs:
        return ShardedEpochs(
            self.queries,
            self.shards,
            self.settings.max_prefixes,
            settings=self.settings,
            static=False,
        )

    @property
    def clock(self) -> EventClock:
        return self.epochs.clock

    @property
    def epoch(self) -> int:
        return self.epochs.epochs

    def number_from(self, epoch: int) -> None:
        self.epochs.epochs = max(self.epochs.epochs, epoch - 1)

    def _wanted(self) -> DriverMeta:
        settings = self.settings
        return DriverMeta(
            position={"kafka": {}},
            queries=tuple(str(q) for q in self.queries),
            settings={
                "mode": "kafka",
                "undirected": settings.undirected,
                "default_relation": settings.default_relation,
                "topic_relations": dict(sorted(settings.topic_relations.items())),
                "shards": self.shards.count,
            },
        )

    def load(self) -> Positions:
        meta, wanted = self.store.meta, self._wanted()
        if meta is None or meta.epoch < 0:  # new (or died before its epoch 0 was recorded)
            self.store.commit(DriverMeta(**{**asdict(wanted), "epoch": -1}))
            self.epochs.index.restore(str(self.store.path), -1, self.changelog)
            self.epochs.index.checkpoint(0)
            meta = DriverMeta(
                **{**asdict(wanted), "position": {"kafka": {}, **self.epochs.position()}}
            )
            self.store.commit(meta)
        else:
            self._check(meta, wanted)
            self._restore(meta)
        self._rebuilt(self._observed_shards())
        return Positions.from_json(meta.position)

    def _check(self, meta: DriverMeta, wanted: DriverMeta) -> None:
        for name, value in wanted.settings.items():
            if meta.settings.get(name) != value:
                raise StateError(
                    f"state in {self.store.path} was built with {name}={meta.settings.get(name)!r}"
                    f", this service has {name}={value!r}; use the same setting, or a new state "
                    "directory and consumer group"
                )
        if meta.queries != wanted.queries:
            raise StateError(
                f"state in {self.store.path} was built for the queries {list(meta.queries)}, "
                f"this service has {list(wanted.queries)}; deploy new queries with a new state "
                "directory and group id"
            )

    def _restore(self, meta: DriverMeta) -> None:
        started = time.perf_counter()
        pairs = self.epochs.index.restore(str(self.store.path), meta.epoch, self.changelog)
        self.epochs.restored(meta.position)
        self.epochs.epochs = meta.epoch
        self.arities.update(self.epochs.index.arity)
        log.info(
            "state loaded",
            extra={
                "state_dir": str(self.store.path),
                "epoch": meta.epoch,
                "pairs": pairs,
                "shards": self.shards.count,
                "seconds": round(time.perf_counter() - started, 3),
            },
        )

    def reload(self) -> Positions:
        """Every shard made anew and loaded at the driver's last record."""
        meta = self.store.meta
        assert meta is not None  # (loaded before any epoch ran)
        self.shards.respawn()
        self.epochs = self._epochs()
        self.epochs.index.arity.update(self.arities)
        self._restore(meta)
        self._rebuilt(self._observed_shards())
        return Positions.from_json(meta.position)

    def _rebuilt(self, reports: list[dict[str, Any]]) -> None:
        """Log each shard rebuilt from the changelog when it loaded."""
        for s, report in enumerate(reports):
            if report.get("rebuilt"):
                log.warning(
                    "shard rebuilt from the changelog", extra={"shard": s, **report["rebuilt"]}
                )

    def process(self, batch: UpdateBatch) -> EpochOutput:
        started = time.perf_counter()
        epochs = self.epochs
        ignored = Counter(epochs.index.ignored)
        deltas = epochs.evaluate(mirrored(batch) if self.settings.undirected else batch)
        try:
            queries = [q for q in epochs.outputs(deltas) if len(q)]
        except BaseException:
            epochs.abort()
            raise
        events = epochs.events
        now = Counter(epochs.index.ignored)
        now.subtract(ignored)
        return EpochOutput(
            epochs.epochs + 1,
            batch.count,
            sum(len(c) for c in epochs.changes.values()),
            +now,
            queries,
            time.perf_counter() - started,
            epochs.changes,
            late={} if events is None else dict(events.late),
            watermark=epochs.clock.staged,
            expired_by={}
            if events is None
            else {r: int(e.shape[0]) for r, e in events.expired.items()},
            late_by={} if events is None else dict(events.late_count),
        )

    def commit(self, out: EpochOutput, positions: Positions) -> None:
        epochs, meta = self.epochs, self.store.meta
        assert meta is not None
        epochs.index.prepare(out.epoch)
        failpoint("driver_after_shards_prepare")
        record = DriverMeta(
            **{
                **asdict(meta),
                "epoch": out.epoch,
                "position": {**positions.to_json(), **epochs.position()},
            }
        )
        self.store.commit(record)
        failpoint("driver_after_epoch_record")
        epochs.commit()
        self.arities.update(epochs.index.arity)
        self._reports = self._observed_shards()

    def abort(self) -> None:
        self.epochs.abort()

    def expiry_due(self) -> bool:
        watermark = self.epochs.clock.watermark
        return self._deadline < watermark or self.epochs.grouped_deadline() < watermark

    def observe(self, metrics: Metrics) -> None:
        reports = self._reports
        tuples: Counter[str] = Counter()
        events: Counter[str] = Counter()
        event_bytes: Counter[str] = Counter()
        for report in reports:
            tuples.update(report["tuples"])
            events.update(report["events"])
            event_bytes.update(report["event_bytes"])
        stats = [report["stats"] for report in reports]
        metrics.index(tuples, sum(s.get("bytes", 0) for s in stats))
        metrics.events(events, event_bytes)
        traffic = self.shards.traffic
        metrics.shards.observe(
            [{**s, "epoch": r["epoch"]} for s, r in zip(stats, reports, strict=True)],
            self.epoch,
            traffic.sent,
            traffic.received,
            traffic.rounds,
            traffic.wait_seconds,
        )

    def _observed_shards(self) -> list[dict[str, Any]]:
        """Every shard's report (one round); the earliest deadline noted."""
        reports: list[dict[str, Any]] = self.shards.call("report", [()] * self.shards.count)
        self._deadline = min((r["deadline"] for r in reports), default=math.inf)
        return reports

    def where(self) -> list[dict[str, Any]]:
        """Each shard's process, host and Ray node."""
        return [
            {"pid": r["pid"], "host": r["host"], "node": r["node"]} for r in self._observed_shards()
        ]

    def close(self) -> None:
        """Every shard closes its directory (a dead one has nothing to close)."""
        with contextlib.suppress(WorkerLost):
            self.epochs.index.close()


@contextmanager
def distributed(
    settings: Settings, queries: tuple[Query, ...], metrics: Metrics, health: Health
) -> Iterator[PartitionedEngine]:
    """The partitioned engine: shard actors on the Ray cluster at ``ray_address`` (or a local
    one of ``workers`` CPUs), the driver's record in the state directory; shut down after."""
    state_dir = settings.state_dir or "state"
    store = DriverStore.open(state_dir)
    try:
        name = _namespace(settings)
        with ray_shards(
            settings.workers,
            settings.shards,
            settings.ray_address,
            name,
            settings.ray_join,
            settings.ray_object_store_memory,
        ) as shards:
            reclaim_signals()  # (from Ray's, which aborts the process on SIGTERM)
            shards.watched = True
            metrics.shards.watch(shards.waiting)
            changelog = _changelog(settings, shards.count)
            engine = PartitionedEngine(settings, queries, shards, store, changelog)
            log.info("ray cluster", extra=_cluster(shards))
            for s, where in enumerate(engine.where()):
                log.info("shard started", extra={"shard": s, **where})
            try:
                yield engine
            finally:
                engine.close()
    finally:
        store.close()


def _changelog(settings: Settings, shards: int) -> tuple[dict[str, Any], str] | None:
    """The shard changelog's Kafka client settings and topic, created when missing (None:
    ``SGM_SHARD_CHANGELOG=false``)."""
    if not settings.shard_changelog:
        return None
    topic = settings.shard_changelog_topic or f"{settings.group_id}-shards"
    config = client_config(settings, consumer=False)
    ensure_log_topic(config, topic, shards)
    return config, topic


def _cluster(shards: RayShards) -> dict[str, Any]:
    """Where the shards run: the Ray cluster's address, the namespace, the actors' names, and
    the driver's own node."""
    import ray

    context = ray.get_runtime_context()
    try:
        address, node = context.gcs_address, context.get_node_id()
    except Exception:  # (a Ray Client driver, ray://, has no address or node of its own)
        address, node = None, None
    return {"address": address, "namespace": context.namespace, "actors": shards.name, "node": node}


def _namespace(settings: Settings) -> str:
    """The Ray namespace of the service's shard actors: its consumer group (one service per
    group), so that two services on one Ray cluster never share a name."""
    return f"subgraph-monitor-{settings.group_id}"
