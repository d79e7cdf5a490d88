"""Fixtures for tests against a real Kafka broker (see tests/kafka_broker.py for which one).

``kafka`` (session): a :class:`~tests.kafka_broker.KafkaCluster` with ``.bootstrap`` and, for a
local broker, ``.broker`` to stop, kill and start it. It never skips: when no broker can be had,
every test that uses it fails with the reason.
``kafka_bootstrap`` (session): just the bootstrap address.
``make_topic`` (function): creates a fresh topic, ``make_topic(partitions=3) -> name``.
``service`` (function): makes ``serve`` subprocesses, ``service(partitions=3, **SGM_env)``.
``workers`` (function): a scale-out deployment whose workers start with ``start(name)``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.kafka_broker import KafkaCluster, KafkaLocalError, broker_for_tests

if TYPE_CHECKING:
    from tests.kafka.test_cluster import Workers
    from tests.kafka.test_serve import Service


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


@pytest.fixture
def service(
    kafka: KafkaCluster, make_topic: Callable[..., str], tmp_path: Path
) -> Iterator[Callable[..., Service]]:
    """Make ``serve`` subprocesses (:class:`~tests.kafka.test_serve.Service`); killed at the end."""
    from tests.kafka.test_serve import Service

    made: list[Service] = []

    def make(partitions: int = 3, **env: str) -> Service:
        s = Service(kafka, make_topic, tmp_path / f"svc{len(made)}", partitions, **env)
        made.append(s)
        return s

    yield make
    for s in made:
        if s.proc is not None and s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(timeout=30)


@pytest.fixture
def workers(
    kafka: KafkaCluster, make_topic: Callable[..., str], tmp_path: Path
) -> Iterator[Workers]:
    """A scale-out deployment (:class:`~tests.kafka.test_cluster.Workers`); killed at the end."""
    from tests.kafka.test_cluster import Workers

    w = Workers(kafka, make_topic, tmp_path)
    yield w
    for proc in w.procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
