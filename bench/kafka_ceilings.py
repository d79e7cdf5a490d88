"""The Kafka client's own ceilings on this machine, for :mod:`bench.kafka`: what a bare
confluent-kafka consumer reads and what bare ``produce()`` calls write, against the same broker
and on the same cores as the service, so that ``serve``'s figures can be read as a share of them.

- *consumer*: a consumer configured as the service's (``read_committed``, no offsets committed
  or stored by the client, :data:`~connectors.kafka.CONSUMER_DEFAULTS`, the service's garbage
  collector thresholds) assigned every partition of the input topic from its start, calling
  ``consume(num_messages=CONSUME)`` as the service does until it has every record (a call's
  messages freed when the next call's replace them); nothing is decoded. Each pass starts with a
  stall (the first fetch, or after a seek back to the start the fetch already waiting at the end
  of the log, ``fetch.wait.max.ms``), so the clock of a pass starts once its first messages are
  there, and those are not counted; passes are read until they have counted 1 s (or for 5 s).
  ``serve`` meets that stall once, when it starts. :mod:`bench.kafka_consumer_settings` measures
  the same consumer under other settings.
- *producer*: the records that ``serve`` wrote in the ``records`` format, read back from its
  output topic (so keys and values are the sink's own, encoded beforehand), produced again by
  a bare ``produce()`` loop with one transaction per epoch of the service
  (:func:`bench.kafka_output.ceiling`).
"""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.kafka_output import ceiling
from connectors.kafka import CONSUME_BATCH, with_consumer_defaults
from monitor.service.serve import COLLECTOR_THRESHOLDS

#: Messages per ``consume`` call, as :class:`connectors.kafka.KafkaSource` asks.
CONSUME = CONSUME_BATCH


#: The keys :class:`connectors.kafka.KafkaSource` sets itself: no offsets committed or stored
#: by the client (they go into the producer's transactions), committed records only.
SERVICE_KEYS: dict[str, object] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "isolation.level": "read_committed",
}


@dataclass(frozen=True)
class Ceiling:
    """Records per second, over how many records of how many bytes each (key and value)."""

    rate: float
    records: int
    record_bytes: float


def service_consumer(
    bootstrap: str, topic: str, settings: Mapping[str, object] | None = None
) -> tuple[Consumer, list[TopicPartition]]:
    """A consumer configured as the service's (``settings`` playing ``SGM_KAFKA``'s part: they
    override :data:`~connectors.kafka.CONSUMER_DEFAULTS`), and every partition of ``topic`` at
    its start, to assign (and to seek back to)."""
    consumer = Consumer(
        with_consumer_defaults(
            {
                **(settings or {}),
                "bootstrap.servers": bootstrap,
                "group.id": f"ceiling-{uuid.uuid4().hex[:8]}",
                **SERVICE_KEYS,
            }
        )
    )
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    return consumer, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions]


def consumer_ceiling(
    bootstrap: str,
    topic: str,
    count: int,
    seconds: float = 1.0,
    most: float = 5.0,
    *,
    settings: Mapping[str, object] | None = None,
    num_messages: int = CONSUME,
) -> Ceiling:
    """A bare consumer reading the ``count`` records of ``topic`` in passes from its start,
    until the passes have counted ``seconds`` or taken ``most`` seconds in all, asking for
    ``num_messages`` a call; ``settings`` override the consumer defaults as ``SGM_KAFKA`` does.
    The service's garbage collector thresholds hold while it runs."""
    thresholds = gc.get_threshold()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    try:
        return _passes(bootstrap, topic, count, seconds, most, settings, num_messages)
    finally:
        gc.set_threshold(*thresholds)


def _passes(
    bootstrap: str,
    topic: str,
    count: int,
    seconds: float,
    most: float,
    settings: Mapping[str, object] | None,
    num_messages: int,
) -> Ceiling:
    consumer, parts = service_consumer(bootstrap, topic, settings)
    consumer.assign(parts)
    taken = passes = sample = sample_bytes = 0
    counted = 0.0
    began = time.perf_counter()
    deadline = time.monotonic() + 300
    while passes == 0 or (counted < seconds and time.perf_counter() - began < most):
        if passes:
            for tp in parts:
                consumer.seek(tp)
        read = 0
        started = None
        while read < count and time.monotonic() < deadline:
            # No more than the pass's rest: consume waits for as many as it is asked.
            messages = consumer.consume(num_messages=min(num_messages, count - read), timeout=0.5)
            read += len(messages)
            if started is not None:
                taken += len(messages)
            elif messages:  # the clock starts here: these are not counted
                sample = len(messages)
                sample_bytes = sum(len(m.key() or b"") + len(m.value() or b"") for m in messages)
                started = time.perf_counter()
        if started is None or read < count:
            raise RuntimeError(f"a bare consumer read {read:,} of the {count:,} records of {topic}")
        counted += time.perf_counter() - started
        passes += 1
    consumer.close()
    return Ceiling(taken / counted, taken, sample_bytes / sample)


def written(bootstrap: str, topic: str, count: int) -> tuple[list[bytes], list[bytes]]:
    """The first ``count`` committed records of a one-partition output topic: keys and values,
    in order (fewer if the topic has fewer within 5 minutes)."""
    consumer, parts = service_consumer(bootstrap, topic)
    consumer.assign(parts)
    keys: list[bytes] = []
    values: list[bytes] = []
    deadline = time.monotonic() + 300
    while len(keys) < count and time.monotonic() < deadline:
        for m in consumer.consume(num_messages=min(CONSUME, count - len(keys)), timeout=0.5):
            if m.error() is None:
                keys.append(m.key() or b"")
                values.append(m.value() or b"")
    consumer.close()
    return keys, values


def producer_ceiling(bootstrap: str, topic: str, per_epoch: list[int]) -> Ceiling:
    """Bare ``produce()`` of the records of ``topic`` (``serve``'s output in the ``records``
    format), split into transactions of ``per_epoch`` records as the service committed them."""
    keys, values = written(bootstrap, topic, sum(per_epoch))
    if len(keys) != sum(per_epoch):
        raise RuntimeError(
            f"{topic} gave {len(keys):,} records, the service's log says {sum(per_epoch):,}"
        )
    encoded = []
    at = 0
    for n in per_epoch:
        encoded.append((keys[at : at + n], values[at : at + n]))
        at += n
    timing = ceiling(bootstrap, encoded, {})
    size = sum(len(k) + len(v) for k, v in zip(keys, values, strict=True))
    return Ceiling(len(keys) / timing.wall, len(keys), size / max(len(keys), 1))
