"""A real Kafka broker for the tests: an external cluster, a testcontainer, or a local KRaft JVM.

:class:`KafkaBroker` is the same implementation as ``scripts/kafka-local`` (it lives in
``scripts/kafka_local.py``): a single-node KRaft broker on 127.0.0.1 from Maven Central jars, with
``start()``, ``stop()`` (SIGTERM, data kept: ``start()`` brings back the same broker on the same
port), ``kill()`` (SIGKILL), ``close()`` (stop and delete) and ``bootstrap``.

:func:`broker_for_tests` picks, in order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` if set: an external cluster, used as it is;
2. a testcontainers Kafka container if a Docker daemon answers ``docker info`` (the
   ``testcontainers`` package is then needed; ``SGM_KAFKA_IMAGE`` names the image);
3. a local :class:`KafkaBroker` (needs ``java`` 17+, and ``mvn`` the first time).

``SGM_KAFKA_MODE=external|docker|local`` forces one of them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from scripts.kafka_jars import KafkaLocalError, fetch_jars, kafka_version
from scripts.kafka_local import KafkaBroker
from scripts.kafka_protocol import fetch_metadata

__all__ = [
    "KafkaBroker",
    "KafkaCluster",
    "KafkaLocalError",
    "broker_for_tests",
    "docker_available",
    "fetch_jars",
    "fetch_metadata",
    "kafka_version",
]

Kind = Literal["external", "docker", "local"]

# Exactly-once on one node, for a container (the local broker: scripts/kafka_config.py).
_CONTAINER_ENV = {
    "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
    "KAFKA_MIN_INSYNC_REPLICAS": "1",
    "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
}


@dataclass(frozen=True)
class KafkaCluster:
    """What a test gets: where to connect, and the broker itself when it is a local one."""

    bootstrap: str
    kind: Kind
    broker: KafkaBroker | None = None

    @property
    def restartable(self) -> bool:
        """Whether the test may stop, kill and start the broker (local brokers only)."""
        return self.broker is not None

    def local_broker(self) -> KafkaBroker:
        if self.broker is None:
            raise KafkaLocalError(f"the {self.kind} Kafka at {self.bootstrap} is not a local one")
        return self.broker


def docker_available(timeout: float = 15.0) -> bool:
    """Whether a Docker daemon answers (the CLI alone is not enough)."""
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        done = subprocess.run([docker, "info"], capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@contextlib.contextmanager
def _container() -> Iterator[str]:
    try:
        module: Any = importlib.import_module("testcontainers.kafka")
    except ImportError as exc:
        raise KafkaLocalError(
            "a Docker daemon is running but the `testcontainers` package is not installed: "
            "pip install 'testcontainers[kafka]', or set SGM_KAFKA_MODE=local"
        ) from exc
    image = os.environ.get("SGM_KAFKA_IMAGE")
    container = module.KafkaContainer(image) if image else module.KafkaContainer()
    container = container.with_kraft()
    for key, value in _CONTAINER_ENV.items():
        container = container.with_env(key, value)
    with container as running:
        yield str(running.get_bootstrap_server())


def _mode() -> Kind:
    forced = os.environ.get("SGM_KAFKA_MODE", "").strip().lower()
    if forced in ("external", "docker", "local"):
        return forced  # type: ignore[return-value]
    if forced:
        raise KafkaLocalError(f"SGM_KAFKA_MODE={forced!r}: use external, docker or local")
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return "external"
    return "docker" if docker_available() else "local"


@contextlib.contextmanager
def broker_for_tests(**broker_options: Any) -> Iterator[KafkaCluster]:
    """A running Kafka for the length of the ``with`` block (see the module docstring).

    A local broker lives in a temporary run directory, dies with this process, and is deleted
    at the end; ``broker_options`` go to :class:`KafkaBroker`. Raises :class:`KafkaLocalError`
    with the reason (and the broker's log) when no broker can be had.
    """
    mode = _mode()
    if mode == "external":
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")
        if not bootstrap:
            raise KafkaLocalError("SGM_KAFKA_MODE=external needs KAFKA_BOOTSTRAP_SERVERS")
        yield KafkaCluster(bootstrap, "external")
        return
    if mode == "docker":
        with _container() as bootstrap:
            yield KafkaCluster(bootstrap, "docker")
        return
    broker_options.setdefault("die_with_parent", True)
    broker = KafkaBroker(**broker_options)
    try:
        broker.start()
        yield KafkaCluster(broker.bootstrap, "local", broker)
    finally:
        broker.close()
