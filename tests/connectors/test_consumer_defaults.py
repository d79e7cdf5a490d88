"""The input consumers' librdkafka settings: the fetcher backs off 10 ms, not a second, when its
queue is full, and the queue is bounded both in records and in bytes (bench/NOTES.md, *Kafka
input ceiling*); each overridden by the same key in ``SGM_KAFKA``."""

from __future__ import annotations

from connectors.kafka import CONSUMER_DEFAULTS, with_consumer_defaults


def test_the_defaults_apply_and_sgm_kafka_wins() -> None:
    config = {"bootstrap.servers": "kafka:9092", "fetch.queue.backoff.ms": 500}
    merged = with_consumer_defaults(config)
    assert merged["queued.min.messages"] == 100_000
    assert merged["queued.max.messages.kbytes"] == 16_384
    assert merged["fetch.queue.backoff.ms"] == 500
    assert merged["bootstrap.servers"] == "kafka:9092"
    assert with_consumer_defaults({}) == CONSUMER_DEFAULTS
    assert CONSUMER_DEFAULTS["fetch.queue.backoff.ms"] == 10
    assert (
        with_consumer_defaults({"queued.max.messages.kbytes": 65_536})["queued.max.messages.kbytes"]
        == 65_536
    )
