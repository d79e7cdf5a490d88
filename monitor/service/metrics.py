"""Prometheus metrics of the serve loop, in one registry per :class:`Metrics`.

Every family is named by the Prometheus conventions under the namespace ``subgraph_monitor``:
base units in the name (``_seconds``, ``_bytes``), ``_total`` on counters, labels for the
dimensions an operator filters by (topic, partition, reason, query, sign, relation). The loop
calls one small method per event; nothing here knows Kafka or the engine beyond the numbers it
is handed, except :meth:`Metrics.observe_librdkafka_stats`, which reads the consumer lag from
librdkafka's statistics document (``statistics.interval.ms`` and ``stats_cb``).

The registry is the instance's own (never the process-wide default), so tests can build several.
``_created`` series are left out of :meth:`Metrics.render`: they double the series of every
counter and histogram and no dashboard reads them.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np
import numpy.typing as npt
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from connectors.kafka_records import DEAD_LETTER_CATEGORIES
from monitor.service.shard_metrics import SHARD_METRIC_NAMES, ShardMetrics
from monitor.service.time_metrics import TIME_METRIC_NAMES, TimeMetrics

NAMESPACE = "subgraph_monitor"
DISTRIBUTION = "subgraph-monitor"

#: Epoch and commit durations: 1 ms to 60 s.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: Record timestamp to commit: the epoch's own delay plus queueing, up to a lagging consumer.
LATENCY_BUCKETS = (*DURATION_BUCKETS, 120, 300, 600)
#: Updates per epoch: 1 to 1M.
EPOCH_UPDATES_BUCKETS = (1, 5, 10, 50, 100, 500, 1e3, 5e3, 1e4, 5e4, 1e5, 5e5, 1e6)

#: Every exported family under the namespace, as PromQL names it (counters with ``_total``;
#: histograms by their base name, queried as ``_bucket``, ``_sum``, ``_count``).
METRIC_NAMES: tuple[str, ...] = tuple(
    f"{NAMESPACE}_{name}"
    for name in (
        "updates_consumed_total",
        "updates_ignored_total",
        "dead_letters_total",
        "match_deltas_total",
        "epoch_duration_seconds",
        "epoch_updates",
        "commit_duration_seconds",
        "end_to_end_latency_seconds",
        "consumer_lag",
        "index_edges",
        "index_bytes",
        "events_stored",
        "event_field_bytes",
        "live_matches",
        "rebalances_total",
        "transactions_aborted_total",
        "output_waits_seconds_total",
        "last_committed_epoch",
        "last_committed_epoch_timestamp_seconds",
        "build_info",
        "ready",
        *TIME_METRIC_NAMES,
        *SHARD_METRIC_NAMES,
    )
)

_log = logging.getLogger(__name__)


def build_version() -> str:
    """The installed version of ``subgraph-monitor``, or ``"unknown"`` when not installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


class BulkHistogram(Collector):
    """A histogram observed a whole array at a time.

    ``prometheus_client.Histogram.observe`` costs about a microsecond per call; an epoch of a
    million records would spend a second on its latencies alone. Here the bucket of every value
    comes from one ``searchsorted`` and the counts from one ``bincount``. NaNs are dropped and
    negative values (a producer clock ahead of ours) count as zero.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self._bounds = np.asarray(sorted(float(b) for b in buckets), dtype=np.float64)
        self._counts = np.zeros(len(self._bounds) + 1, dtype=np.int64)  # last: above every bound
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, values: Sequence[float] | npt.NDArray[Any]) -> None:
        """Count every value of ``values`` (any shape) into its bucket."""
        v = np.asarray(values, dtype=np.float64).ravel()
        v = np.maximum(v[~np.isnan(v)], 0.0)
        if v.size == 0:
            return
        counts = np.bincount(
            np.searchsorted(self._bounds, v, side="left"), minlength=len(self._counts)
        )
        total = float(v.sum())
        with self._lock:
            self._counts += counts
            self._sum += total

    def describe(self) -> Iterable[Metric]:
        """The family without samples, so the registry knows the names."""
        return [HistogramMetricFamily(self.name, self.documentation, labels=())]

    def collect(self) -> Iterable[Metric]:
        """One histogram family with cumulative buckets, as Prometheus expects."""
        with self._lock:
            cumulative = np.cumsum(self._counts)
            total = self._sum
        bounds = [repr(b) for b in self._bounds.tolist()] + ["+Inf"]
        family = HistogramMetricFamily(self.name, self.documentation, labels=())
        family.add_metric([], list(zip(bounds, cumulative.tolist(), strict=True)), total)
        return [family]


class _WithoutCreated(Collector):
    """A view of a registry without the ``_created`` samples of counters and histograms."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            created = family.name + "_created"
            family.samples = [s for s in family.samples if s.name != created]
            yield family


