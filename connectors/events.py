"""Event records: JSON records of an event relation, with an identity and typed fields.

    {"op": "insert", "relation": "transfer", "src": "A", "dst": "B", "id": "tx-91",
     "amount": 1500.0, "channel": "wire"}
    {"op": "delete", "relation": "transfer", "id": "tx-91"}

Every key but ``op``, ``relation``, ``id``, ``src`` and ``dst`` is a field; ``ts`` is the
event's time, milliseconds or an ISO-8601 string with an offset, stored as milliseconds
(:mod:`core.times`). Field values are
numbers, strings (at most :data:`MAX_FIELD_LENGTH` characters) or booleans; ``null`` means the
field is absent. A field has one type per relation (:class:`FieldTypes`): the type the queries
compare it with, else the first value seen; a value of another type makes the record a bad
record (a dead letter), so the index never holds a mismatch. Without ``id``, an inserted
event's identity is its source position (``file:line``, ``topic:partition@offset``), so a
replayed record is the same event. A delete names the event by ``id``; a delete without one
reaches the index with no identity and is counted there (``delete_without_id``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from connectors.formats import _json_id, _json_kind, is_comment
from core.errors import InputError
from core.fields import kind_of, to_column
from core.records import EventUpdates, VertexId, id_column
from core.times import TIME_FIELD, parse_time

#: The longest string field value accepted, in characters.
MAX_FIELD_LENGTH = 4096
#: Keys of an event record that are not fields.
RESERVED = frozenset(("op", "relation", "id", "src", "dst"))
#: Keys of a table's record that are not attributes.
TABLE_RESERVED = RESERVED | {"key", TIME_FIELD}


@dataclass
class FieldTypes:
    """One type per field and event relation: given by the queries, else the first seen."""

    types: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Columns the batch decoder reads as text at once: Arrow took their strings for times
    #: before (:mod:`connectors.json_arrow`). A hint, never a type.
    text_columns: set[str] = field(default_factory=set)
    #: The relations that are tables of vertex attributes: a record names its vertex by
    #: ``key`` (its id, source and destination), has no time, and the latest per key wins.
    tables: set[str] = field(default_factory=set)
    #: Per relation, the fields besides ``ts`` that hold times (read as ``ts`` is).
    times: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        relations: Mapping[str, Mapping[str, str]],
        tables: Collection[str] = (),
        times: Mapping[str, Collection[str]] | None = None,
    ) -> FieldTypes:
        return cls(
            {r: dict(f) for r, f in relations.items()},
            tables=set(tables),
            times={r: set(f) for r, f in (times or {}).items()},
        )

    def is_time(self, relation: str, name: str) -> bool:
        """Whether field ``name`` of ``relation`` holds times (``ts``, or one compared with
        a ``ts``)."""
        return name == TIME_FIELD or name in self.times.get(relation, ())

    @property
    def relations(self) -> set[str]:
        return set(self.types)

    def check(self, relation: str, name: str, value: Any) -> None:
        """Raise :class:`InputError` when ``value`` does not fit field ``name``."""
        kind = kind_of(value)
        if kind is None:
            raise InputError(
                f"field {name!r} must be a number, a string or a boolean, got {_json_kind(value)}"
            )
        if kind == "string" and len(value) > MAX_FIELD_LENGTH:
            raise InputError(
                f"field {name!r} holds {len(value):,} characters; at most {MAX_FIELD_LENGTH}"
            )
        known = self.types.setdefault(relation, {}).setdefault(name, kind)
        if known != kind:
            raise InputError(
                f"field {name!r} of relation {relation!r} is a {known}, got {_json_kind(value)}"
            )


@dataclass(frozen=True)
class EventRecord:
    """One decoded event record: ``event_id`` None for a delete without an id."""

    relation: str
    event_id: VertexId | None
    diff: int
    src: VertexId
    dst: VertexId
    fields: dict[str, object]


def decode_event(
    record: dict[str, Any], relation: str, diff: int, position: str, types: FieldTypes
) -> EventRecord:
    """The event in a JSON object already known to be a record of event relation ``relation``."""
    if relation in types.tables:
        return _table_record(record, relation, diff, types)
    event_id = _json_id(record["id"], "id") if "id" in record else None
    if diff < 0:
        return EventRecord(relation, event_id, -1, 0, 0, {})
    missing = [k for k in ("src", "dst") if k not in record]
    if missing:
        raise InputError(
            f"an inserted event needs 'src' and 'dst'; missing {' and '.join(map(repr, missing))}"
        )
    src, dst = _json_id(record["src"], "src"), _json_id(record["dst"], "dst")
    fields = _fields(record, relation, types, RESERVED)
    return EventRecord(relation, position if event_id is None else event_id, 1, src, dst, fields)


def _table_record(
    record: dict[str, Any], relation: str, diff: int, types: FieldTypes
) -> EventRecord:
    """A record of table ``relation``: the attributes of vertex ``key`` (its id, source and
    destination), without a time (a ``ts`` is ignored: a table never expires)."""
    if "key" not in record:
        raise InputError(f"a record of table {relation!r} needs 'key', the vertex it describes")
    key = _json_id(record["key"], "key")
    if diff < 0:
        return EventRecord(relation, key, -1, key, key, {})
    return EventRecord(relation, key, 1, key, key, _fields(record, relation, types, TABLE_RESERVED))


def _fields(
    record: dict[str, Any], relation: str, types: FieldTypes, reserved: frozenset[str]
) -> dict[str, object]:
    """The fields of an inserted record: every key but ``reserved`` and the nulls, times
    parsed, each checked against (or fixing) its type."""
    fields: dict[str, object] = {}
    for name, value in record.items():
        if name in reserved or value is None:
            continue
        if types.is_time(relation, name):
            value = parse_time(value, name)
        types.check(relation, name, value)
        fields[name] = value
    return fields


def parse_json_event(
    raw: bytes, default_relation: str, events: FieldTypes, position: str
) -> EventRecord | None:
    """The event of a JSON Lines line of an event relation; None for any other line (which the
    tuple decoder then reads, reporting what is wrong with it)."""
    if is_comment(raw):
        return None
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(record) is not dict:
        return None
    relation = record.get("relation", default_relation)
    if type(relation) is not str or relation not in events.relations:
        return None
    op = record.get("op", "insert")
    if op not in ("insert", "delete"):
        return None
    return decode_event(record, relation, 1 if op == "insert" else -1, position, events)


def event_updates(
    records: list[tuple[int, EventRecord]],
    seq_of_line: npt.NDArray[np.int64],
    kinds: Mapping[str, str],
) -> EventUpdates:
    """The event updates of decoded ``records`` (with their line index in a block), numbered
    by ``seq_of_line``; one column per field, of the field's kind."""
    events = [e for _, e in records]
    names = dict.fromkeys(name for e in events for name in e.fields)
    ids = np.empty(len(events), dtype=object)
    ids[:] = [e.event_id for e in events]
    return EventUpdates(
        ids,
        np.array([e.diff for e in events], np.int8),
        seq_of_line[[i for i, _ in records]],
        id_column([e.src for e in events]),
        id_column([e.dst for e in events]),
        {name: to_column(kinds[name], [e.fields.get(name) for e in events]) for name in names},
    )
