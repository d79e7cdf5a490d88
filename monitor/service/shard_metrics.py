"""The partitioned engine's metrics (``SGM_ENGINE=distributed``), on the service's registry.

The driver (the serve process, which owns the Kafka clients) exports them on its own
``/metrics`` with every other ``subgraph_monitor_*`` family, so one scrape target holds the
whole service: each shard's figures are asked of it once per committed epoch (one round of
calls) and the exchange's are counted where the driver makes the calls. Ray's metrics agent is
not used: it would be a second endpoint per node to scrape, whose series would not carry the
service's epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

#: The families below, without the namespace (the dashboard and the alerts use them).
SHARD_METRIC_NAMES = (
    "shards",
    "engine_reloads_total",
    "shard_tuples",
    "shard_index_bytes",
    "shard_events",
    "shard_work_total",
    "shard_sent_bytes_total",
    "shard_received_bytes_total",
    "shard_committed_epoch",
    "shard_waiting_seconds",
    "exchange_rounds_total",
    "exchange_wait_seconds_total",
)


class ShardMetrics:
    """Per shard: what it holds, the work it did, the bytes it exchanged, the epoch it has."""

    def __init__(self, registry: CollectorRegistry, ns: str) -> None:
        shard = ["shard"]
        self.shards = Gauge(
            "shards", "Shards of the partitioned index.", namespace=ns, registry=registry
        )
        self.reloads = Counter(
            "engine_reloads_total",
            "Times the engine loaded its state again after losing a worker (a shard's "
            "process, a node).",
            namespace=ns,
            registry=registry,
        )
        self.tuples = Gauge(
            "shard_tuples", "Pairs held by the shard.", shard, namespace=ns, registry=registry
        )
        self.index_bytes = Gauge(
            "shard_index_bytes",
            "Memory held by the shard's adjacencies, tuple keys, vertices and time orders.",
            shard,
            namespace=ns,
            registry=registry,
        )
        self.events = Gauge(
            "shard_events", "Live events held by the shard.", shard, namespace=ns, registry=registry
        )
        self.work = Counter(
            "shard_work",
            "Keys counted, values proposed and pairs intersected by the shard.",
            shard,
            namespace=ns,
            registry=registry,
        )
        self.sent = Counter(
            "shard_sent_bytes",
            "Array bytes the driver sent to the shard.",
            shard,
            namespace=ns,
            registry=registry,
        )
        self.received = Counter(
            "shard_received_bytes",
            "Array bytes the shard answered the driver with.",
            shard,
            namespace=ns,
            registry=registry,
        )
        self.epoch = Gauge(
            "shard_committed_epoch",
            "The last epoch the shard has durably (a shard behind the others stopped).",
            shard,
            namespace=ns,
            registry=registry,
        )
        self.rounds = Counter(
            "exchange_rounds",
            "Rounds of calls the driver made to the shards.",
            namespace=ns,
            registry=registry,
        )
        self.wait = Counter(
            "exchange_wait_seconds",
            "Seconds the driver waited for the shards' answers.",
            namespace=ns,
            registry=registry,
        )
        self._waiting_gauge = Gauge(
            "shard_waiting_seconds",
            "Seconds the driver has been waiting for the shard's answer to the call in flight "
            "(0: none awaited); a shard that stops answering grows here.",
            shard,
            namespace=ns,
            registry=registry,
        )
        #: What the counters were set from last (a shard's work restarts at 0 on a reload).
        self._seen: dict[tuple[str, int], float] = {}

    def observe(
        self,
        stats: Sequence[Mapping[str, int]],
        epoch: int,
        sent: Sequence[int],
        received: Sequence[int],
        rounds: int,
        wait_seconds: float,
    ) -> None:
        """Each shard's figures (:meth:`ShardIndex.stats`) at ``epoch``, and the exchange's
        running totals."""
        self.shards.set(len(stats))
        for s, figures in enumerate(stats):
            label = str(s)
            self.tuples.labels(label).set(figures.get("pairs", 0))
            self.index_bytes.labels(label).set(figures.get("bytes", 0))
            self.events.labels(label).set(figures.get("events", 0))
            self.epoch.labels(label).set(figures.get("epoch", epoch))
            work = sum(figures.get(k, 0) for k in ("counted", "proposed", "intersected"))
            self._advance(self.work.labels(label), ("work", s), work)
            self._advance(self.sent.labels(label), ("sent", s), sent[s])
            self._advance(self.received.labels(label), ("received", s), received[s])
        self._advance(self.rounds, ("rounds", -1), rounds)
        self._advance(self.wait, ("wait", -1), wait_seconds)

    def watch(self, waiting: Callable[[], Sequence[float]]) -> None:
        """Read each shard's waiting time from ``waiting`` at every scrape."""
        for s in range(len(waiting())):
            self._waiting_gauge.labels(str(s)).set_function(_nth(waiting, s))

    def _advance(self, counter: Counter, key: tuple[str, int], total: float) -> None:
        """Move ``counter`` by what ``total`` grew since the last call (all of it after a
        restart from 0)."""
        before = self._seen.get(key, 0.0)
        counter.inc(total - before if total >= before else total)
        self._seen[key] = total


def _nth(values: Callable[[], Sequence[float]], n: int) -> Callable[[], float]:
    return lambda: values()[n]
