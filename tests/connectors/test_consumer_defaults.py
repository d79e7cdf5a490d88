"""The input consumers' librdkafka settings: the defaults that keep the fetcher from backing off
a second at every 100,000 queued records, each overridden by the same key in ``SGM_KAFKA``."""

from __future__ import annotations

from connectors.kafka import CONSUMER_DEFAULTS, with_consumer_defaults


def test_the_defaults_apply_and_sgm_kafka_wins() -> None:
    config = {"bootstrap.servers": "kafka:9092", "fetch.queue.backoff.ms": 500}
    merged = with_consumer_defaults(config)
    assert merged["queued.min.messages"] == 1_000_000
    assert merged["fetch.queue.backoff.ms"] == 500
    assert merged["bootstrap.servers"] == "kafka:9092"
    assert with_consumer_defaults({}) == CONSUMER_DEFAULTS
    assert CONSUMER_DEFAULTS["fetch.queue.backoff.ms"] == 10
