"""Match deltas as Avro records, their schema registered in the schema registry
(``SGM_OUTPUT_FORMAT=avro``).

Each delta is the record the JSON output writes (:mod:`connectors.delta_json`: ``query``,
``epoch``, ``diff``, ``match``, then ``edges``, ``cause``, ``match_id`` and an aggregate's
``values`` and ``events`` where a row has them), written in Avro by
``confluent_kafka.schema_registry``'s ``AvroSerializer``. Its schema is registered under the
output topic's subject (``TopicNameStrategy``: ``TOPIC-value``), so a consumer with the
standard Avro deserializer reads it with no code from us. The schema follows what is written
(:class:`DeltaSchema`): ``match`` is a map of vertex ids (``long`` or ``string``); ``edges`` a map
from edge variable to an ``Event`` record with ``id``, ``src``, ``dst`` and one optional field
per event field seen, typed as it was (``long``, ``double``, ``string``, ``boolean``). A field
or a type seen for the first time widens the schema, a new version that is backward compatible
(every added field is optional, with a ``null`` default; a type only gains branches),
registered before the records that need it. A restarted service widens the subject's latest
schema, not a new one, so versions only ever grow.

The serializer encodes one record per call: with the JSON text of the deltas read back
(``orjson``, one C call each) that is the Python work per delta here (``bench.kafka_output``
says what it costs).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import orjson
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

log = logging.getLogger(__name__)

#: The serializer's settings: the schema registered under ``TOPIC-value`` (the TOPIC strategy,
#: without asking the registry for associations, which only Confluent's newest API has).
SERIALIZER = {"auto.register.schemas": True, "subject.name.strategy.type": "TOPIC"}

#: The members every delta has, and their Avro types.
FIXED = {"query": "string", "epoch": "long", "diff": "int"}
_PRIMITIVE = {bool: "boolean", int: "long", float: "double", str: "string"}
_KINDS: dict[type, str] = {**_PRIMITIVE, type(None): "null"}
_SCALAR_TYPES = frozenset(_KINDS)
_NOT_MEMBERS = frozenset({*FIXED, "match"})


@dataclass
class Shape:
    """What the values seen at one place of the records were: primitive kinds, and the shapes
    of list items and of object values."""

    kinds: set[str] = field(default_factory=set)
    items: Shape | None = None
    values: Shape | None = None

    def add(self, value: Any) -> bool:
        """Take ``value`` in; whether the shape grew."""
        if value is None:
            grew = "null" not in self.kinds
            self.kinds.add("null")
            return grew
        if isinstance(value, list):
            grew = self.items is None
            self.items = self.items or Shape()
            return any([self.items.add(v) for v in value]) or grew
        if isinstance(value, dict):
            grew = self.values is None
            self.values = self.values or Shape()
            return any([self.values.add(v) for v in value.values()]) or grew
        kind = _PRIMITIVE[type(value)]
        grew = kind not in self.kinds
        self.kinds.add(kind)
        return grew

    def add_all(self, values: list[Any]) -> bool:
        """Take every one of ``values`` in (a set of their types at once where they are all
        scalars); whether the shape grew."""
        kinds = {type(v) for v in values}
        if kinds <= _SCALAR_TYPES:
            new = {_KINDS[k] for k in kinds} - self.kinds
            self.kinds |= new
            return bool(new)
        return any([self.add(v) for v in values])

    @classmethod
    def of(cls, avro: Any) -> Shape:
        """The shape an Avro type written by :meth:`avro` stands for."""
        shape = cls()
        for branch in avro if isinstance(avro, list) else [avro]:
            if isinstance(branch, str):
                shape.kinds.add(branch)
            elif branch.get("type") == "array":
                shape.items = cls.of(branch["items"])
            elif branch.get("type") == "map":
                shape.values = cls.of(branch["values"])
            else:
                raise ValueError(f"not a type of a delta schema: {branch}")
        return shape

    def avro(self, optional: bool = False) -> Any:
        """The Avro type (a union where more than one kind was seen)."""
        branches: list[Any] = ["null"] if optional or "null" in self.kinds else []
        order = ("boolean", "long", "double", "string")
        branches += [k for k in order if k in self.kinds]
        # (a list's items and an object's values may be null: so an empty one, seen before
        # any item, and the ones after it have a type in common)
        if self.items is not None:
            branches.append({"type": "array", "items": self.items.avro(optional=True)})
        if self.values is not None:
            branches.append({"type": "map", "values": self.values.avro(optional=True)})
        if not branches:
            return "null"
        return branches[0] if len(branches) == 1 else branches


@dataclass
class DeltaSchema:
    """The Avro schema of the deltas written so far, widened as new members and fields come."""

    match: Shape = field(default_factory=Shape)
    #: Per event field (``id``, ``src``, ``dst`` first), the shape of its values.
    event: dict[str, Shape] = field(
        default_factory=lambda: {"id": Shape(), "src": Shape(), "dst": Shape()}
    )
    #: Per other member (``cause``, ``match_id``, ``values``, ...), in the order first seen.
    members: dict[str, Shape] = field(default_factory=dict)

    @classmethod
    def of(cls, avro: dict[str, Any]) -> DeltaSchema:
        """The schema :meth:`avro` wrote (read back from the registry), to widen further."""
        schema = cls()
        for entry in avro["fields"]:
            name, kind = entry["name"], entry["type"]
            if name == "match":
                schema.match.values = Shape.of(kind["values"])
            elif name == "edges":
                schema.members["edges"] = Shape()
                for event_field in kind[1]["values"]["fields"]:
                    schema.event[event_field["name"]] = Shape.of(event_field["type"])
            elif name not in FIXED:
                schema.members[name] = Shape.of(kind)
                schema.members[name].kinds.discard("null")  # (added back: every member is)
        return schema

    def add_all(self, records: list[dict[str, Any]]) -> bool:
        """Take a chunk of deltas in, a place at a time (one set of types per place, not a
        walk per delta); whether the schema grew."""
        grew = False
        if self.match.values is None:
            self.match.values = Shape()
            grew = True
        grew = self.match.values.add_all([v for r in records for v in r["match"].values()]) or grew
        by_member: dict[str, list[Any]] = {}
        for record in records:
            for name, value in record.items():
                if name not in _NOT_MEMBERS:
                    by_member.setdefault(name, []).append(value)
        events = [e for edges in by_member.pop("edges", ()) for e in edges.values()]
        if events:
            if "edges" not in self.members:
                self.members["edges"] = Shape()
                grew = True
            names = set(chain.from_iterable(events))
            for name in sorted(names.difference(self.event)):
                self.event[name] = Shape()
                grew = True
            for name, shape in self.event.items():
                grew = shape.add_all([e.get(name) for e in events]) or grew
        for name, values in by_member.items():
            if name not in self.members:
                self.members[name] = Shape()
                grew = True
            grew = self.members[name].add_all(values) or grew
        return grew

    def add(self, record: dict[str, Any]) -> bool:
        """Take a delta in; whether the schema grew."""
        grew = self.match.add(record["match"])
        for name, value in record.items():
            if name in FIXED or name == "match":
                continue
            if name == "edges":
                grew = self._edges(value) or grew
                continue
            if name not in self.members:
                self.members[name] = Shape()
                grew = True
            grew = self.members[name].add(value) or grew
        return grew

    def _edges(self, edges: dict[str, dict[str, Any]]) -> bool:
        grew = "edges" not in self.members
        self.members.setdefault("edges", Shape())
        for event in edges.values():
            for name, value in event.items():
                if name not in self.event:
                    self.event[name] = Shape()
                    grew = True
                grew = self.event[name].add(value) or grew
        return grew

    def avro(self) -> dict[str, Any]:
        fields: list[dict[str, Any]] = [{"name": n, "type": t} for n, t in FIXED.items()]
        match = self.match.values.avro() if self.match.values else "string"
        fields.append({"name": "match", "type": {"type": "map", "values": match}})
        for name in sorted(self.members, key=_member_order):
            shape = self.members[name]
            kind = self._event_map() if name == "edges" else shape.avro(optional=True)
            fields.append({"name": name, "type": kind, "default": None})
        return {
            "type": "record",
            "name": "MatchDelta",
            "namespace": "subgraph_monitor",
            "doc": "A change of a query's result: diff +1 appeared, -1 disappeared",
            "fields": fields,
        }

    def _event_map(self) -> list[Any]:
        fields = []
        for name in sorted(self.event, key=_event_order):
            shape = self.event[name]
            optional = name not in ("id", "src", "dst")
            entry: dict[str, Any] = {"name": name, "type": shape.avro(optional=optional)}
            if optional:
                entry["default"] = None
            fields.append(entry)
        event = {"type": "record", "name": "Event", "fields": fields}
        return ["null", {"type": "map", "values": event}]


#: Where the members and an event's fields go in the schema: as the JSON writes them, the
#: others by name (so that the schema is the same whatever order they were first seen in).
_MEMBERS = ("edges", "cause", "match_id", "values", "events")
_EVENT = ("id", "src", "dst")


def _member_order(name: str) -> tuple[int, str]:
    return (_MEMBERS.index(name) if name in _MEMBERS else len(_MEMBERS), name)


def _event_order(name: str) -> tuple[int, str]:
    return (_EVENT.index(name) if name in _EVENT else len(_EVENT), name)


class AvroDeltas:
    """The encoder of one output topic's deltas."""

    def __init__(self, client: SchemaRegistryClient, topic: str) -> None:
        self.client = client
        self.context = SerializationContext(topic, MessageField.VALUE)
        self.subject = f"{topic}-value"
        self.schema = self._registered()
        self._serializer: AvroSerializer | None = None

    def _registered(self) -> DeltaSchema:
        """The subject's latest schema, where this service wrote one: the schema only ever
        widens, across restarts too, so that each version reads the data of the ones before
        (BACKWARD compatibility, the registry's default)."""
        try:
            latest = self.client.get_latest_version(self.subject)
        except SchemaRegistryError as error:
            if error.http_status_code == 404:
                return DeltaSchema()
            raise
        text = latest.schema.schema_str if latest.schema is not None else None
        try:
            return DeltaSchema.of(orjson.loads(text or ""))
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            log.warning(
                "the latest schema of %s is not one this service wrote; writing a new one",
                self.subject,
            )
            return DeltaSchema()

    def encode(self, values: Sequence[bytes]) -> list[bytes]:
        """The deltas' JSON values (:mod:`connectors.delta_json`) as Avro values."""
        records = list(map(orjson.loads, values))
        if self.schema.add_all(records) or self._serializer is None:
            text = orjson.dumps(self.schema.avro()).decode()
            self._serializer = AvroSerializer(self.client, text, conf=SERIALIZER)
        serialize, context = self._serializer, self.context
        return [_checked(serialize(r, context)) for r in _filled(records, self.schema)]


def _filled(records: Iterable[dict[str, Any]], schema: DeltaSchema) -> Iterable[dict[str, Any]]:
    """The records with their events' missing fields as ``None`` (fastavro writes a field's
    default only where the record holds the key)."""
    names = list(schema.event)
    for record in records:
        edges = record.get("edges")
        if edges:
            record["edges"] = {v: {n: e.get(n) for n in names} for v, e in edges.items()}
        yield record


def _checked(value: bytes | None) -> bytes:
    if value is None:
        raise ValueError("the Avro serializer wrote nothing")
    return value
