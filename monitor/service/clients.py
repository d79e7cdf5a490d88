"""The Kafka clients of the service, configured from the settings: consumers, producers, admins."""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version

from connectors.avro_output import AvroDeltas
from connectors.kafka_sink import (
    KafkaSink,
)
from connectors.registry_decoders import registry_client
from monitor.service.settings import Settings

log = logging.getLogger(__name__)


def service_version() -> str:
    try:
        return version("subgraph-monitor")
    except PackageNotFoundError:
        return "unknown"


def client_config(settings: Settings, *, consumer: bool) -> dict[str, str | int | float | bool]:
    config: dict[str, str | int | float | bool] = {
        "bootstrap.servers": settings.bootstrap_servers,
        **settings.kafka_config(),
    }
    if consumer:
        config["group.id"] = settings.group_id
        # Static membership: a restarted instance takes its old place at once, and a
        # member with another instance id is another instance.
        config["group.instance.id"] = settings.instance_id
        config.setdefault("client.id", f"subgraph-monitor-{settings.instance_id}")
    return config


def transactional_id(settings: Settings) -> str:
    if settings.transactional_id:
        return settings.transactional_id
    if settings.control_topic:  # one producer per worker, fenced by its stable instance id
        return f"subgraph-monitor-{settings.group_id}-{settings.instance_id}"
    return f"subgraph-monitor-{settings.group_id}"


def new_sink(settings: Settings) -> KafkaSink:
    return KafkaSink(
        client_config(settings, consumer=False),
        transactional_id=transactional_id(settings),
        output_topic=settings.output_topic,
        dead_letter_topic=settings.dead_letter_topic,
        version=service_version(),
        transaction_timeout_ms=settings.transaction_timeout_ms,
        output_format=settings.output_format,
        batch_encoding=settings.batch_encoding,
        avro=avro_deltas(settings),
    )


def avro_deltas(settings: Settings) -> AvroDeltas | None:
    """The Avro encoder of the output topic's deltas (``SGM_OUTPUT_FORMAT=avro``), else None."""
    if settings.output_format != "avro":
        return None
    assert settings.schema_registry_url is not None  # (the settings refuse it missing)
    client = registry_client(settings.schema_registry_url, settings.registry_config())
    return AvroDeltas(client, settings.output_topic)
