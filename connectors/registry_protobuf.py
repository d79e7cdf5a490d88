"""Protobuf records read without generated code: the message class made from the writer's schema.

``confluent_kafka.schema_registry``'s ``ProtobufDeserializer`` parses into a message class the
caller compiled in. A service that reads any team's topics has none, so the class is made from
the writer's schema in the registry (its file descriptor, with the files it imports), once per
schema id and message, and handed to a ``ProtobufDeserializer`` that then reads every value of
that schema. The framing (magic byte, schema id, message indexes) is read by the library's
``SchemaId``. A message becomes a plain dict (:func:`message_dict`): every field of the
schema, a scalar at its default included (proto3 does not say whether it was set), 64-bit
integers as integers (not the strings of Protobuf's JSON mapping), enums by name,
``google.protobuf.Timestamp`` as a time.
"""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry._sync.protobuf import (
    ProtobufDeserializer,
    _resolve_named_schema,
)
from confluent_kafka.schema_registry.common.protobuf import PROTOBUF_TYPE, _init_pool, _str_to_proto
from confluent_kafka.schema_registry.common.serde import SchemaId
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

TIMESTAMP = "google.protobuf.Timestamp"


class ProtobufDecoder:
    """Values of any Protobuf schema in the registry, each read with its writer's message."""

    def __init__(self, client: SchemaRegistryClient) -> None:
        self.client = client
        self._readers: dict[tuple[int, tuple[int, ...]], ProtobufDeserializer] = {}

    def __call__(self, value: bytes, ctx: object = None) -> dict[str, Any]:
        frame = SchemaId(PROTOBUF_TYPE)
        frame.from_bytes(io.BytesIO(value))
        if frame.id is None:
            raise ValueError("framed with a schema GUID, not an id")
        key = (frame.id, tuple(frame.message_indexes or [0]))
        reader = self._readers.get(key)
        if reader is None:
            reader = self._readers[key] = self._reader(*key)
        message: Any = reader(value, None)  # (the library annotates it as bytes)
        if not isinstance(message, Message):
            raise ValueError("decoded to nothing")
        return message_dict(message)

    def _reader(self, schema_id: int, indexes: tuple[int, ...]) -> ProtobufDeserializer:
        schema = self._schema(schema_id)
        assert schema.schema_str is not None
        pool = DescriptorPool()
        _init_pool(pool)
        _resolve_named_schema(schema, self.client, pool)
        proto = _str_to_proto("default", schema.schema_str)
        pool.Add(proto)
        file = pool.FindFileByName(proto.name)
        descriptor = _message_at(list(file.message_types_by_name.values()), indexes)
        # (no client: the writer's message is the class; the deserializer checks the framing)
        reader: ProtobufDeserializer = ProtobufDeserializer(GetMessageClass(descriptor), {}, None)
        return reader

    def _schema(self, schema_id: int) -> Schema:
        """The writer's schema as a serialized file descriptor: as registered when a Python or
        Go client registered it so, else converted by the registry (``format=serialized``, for
        a schema registered as ``.proto`` text)."""
        schema = self.client.get_schema(schema_id)
        if schema.schema_str is None:
            raise ValueError(f"schema id {schema_id} has no text")
        try:
            _str_to_proto("default", schema.schema_str)
        except Exception:  # (.proto text, not a serialized descriptor)
            schema = self.client.get_schema(schema_id, fmt="serialized")
        return schema


def _message_at(top: list[Descriptor], indexes: tuple[int, ...]) -> Descriptor:
    """The message the framing's indexes name: the first among the file's top-level messages,
    the following ones among each one's nested messages."""
    candidates = top
    found: Descriptor | None = None
    for index in indexes:
        if not 0 <= index < len(candidates):
            raise ValueError(f"message index {index} is not in the schema")
        found = candidates[index]
        candidates = list(found.nested_types)
    if found is None:
        raise ValueError("no message in the schema")
    return found


def message_dict(message: Message) -> dict[str, Any]:
    """Every field of ``message`` as plain Python values (nested messages as dicts; a message
    field that is not set is left out)."""
    out: dict[str, Any] = {}
    for fd in message.DESCRIPTOR.fields:
        value = getattr(message, fd.name)
        if fd.is_repeated:
            continue  # (lists are never event fields; a map or list reached by path is not)
        if fd.type == FieldDescriptor.TYPE_MESSAGE:
            if not message.HasField(fd.name):
                continue
            out[fd.name] = _time(value) if _is_time(fd) else message_dict(value)
        elif fd.type == FieldDescriptor.TYPE_ENUM:
            names = fd.enum_type.values_by_number if fd.enum_type is not None else {}
            known = names.get(value)
            out[fd.name] = value if known is None else known.name
        elif fd.has_presence and not message.HasField(fd.name):
            continue
        else:
            out[fd.name] = value
    return out


def _is_time(fd: Any) -> bool:
    """Whether a message field is a ``google.protobuf.Timestamp`` (of whichever pool)."""
    return fd.message_type is not None and fd.message_type.full_name == TIMESTAMP


def _time(value: Any) -> dt.datetime:
    return dt.datetime.fromtimestamp(0, dt.UTC) + dt.timedelta(
        seconds=value.seconds, microseconds=value.nanos // 1000
    )
