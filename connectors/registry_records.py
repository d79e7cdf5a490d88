"""Kafka records in Avro, Protobuf or JSON Schema, made the JSON records the rest reads.

Teams that run Kafka keep their streams' schemas in a Confluent-compatible schema registry:
each record's value starts with a magic byte and the id of its writer's schema. A topic whose
format (``SGM_INPUT_FORMAT``, per topic ``SGM_TOPIC_FORMATS``) is ``avro``, ``protobuf`` or
``jsonschema`` is decoded here by ``confluent_kafka.schema_registry``'s deserializers (fastavro
underneath for Avro), each record with its writer's schema, so a new version of the schema in
the middle of a stream is read as it was written. The decoded object is then **mapped**
(:class:`FieldMap`, ``SGM_FIELD_MAP``): ``op``, ``relation``, ``id``, ``src``, ``dst``, ``ts``
and event fields are taken from where the map says (dotted paths reach nested records; a name
the map does not give is the field of the same name), other top-level scalars stay fields of
the same name, Avro's logical types become what the JSON records hold (a timestamp or a date:
milliseconds since the epoch; a decimal: a number). The mapped record is written as the JSON
the Kafka source reads (``orjson``, one C call per record), so that one decoder,
:mod:`connectors.json_batch`, decides what every record means, whatever its format.

The library decodes one record per call: that call, and the map, are the Python work per record
here (``bench.kafka`` measures what it costs beside JSON). A record that cannot be read becomes
a dead letter with its reason (:class:`Failure`): an unknown schema id, a value that does not
decode, a field the map names or the queries compare that is not in it. A registry that cannot
be reached is not the record's fault: :class:`RegistryUnavailable` is raised, the poll given
back, and the service retries while not ready (:mod:`monitor.service.serve`).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from connectors.arrow_records import DecodedRecords
from connectors.event_batch import Identities
from connectors.events import FieldTypes

#: The input formats: ``json`` (no registry) and the three a schema registry frames.
INPUT_FORMATS = ("json", "avro", "protobuf", "jsonschema")
#: The names a mapping may give: what a JSON record names them (event fields are any others).
RECORD_MEMBERS = ("op", "relation", "id", "key", "src", "dst", "ts")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class RegistryUnavailable(RuntimeError):
    """The schema registry did not answer (connection refused, time-out, a 5xx): the records
    are not at fault and are read again once it answers."""


@dataclass(frozen=True)
class Failure:
    """Why a record is a dead letter: ``category`` (a metric label) and the full reason."""

    category: str
    reason: str


@dataclass(frozen=True)
class FieldMap:
    """Where each name of a record is found in a decoded object: a dotted path per name."""

    paths: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: Mapping[str, str]) -> FieldMap:
        """``{"src": "from_account", "amount": "payment.amount"}`` (``SGM_FIELD_MAP``);
        :class:`ValueError` for an empty name or path."""
        paths: dict[str, tuple[str, ...]] = {}
        for name, path in spec.items():
            parts = tuple(path.split("."))
            if not name or not all(parts):
                raise ValueError(
                    f"field map entry {name}={path}: a name and a dotted path are needed, "
                    "like src=from_account or amount=payment.amount"
                )
            paths[name] = parts
        return cls(paths)

    def apply(self, decoded: Mapping[str, Any]) -> dict[str, Any] | str:
        """The record the JSON decoder reads, or why it cannot be made (a mapped path that is
        not in ``decoded``)."""
        # (the common case first, a C-level comprehension: every value a plain scalar)
        out = {k: v for k, v in decoded.items() if type(v) in _SCALARS}
        if len(out) != len(decoded):
            for name, item in decoded.items():
                if item is None or type(item) in _SCALARS:
                    continue
                if isinstance(item, (Mapping, list, tuple, bytes)):
                    continue  # (nested: reached by a dotted path in the map, never implied)
                out[name] = plain(item)
        if not self.paths:
            return out
        mapped: dict[str, Any] = {}
        for name, path in self.paths.items():
            value: Any = decoded
            for part in path:
                if not isinstance(value, Mapping) or part not in value:
                    return f"field {'.'.join(path)!r} (mapped to {name!r}) is not in the record"
                value = value[part]
            mapped[name] = value
        for path in self.paths.values():
            out.pop(path[0], None)  # (moved: not also a field of its own name)
        for name, value in mapped.items():
            if value is None:
                out.pop(name, None)
            else:
                out[name] = value if type(value) in _SCALARS else plain(value)
        return out


_SCALARS = frozenset({str, int, float, bool})


def plain(value: Any) -> Any:
    """A decoded scalar as a JSON record holds it: times as milliseconds since the epoch,
    decimals as numbers, enums (a Protobuf enum's name) as text."""
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        delta = moment - _EPOCH
        ms = (delta.days * 86_400_000) + delta.seconds * 1000 + delta.microseconds / 1000
        return int(ms) if ms == int(ms) else ms
    if isinstance(value, dt.date):
        return (value - _EPOCH.date()).days * 86_400_000
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


Decode = Callable[[bytes], Any]
"""A format's decoder of one framed value: the object, or an exception."""


class ColumnDecoder(Protocol):
    """A format's decoder of a whole poll into columns (:mod:`connectors.avro_columns`): the
    records decoded as the per-record path decodes them, or None when it does not take them."""

    def decode(
        self,
        values: Sequence[bytes],
        defaults: str | Sequence[str],
        identities: Identities,
        events: FieldTypes | None,
        arities: dict[str, int],
        max_bytes: int,
    ) -> DecodedRecords | None: ...


@dataclass
class Translated:
    """A poll's values as JSON records, and the rows that could not be made one."""

    values: list[bytes]
    failures: dict[int, Failure]


class RecordFormats:
    """The format of each topic and how to read it (``formats``; ``default`` for the others).

    ``decoders`` gives each registry format's decoder of one value (see
    :mod:`connectors.registry_decoders`), ``columns`` a format's decoder of a whole poll into
    columns, tried first (:meth:`decode_columns`); ``compared`` the fields the queries compare
    per relation: a record of a registry format without one of them is a dead letter, since
    its schema no longer has it.
    """

    def __init__(
        self,
        default: str,
        formats: Mapping[str, str],
        decoders: Mapping[str, Decode],
        field_map: FieldMap,
        compared: Mapping[str, frozenset[str]] | None = None,
        columns: Mapping[str, ColumnDecoder] | None = None,
    ) -> None:
        for name in [default, *formats.values()]:
            if name not in INPUT_FORMATS:
                raise ValueError(f"input format {name!r}: one of {', '.join(INPUT_FORMATS)}")
        self.default = default
        self.formats = dict(formats)
        self.decoders = dict(decoders)
        self.field_map = field_map
        self.compared = dict(compared or {})
        self.columns = dict(columns or {})

    def format_of(self, topic: str) -> str:
        return self.formats.get(topic, self.default)

    @property
    def registry_formats(self) -> set[str]:
        return {f for f in [self.default, *self.formats.values()] if f != "json"}

    def decode_columns(
        self,
        topics: Sequence[str],
        values: Sequence[bytes],
        defaults: str | Sequence[str],
        identities: Identities,
        events: FieldTypes | None,
        arities: dict[str, int],
        max_bytes: int,
    ) -> DecodedRecords | None:
        """A poll whose topics are all of one format with a column decoder, decoded by it;
        None when there is none or it does not take the poll (then :meth:`translate`)."""
        formats = {self.format_of(topic) for topic in set(topics)}
        decoder = self.columns.get(formats.pop()) if len(formats) == 1 else None
        if decoder is None:
            return None
        return decoder.decode(values, defaults, identities, events, arities, max_bytes)

    def translate(
        self,
        topics: Sequence[str],
        values: Sequence[bytes],
        relation_of: Mapping[str, str],
        tombstone: bytes | None = None,
    ) -> Translated:
        """``values`` (of records of ``topics``) as JSON records; a value of a ``json`` topic,
        and a table's tombstone (a value that was none, made the JSON beginning with
        ``tombstone``), are kept as they are. :class:`RegistryUnavailable` when the registry
        does not answer."""
        out = list(values)
        failures: dict[int, Failure] = {}
        by_format: dict[str, list[int]] = {}
        for row, topic in enumerate(topics):
            name = self.formats.get(topic, self.default)
            if name != "json" and not (tombstone and values[row].startswith(tombstone)):
                by_format.setdefault(name, []).append(row)
        for name, rows in by_format.items():
            decode = self.decoders[name]
            decoded = list(map(_guarded(decode), (values[row] for row in rows)))
            for row, item in zip(rows, decoded, strict=True):
                if isinstance(item, Failure):
                    failures[row] = item
                    out[row] = b""
                    continue
                record = self._record(item, relation_of[topics[row]])
                if isinstance(record, Failure):
                    failures[row] = record
                    out[row] = b""
                else:
                    out[row] = orjson.dumps(record)
        return Translated(out, failures)

    def _record(self, decoded: Any, default_relation: str) -> dict[str, Any] | Failure:
        if not isinstance(decoded, Mapping):
            return Failure("undecodable", f"decoded to {type(decoded).__name__}, not a record")
        record = self.field_map.apply(decoded)
        if isinstance(record, str):
            return Failure("missing_field", record)
        relation = record.get("relation", default_relation)
        wanted = self.compared.get(relation) if isinstance(relation, str) else None
        if wanted and record.get("op") != "delete":  # (a delete names its event by id alone)
            missing = sorted(wanted.difference(record))
            if missing:
                return Failure(
                    "missing_field",
                    f"field {missing[0]!r} of {relation}, which the queries compare, is not in "
                    "the record (its schema has no such field)",
                )
        return record


def _guarded(decode: Decode) -> Callable[[bytes], Any]:
    """``decode`` giving a :class:`Failure` for a value it cannot read (the exceptions that
    mean the registry is down pass through)."""

    def guarded(value: bytes) -> Any:
        try:
            return decode(value)
        except RegistryUnavailable:
            raise
        except UnknownSchema as error:
            return Failure("unknown_schema", str(error))
        except Exception as error:  # (the library's errors vary by format)
            return Failure("undecodable", f"does not decode: {error}")

    return guarded


class UnknownSchema(LookupError):
    """A value framed with a schema id the registry does not know."""
