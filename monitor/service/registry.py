"""The schema registry as the service uses it: how each input topic is read, and polls that wait
for a registry that does not answer.

:func:`record_formats` makes the Kafka source's :class:`~connectors.registry_records.RecordFormats`
from the settings (``SGM_INPUT_FORMAT``, ``SGM_TOPIC_FORMATS``, ``SGM_FIELD_MAP``,
``SGM_SCHEMA_REGISTRY_URL``, ``SGM_SCHEMA_REGISTRY`` and ``SGM_AVRO_DECODING``: Avro polls read
as columns, :mod:`connectors.avro_columns`). :func:`poll` is the source's poll,
retried with backoff while the registry is down: the records are not at fault, so none becomes a
dead letter; the poll is given back and read again, readiness is false meanwhile
(``schema_registry_reachable``), and a warning says so at each retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from connectors.avro_columns import columnar_avro
from connectors.events import FieldTypes
from connectors.kafka import KafkaSource
from connectors.kafka_records import Partition, Polled
from connectors.registry_decoders import decoders, registry_client
from connectors.registry_records import FieldMap, RecordFormats, RegistryUnavailable
from core.records import UpdateBatch
from monitor.service.health import Health
from monitor.service.settings import Settings
from monitor.service.stop import Stop

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Longest wait between two tries of a registry that does not answer.
MAX_RETRY_SECONDS = 30.0


def record_formats(settings: Settings, field_types: FieldTypes | None) -> RecordFormats | None:
    """How the input topics are read; None when every one is JSON."""
    used = {settings.input_format, *settings.topic_formats.values()} - {"json"}
    if not used:
        return None
    assert settings.schema_registry_url is not None  # (the settings refuse it missing)
    client = registry_client(settings.schema_registry_url, settings.registry_config())
    compared = {
        relation: frozenset(fields)
        for relation, fields in (field_types.types.items() if field_types else ())
    }
    field_map = FieldMap.parse(settings.field_map)
    columns = None
    if "avro" in used and settings.avro_decoding == "columns":
        columns = columnar_avro(client, field_map, compared)
        if columns is None:
            log.warning("polars is not installed: Avro input is decoded record by record")
    return RecordFormats(
        settings.input_format,
        settings.topic_formats,
        decoders(client, used),
        field_map,
        compared,
        {"avro": columns} if columns is not None else None,
    )


def poll(
    source: KafkaSource,
    health: Health,
    max_updates: int,
    max_delay: float,
    *,
    stop_at: Mapping[Partition, int] | None = None,
    interrupted: Callable[[], bool] | None = None,
) -> Polled:
    """``source.poll``, tried again while the schema registry does not answer (nothing while
    a stop is requested)."""
    polled = retrying(
        lambda: source.poll(max_updates, max_delay, stop_at=stop_at, interrupted=interrupted),
        health,
        "the records are read again",
        _positions(source),
    )
    return polled if polled is not None else Polled(UpdateBatch(first_seq=source.next_seq))


def retrying(
    work: Callable[[], T], health: Health, then: str, where: Mapping[str, Any]
) -> T | None:
    """``work()``, done again with backoff while it raises :class:`RegistryUnavailable`
    (readiness false meanwhile, a warning saying ``then`` and ``where`` at each try); None if
    a stop is requested while waiting."""
    delay = 1.0
    while True:
        try:
            done = work()
        except RegistryUnavailable as error:
            health.set_registry_reachable(False)
            log.warning("%s; %s in %.0f s (not ready meanwhile)", error, then, delay, extra=where)
            end = time.monotonic() + delay
            while time.monotonic() < end and not Stop.requested:
                health.beat()
                time.sleep(0.2)
            if Stop.requested:
                return None
            delay = min(delay * 2, MAX_RETRY_SECONDS)
            continue
        health.set_registry_reachable(True)
        return done


def _positions(source: KafkaSource) -> dict[str, Any]:
    """Where the source stands, for the log line: its assigned partitions."""
    try:
        assigned = [f"{tp.topic}:{tp.partition}" for tp in source.consumer.assignment()]
    except Exception:  # (the consumer may be closing)
        assigned = []
    return {"partitions": assigned}
