"""Fixtures for tests against a real Kafka broker (see tests/kafka_broker.py for which one).

``kafka`` (session): a :class:`~tests.kafka_broker.KafkaCluster` with ``.bootstrap`` and, for a
local broker, ``.broker`` to stop, kill and start it. It never skips: when no broker can be had,
every test that uses it fails with the reason.
``kafka_bootstrap`` (session): just the bootstrap address.
``make_topic`` (function): creates a fresh topic, ``make_topic(partitions=3) -> name``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.kafka_broker import KafkaCluster, KafkaLocalError, broker_for_tests


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        try:
            cluster = stack.enter_context(broker_for_tests())
        except KafkaLocalError as exc:
            pytest.fail(f"no Kafka broker for the tests: {exc}", pytrace=False)
        yield cluster


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka: KafkaCluster) -> str:
    return kafka.bootstrap


@pytest.fixture
def make_topic(kafka: KafkaCluster) -> Callable[..., str]:
    """Create a topic with a unique name; returns once every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})

    def make(partitions: int = 3, prefix: str = "sgm-test") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1)
        admin.create_topics([topic], operation_timeout=30)[name].result(timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            meta = admin.list_topics(topic=name, timeout=10).topics.get(name)
            if (
                meta is not None
                and meta.error is None
                and len(meta.partitions) == partitions
                and all(p.leader >= 0 for p in meta.partitions.values())
            ):
                return name
            time.sleep(0.1)
        raise AssertionError(f"topic {name} has no leader for every partition after 30s")

    return make