#: Why updates were not applied (``updates_ignored_total`` labels, present from the start).
IGNORED_REASONS = (
    "duplicate_insert",
    "absent_delete",
    "netted",
    "wrong_arity",
    "delete_without_id",
    "not_an_event_relation",
)


class Metrics:
    """The service's metrics and the events that move them.

    Every method is safe to call from any thread; :meth:`render` may run concurrently on the
    HTTP server's threads.
    """

    def __init__(self, *, process_metrics: bool = True) -> None:
        self.registry = CollectorRegistry()
        if process_metrics:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
        ns, reg = NAMESPACE, self.registry
        #: Watermarks, event-time lag, expired and late events (``time_metrics``).
        self.time = TimeMetrics(reg, ns)
        #: The partitioned engine's shards and exchange (``shard_metrics``).
        self.shards = ShardMetrics(reg, ns)

        self.updates_consumed = Counter(
            "updates_consumed_total",
            "Updates decoded from the input, by topic.",
            ["topic"],
            namespace=ns,
            registry=reg,
        )
        self.updates_ignored = Counter(
            "updates_ignored_total",
            "Updates that changed nothing (set semantics), by reason.",
            ["reason"],
            namespace=ns,
            registry=reg,
        )
        self.dead_letters = Counter(
            "dead_letters_total",
            "Input records sent to the dead-letter topic, by reason.",
            ["reason"],
            namespace=ns,
            registry=reg,
        )
        self.match_deltas = Counter(
            "match_deltas_total",
            "Match deltas published, by query and sign (plus: a match appeared, minus: vanished).",
            ["query", "sign"],
            namespace=ns,
            registry=reg,
        )
        self.epoch_duration = Histogram(
            "epoch_duration_seconds",
            "Time to evaluate one epoch, from its close to its deltas being ready.",
            namespace=ns,
            registry=reg,
            buckets=DURATION_BUCKETS,
        )
        self.epoch_updates = Histogram(
            "epoch_updates",
            "Updates per epoch.",
            namespace=ns,
            registry=reg,
            buckets=EPOCH_UPDATES_BUCKETS,
        )
        self.commit_duration = Histogram(
            "commit_duration_seconds",
            "Time to commit one epoch: the Kafka transaction commit and the state store write.",
            namespace=ns,
            registry=reg,
            buckets=DURATION_BUCKETS,
        )
        self.end_to_end_latency = BulkHistogram(
            f"{ns}_end_to_end_latency_seconds",
            "Time from an input record's timestamp to the commit of its epoch.",
            LATENCY_BUCKETS,
        )
        reg.register(self.end_to_end_latency)
        self.consumer_lag = Gauge(
            "consumer_lag",
            "Records behind the partition's high watermark (from librdkafka statistics).",
            ["topic", "partition"],
            namespace=ns,
            registry=reg,
        )
        self.index_edges = Gauge(
            "index_edges",
            "Tuples in the index, by relation.",
            ["relation"],
            namespace=ns,
            registry=reg,
        )
        self.index_bytes = Gauge(
            "index_bytes", "Memory held by the index.", namespace=ns, registry=reg
        )
        self.events_stored = Gauge(
            "events_stored",
            "Live events of each event relation.",
            ["relation"],
            namespace=ns,
            registry=reg,
        )
        self.event_field_bytes = Gauge(
            "event_field_bytes",
            "Memory held by the field columns of each event relation (string values shared).",
            ["relation"],
            namespace=ns,
            registry=reg,
        )
        self.rebalances = Counter(
            "rebalances_total",
            "Consumer group rebalances seen (assignments and revocations).",
            namespace=ns,
            registry=reg,
        )
        self.transactions_aborted = Counter(
            "transactions_aborted_total",
            "Kafka transactions aborted (the epoch is redone).",
            namespace=ns,
            registry=reg,
        )
        self.output_waits = Counter(
            "output_waits_seconds_total",
            "Seconds the sink waited for room in the producer's queue (output faster than the "
            "brokers take it: backpressure).",
            namespace=ns,
            registry=reg,
        )
        self.live_matches = Gauge(
            "live_matches",
            "Live matches kept per query (one per path length), retracted by lookup.",
            ["query"],
            namespace=ns,
            registry=reg,
        )
        self.last_committed_epoch = Gauge(
            "last_committed_epoch", "The last committed epoch.", namespace=ns, registry=reg
        )
        self.last_committed_epoch_timestamp = Gauge(
            "last_committed_epoch_timestamp_seconds",
            "Unix time at which the last epoch was committed.",
            namespace=ns,
            registry=reg,
        )
        self.build_info = Gauge(
            "build_info",
            "Always 1; the labels say which build runs.",
            ["version"],
            namespace=ns,
            registry=reg,
        )
        self.build_info.labels(build_version()).set(1)
        self.ready = Gauge(
            "ready",
            "1 when the service is ready (see /readyz), else 0.",
            namespace=ns,
            registry=reg,
        )
        # Known label values exist from the start at 0, so rates and alerts see a series.
        for category in DEAD_LETTER_CATEGORIES:
            self.dead_letters.labels(category)
        for reason in IGNORED_REASONS:
            self.updates_ignored.labels(reason)
        self._lag_lock = threading.Lock()
        self._lag_partitions: set[tuple[str, str]] = set()

    def consumed(self, topic: str, n: int) -> None:
        """``n`` updates were decoded from ``topic``."""
        self.updates_consumed.labels(topic).inc(n)

    def ignored(self, counter: Mapping[str, int]) -> None:
        """Updates that changed nothing, counted by reason (for example ``"present"``)."""
        for reason, n in counter.items():
            self.updates_ignored.labels(reason).inc(n)

    def dead_letter(self, reason: str) -> None:
        """One record went to the dead-letter topic."""
        self.dead_letters.labels(reason).inc()

    def deltas(self, query: str, plus: int, minus: int) -> None:
        """``query`` published ``plus`` +1 deltas and ``minus`` -1 deltas."""
        self.match_deltas.labels(query, "plus").inc(plus)
        self.match_deltas.labels(query, "minus").inc(minus)

    def epoch(self, duration_s: float, updates: int) -> None:
        """An epoch of ``updates`` updates was evaluated in ``duration_s`` seconds."""
        self.epoch_duration.observe(duration_s)
        self.epoch_updates.observe(updates)

    def committed(
        self,
        epoch: int,
        commit_s: float,
        latencies_s: Sequence[float] | npt.NDArray[Any],
        timestamp: float,
    ) -> None:
        """``epoch`` committed at unix time ``timestamp`` after ``commit_s`` seconds of commit;
        ``latencies_s`` holds, per input record of the epoch, its timestamp to the commit."""
        self.commit_duration.observe(commit_s)
        self.end_to_end_latency.observe(latencies_s)
        self.last_committed_epoch.set(epoch)
        self.last_committed_epoch_timestamp.set(timestamp)

    def aborted(self) -> None:
        """A Kafka transaction was aborted."""
        self.transactions_aborted.inc()

    def reloaded(self) -> None:
        """The engine loads its state again after losing a worker."""
        self.shards.reloads.inc()

    def output_waited(self, seconds: float) -> None:
        """The sink waited ``seconds`` for room in the producer's queue."""
        self.output_waits.inc(seconds)

    def rebalanced(self) -> None:
        """The consumer group rebalanced (partitions assigned or revoked)."""
        self.rebalances.inc()

    def index(self, edges_by_relation: Mapping[str, int], nbytes: int) -> None:
        """The index holds ``edges_by_relation`` tuples in ``nbytes`` bytes."""
        for relation, edges in edges_by_relation.items():
            self.index_edges.labels(relation).set(edges)
        self.index_bytes.set(nbytes)

    def events(self, stored: Mapping[str, int], field_bytes: Mapping[str, int]) -> None:
        """Each event relation holds ``stored`` live events, their fields ``field_bytes``."""
        for relation, n in stored.items():
            self.events_stored.labels(relation).set(n)
        for relation, n in field_bytes.items():
            self.event_field_bytes.labels(relation).set(n)

    def kept(self, matches: Mapping[str, int]) -> None:
        """The live matches each query keeps (one that stopped keeping them loses its series)."""
        self.live_matches.clear()
        for query, n in matches.items():
            self.live_matches.labels(query).set(n)

    def set_ready(self, ready: bool) -> None:
        """Whether the service is ready (the same conditions as ``/readyz``)."""
        self.ready.set(1 if ready else 0)

    def observe_librdkafka_stats(self, stats_json: str) -> int:
        """Set ``consumer_lag`` from a librdkafka statistics document; return the partitions set.

        Reads ``topics -> <topic> -> partitions -> <partition> -> consumer_lag`` of a consumer's
        document, skipping the internal partition -1 and unknown lags (-1). Partitions that
        no longer report a lag (revoked) lose their series. A producer's document, or one that
        cannot be read, changes nothing: this runs inside ``poll`` as the ``stats_cb`` and must
        never raise.
        """
        try:
            stats = json.loads(stats_json)
            if stats.get("type", "consumer") != "consumer":
                return 0
            lags = dict(_partition_lags(stats.get("topics") or {}))
        except (ValueError, TypeError, AttributeError) as exc:
            _log.warning("librdkafka statistics not understood: %s", exc)
            return 0
        with self._lag_lock:
            for topic, partition in self._lag_partitions - lags.keys():
                self.consumer_lag.remove(topic, partition)
            for (topic, partition), lag in lags.items():
                self.consumer_lag.labels(topic, partition).set(lag)
            self._lag_partitions = set(lags)
        return len(lags)

    def render(self) -> bytes:
        """Every metric in the Prometheus text exposition format 0.0.4."""
        return generate_latest(_WithoutCreated(self.registry))


def _partition_lags(topics: Mapping[str, Any]) -> Iterator[tuple[tuple[str, str], int]]:
    """``((topic, partition), lag)`` of every real partition with a known lag."""
    for topic_name, topic in topics.items():
        for key, partition in (topic.get("partitions") or {}).items():
            number = int(partition.get("partition", key))
            lag = partition.get("consumer_lag", -1)
            if not isinstance(lag, int) or lag < 0:
                # librdkafka computes consumer_lag from the consumer's own committed offset,
                # which it never learns when offsets are committed by a transactional
                # producer: then the lag is the last stable offset minus the position.
                stable, position = partition.get("ls_offset", -1), partition.get("app_offset", -1)
                if (
                    isinstance(stable, int)
                    and isinstance(position, int)
                    and min(stable, position) >= 0
                ):
                    lag = max(stable - position, 0)
            if number < 0 or not isinstance(lag, int) or lag < 0:
                continue
            yield (str(topic.get("topic", topic_name)), str(number)), lag
