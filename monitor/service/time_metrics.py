"""Prometheus metrics of event time: watermarks, event-time lag, expired and late events.

Event-time systems are watched by their watermark. The service exports the run's watermark and
each input partition's (seconds since the Unix epoch, like every time in Prometheus), the
*event-time lag* of each partition (wall clock minus its watermark, computed when scraped, so a
watermark that stops advancing shows as a lag that grows), and per event relation the events
that expired and the inserts refused as late. Live events per relation are
``subgraph_monitor_events_stored``. A partition that has not delivered enough timed events yet
(more than the ignored outliers) has no watermark and no lag series.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: The families this module exports, without the namespace.
TIME_METRIC_NAMES = (
    "watermark_seconds",
    "partition_watermark_seconds",
    "event_time_lag_seconds",
    "events_expired_total",
    "events_late_total",
)


class _Lag(Collector):
    """``event_time_lag_seconds{partition}``: now minus each partition's watermark, at scrape."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.watermarks: dict[str, float] = {}
        self.lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(self.name, self._doc, labels=["partition"])

    _doc = "Wall clock minus the partition's watermark (event-time lag), seconds."

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.name, self._doc, labels=["partition"])
        now = time.time()
        with self.lock:
            for partition, seconds in sorted(self.watermarks.items()):
                family.add_metric([partition], now - seconds)
        yield family


class TimeMetrics:
    """The event-time families, registered in ``registry`` under ``namespace``."""

    def __init__(self, registry: CollectorRegistry, namespace: str) -> None:
        ns, reg = namespace, registry
        self.watermark = Gauge(
            "watermark_seconds",
            "The run's watermark (minimum over input partitions), seconds since the epoch.",
            namespace=ns,
            registry=reg,
        )
        self.partition_watermark = Gauge(
            "partition_watermark_seconds",
            "Each input partition's watermark, seconds since the epoch.",
            ["partition"],
            namespace=ns,
            registry=reg,
        )
        self.expired = Counter(
            "events_expired_total",
            "Events that left the window of their relation (expiry, as a deletion).",
            ["relation"],
            namespace=ns,
            registry=reg,
        )
        self.late = Counter(
            "events_late_total",
            "Inserts older than the window when they arrived: not applied, dead letters.",
            ["relation"],
            namespace=ns,
            registry=reg,
        )
        self.lag = _Lag(f"{ns}_event_time_lag_seconds")
        reg.register(self.lag)

    def epoch(
        self,
        watermark: float,
        partitions: Mapping[str, float],
        expired: Mapping[str, int],
        late: Mapping[str, int],
    ) -> None:
        """A committed epoch's event time: watermarks in ms (``-inf`` while unknown)."""
        if math.isfinite(watermark):
            self.watermark.set(watermark / 1000.0)
        known = {p: ms / 1000.0 for p, ms in partitions.items() if math.isfinite(ms)}
        for partition, seconds in known.items():
            self.partition_watermark.labels(partition).set(seconds)
        with self.lag.lock:
            self.lag.watermarks.update(known)
        for relation, n in expired.items():
            self.expired.labels(relation).inc(n)
        for relation, n in late.items():
            self.late.labels(relation).inc(n)
