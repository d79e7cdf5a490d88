"""One decoder per schema-registry format, each a ``confluent_kafka.schema_registry``
deserializer reading a value with its writer's schema (fetched once per schema id and cached by
the client), and what its errors mean: an unknown id, a registry down, or a value that does not
decode (:mod:`connectors.registry_records`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer

from connectors.registry_protobuf import ProtobufDecoder
from connectors.registry_records import Decode, RegistryUnavailable, UnknownSchema

#: The client's own retries are few: the service retries a registry that is down, reporting it.
CLIENT_DEFAULTS = {"max.retries": "1", "timeout": "10"}


def registry_client(url: str, settings: Mapping[str, str]) -> SchemaRegistryClient:
    """A client of the registry at ``url`` (a comma list for several) with ``settings`` (basic
    auth, TLS, as ``confluent_kafka.schema_registry`` names them)."""
    conf: dict[str, Any] = {**CLIENT_DEFAULTS, **settings, "url": url}
    for key in ("max.retries", "retries.wait.ms", "retries.max.wait.ms", "cache.capacity"):
        if key in conf:
            conf[key] = int(conf[key])
    if "timeout" in conf:
        conf["timeout"] = float(conf["timeout"])
    return SchemaRegistryClient(conf)


def decoders(client: SchemaRegistryClient, formats: set[str]) -> dict[str, Decode]:
    """A decoder for each of the registry ``formats`` (``avro``, ``protobuf``,
    ``jsonschema``)."""
    made: dict[str, Decode] = {}
    for name in formats:
        if name == "avro":
            made[name] = _explained(AvroDeserializer(client))
        elif name == "jsonschema":
            # (each value with its writer's schema: no subject, so no "latest" reader schema)
            conf = {"subject.name.strategy": _no_subject}
            made[name] = _explained(
                JSONDeserializer(None, schema_registry_client=client, conf=conf)
            )
        elif name == "protobuf":
            made[name] = _explained(ProtobufDecoder(client))
        else:
            raise ValueError(f"no schema registry format {name!r}")
    return made


def _no_subject(ctx: object, record_name: object) -> None:
    """The subject strategy of a reader that reads with the writer's schema alone."""
    return None


def _explained(deserializer: Callable[..., Any]) -> Decode:
    """``deserializer`` with its errors told apart: :class:`UnknownSchema` for an id the
    registry does not know, :class:`RegistryUnavailable` when it does not answer; any other
    error is the value's."""

    def decode(value: bytes) -> Any:
        try:
            return deserializer(value, None)
        except Exception as error:
            cause = _registry_cause(error)
            if isinstance(cause, SchemaRegistryError) and cause.http_status_code == 404:
                raise UnknownSchema(
                    f"schema id {_schema_id(value)} is not in the registry ({cause.error_message})"
                ) from error
            if cause is not None:
                raise RegistryUnavailable(f"the schema registry did not answer: {cause}") from error
            raise

    return decode


def _registry_cause(error: BaseException) -> BaseException | None:
    """The registry's failure behind ``error``: a :class:`SchemaRegistryError`, or an HTTP
    transport error (refused, time-out); None if the value itself is at fault."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, SchemaRegistryError):
            return seen if seen.http_status_code == 404 or seen.http_status_code >= 500 else None
        if isinstance(seen, (ConnectionError, TimeoutError)) or _transport_error(seen):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _schema_id(value: bytes) -> int | str:
    """The schema id a value is framed with, for a message (``?`` if it has none)."""
    if len(value) < 5:
        return "?"
    return int.from_bytes(value[1:5], "big")


def _transport_error(error: BaseException) -> bool:
    """Whether ``error`` is the HTTP client's transport error (httpx's or httpx2's, whichever
    the library uses): the registry was not reached."""
    return any(
        kind.__name__ == "TransportError" and kind.__module__.split(".")[0].startswith("httpx")
        for kind in type(error).__mro__
    )
