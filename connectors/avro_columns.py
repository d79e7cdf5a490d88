"""Avro records decoded a whole poll at a time into Arrow columns: the fast path of Avro input.

The library's ``AvroDeserializer`` reads one value per call, about 15 µs each, five times what a
JSON record costs. But a poll's values written with one schema are the records of one Avro
*block*: each value is the magic byte, the 4-byte schema id, then the record's binary encoding,
and a block is those encodings one after another. So the framing is cut off every value at once
(a numpy mask over the joined values), the block is put after a container header of the writer's
schema (written by fastavro, once per schema id), and polars' Avro reader (Rust) reads the
whole block into columns, about 1 µs a record. Each record's binary length, computed back from
its values, must then be its value's (:mod:`connectors.avro_lengths`): a value with a byte too
many or too few would otherwise shift the records after it. The columns are mapped as
:class:`~connectors.registry_records.FieldMap` maps a record (dotted paths, logical types:
times and dates as milliseconds, decimals as numbers) and the table goes through the same checks
as a JSON batch (:class:`~connectors.arrow_records.TableDecoder`), so a record means the same
on either path.

This path decides nothing a record could dispute. A poll it does not take, whole, is decoded by
the library record by record (:meth:`RecordFormats.translate
<connectors.registry_records.RecordFormats.translate>`), which writes the dead letters: values
with several schema ids (a new version mid-stream), a value not framed, a tombstone, a schema
with references, arrays or maps, or one polars does not read (unions other than with null), a
record whose length is not its value's, a mapped path through a null or to a nested value, a
field the queries compare that is null or not in the schema, or anything the table checks
refuse. (NaN and infinity, which no JSON number holds, are nulls, as the per-record path writes
them.)
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from fastavro.io.binary_encoder import BinaryEncoder
from fastavro.schema import expand_schema

from connectors.arrow_records import DecodedRecords, Refused, TableDecoder, column_of
from connectors.avro_lengths import measurable, record_lengths
from connectors.event_batch import Identities
from connectors.events import FieldTypes
from connectors.registry_records import FieldMap

log = logging.getLogger(__name__)

#: The container's sync marker: any 16 bytes (the block is read straight after the header).
SYNC = b"subgraph-monitor"
#: Digits a decimal may have and still be a double exactly as the per-record path makes it.
MAX_DECIMAL_DIGITS = 15
_FRAME = np.arange(5)


@dataclass(frozen=True)
class WriterSchema:
    """A writer's schema as this path reads it: the container header that declares it, and
    the schema with its named types written out (to measure each record: see
    :mod:`connectors.avro_lengths`)."""

    header: bytes
    expanded: dict[str, Any]


class AvroColumns:
    """Polls of Avro values decoded as columns; ``schema_of(id)`` gives a writer's schema text
    (the registry client's cached lookup), ``compared`` the fields the queries compare per
    relation."""

    def __init__(
        self,
        schema_of: Callable[[int], str | None],
        field_map: FieldMap,
        compared: Mapping[str, frozenset[str]],
    ) -> None:
        self.schema_of = schema_of
        self.field_map = field_map
        self.compared = compared
        self.writers: dict[int, WriterSchema | None] = {}

    def decode(
        self,
        values: Sequence[bytes],
        defaults: str | Sequence[str],
        identities: Identities,
        events: FieldTypes | None,
        arities: dict[str, int],
        max_bytes: int,
    ) -> DecodedRecords | None:
        """``values`` decoded as the per-record path would decode them, or None when this path
        does not take them (nothing learned then)."""
        table = self.table(values, max_bytes)
        if table is None:
            return None
        try:
            mapped, order = self._mapped(table)
            self._check_compared(mapped, defaults)
            rows = np.arange(len(values), dtype=np.intp)
            decoder = _AvroTable(mapped, order, rows, defaults, identities, events)
            return decoder.decode(arities)
        except Refused:
            return None

    def table(self, values: Sequence[bytes], max_bytes: int) -> pa.Table | None:
        """The records of ``values`` as read with their one writer's schema; None when they are
        not all framed with one schema id this path reads."""
        n = len(values)
        if not n:
            return None
        lengths = np.fromiter(map(len, values), np.int64, n)
        if int(lengths.min()) < 5 or int(lengths.max()) > max_bytes:
            return None
        joined = b"".join(values)
        data = np.frombuffer(joined, np.uint8)
        starts = np.zeros(n, np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        frames = data[starts[:, None] + _FRAME]
        if frames[:, 0].any() or not (frames[:, 1:] == frames[0, 1:]).all():
            return None  # (not framed, or several schema ids: the library reads each)
        writer = self._writer(int.from_bytes(frames[0, 1:].tobytes(), "big"))
        if writer is None:
            return None
        keep = np.ones(data.shape[0], np.bool_)
        keep[(starts[:, None] + _FRAME).ravel()] = False
        block = data[keep].tobytes()
        import polars as pl
        from polars.exceptions import PanicException

        try:
            container = writer.header + _block_start(n, len(block)) + block + SYNC
            frame = pl.read_avro(io.BytesIO(container))
        except (Exception, PanicException):  # (a value that does not decode: the library's)
            return None
        table = frame.to_arrow()
        if table.num_rows != n:
            return None
        try:  # (each record as long as its value: the block was read at the values' ends)
            measured = record_lengths(writer.expanded, table)
        except (ValueError, pa.ArrowException):
            return None
        return table if np.array_equal(measured, lengths - 5) else None

    def _writer(self, schema_id: int) -> WriterSchema | None:
        if schema_id in self.writers:
            return self.writers[schema_id]
        try:
            text = self.schema_of(schema_id)
        except Exception:  # (unknown, or the registry down: the library's path says which)
            return None
        writer = _writer_schema(text) if text is not None else None
        self.writers[schema_id] = writer
        how = "as columns" if writer is not None else "record by record (not as columns)"
        log.info("Avro schema %d is read %s", schema_id, how, extra={"schema_id": schema_id})
        return writer

    def _mapped(self, table: pa.Table) -> tuple[pa.Table, list[str]]:
        """The table with the names a JSON record would have, in the order
        :meth:`FieldMap.apply` gives them."""
        columns: dict[str, pa.Array] = {}
        later: dict[str, pa.Array] = {}
        for name in table.column_names:
            column = column_of(table, name)
            assert column is not None
            kind = _kind(column.type)
            if kind == "scalar":
                columns[name] = _scalar(column)
            elif kind == "logical":
                later[name] = _logical(column)
        columns.update(later)
        if not self.field_map.paths:
            return pa.table(columns), list(columns)
        moved: dict[str, pa.Array] = {}
        for name, path in self.field_map.paths.items():
            moved[name] = self._at(table, path)
        for path in self.field_map.paths.values():
            columns.pop(path[0], None)
        for name, column in moved.items():
            columns[name] = column
        return pa.table(columns), list(columns)

    def _at(self, table: pa.Table, path: tuple[str, ...]) -> pa.Array:
        """The column a dotted path reaches (every record must have it: else the per-record
        path's dead letters)."""
        if path[0] not in table.column_names:
            raise Refused
        column = column_of(table, path[0])
        assert column is not None  # (checked above)
        for part in path[1:]:
            if not pa.types.is_struct(column.type) or column.null_count:
                raise Refused  # (a path through a null: that record is a dead letter)
            if column.type.get_field_index(part) < 0:
                raise Refused
            column = pc.struct_field(column, part)
        kind = _kind(column.type)
        if kind == "scalar":
            return _scalar(column)
        if kind == "logical":
            return _logical(column)
        raise Refused  # (a nested value or bytes mapped: the per-record path says what)

    def _check_compared(self, table: pa.Table, defaults: str | Sequence[str]) -> None:
        """Refuse a batch where a record would lack a field the queries compare."""
        if not self.compared:
            return
        relations = set([defaults] if isinstance(defaults, str) else defaults)
        if "relation" in table.column_names:
            column = table.column("relation")
            relations |= {r for r in pc.unique(column).to_pylist() if isinstance(r, str)}
        wanted = {name for relation in relations for name in self.compared.get(relation, ())}
        if not wanted:
            return
        inserts = None  # (a delete names its event by id: it needs none of them)
        if "op" in table.column_names:
            inserts = pc.invert(pc.fill_null(pc.equal(table.column("op"), "delete"), False))
        for name in wanted:
            if name not in table.column_names:
                raise Refused
            column = table.column(name)
            if column.null_count and (
                inserts is None or pc.any(pc.and_(inserts, column.is_null())).as_py()
            ):
                raise Refused


class _AvroTable(TableDecoder):
    """The table checks with no text: a null is a missing value (an Avro record has no
    ``null`` spelled out to tell apart), and every record's keys are in one order."""

    def __init__(
        self,
        table: pa.Table,
        order: list[str],
        rows: npt.NDArray[np.intp],
        defaults: str | Sequence[str],
        identities: Identities,
        events: FieldTypes | None,
    ) -> None:
        self.keys = orjson.dumps(dict.fromkeys(order, 0))
        super().__init__(table, b"", rows, rows, defaults, identities, events)

    def _line(self, row: int) -> bytes:
        return self.keys


#: The logical types this path converts (as :func:`~connectors.registry_records.plain` does);
#: a schema with another (``uuid``, ``time-millis``, ...) is read record by record.
LOGICAL_TYPES = frozenset({"timestamp-millis", "timestamp-micros", "date", "decimal"})


def _writer_schema(text: str) -> WriterSchema | None:
    """The container header of a writer's schema, or None when this path does not read it."""
    import polars as pl
    from polars.exceptions import PanicException

    try:
        declared = json.loads(text)
        if not _logical_types(declared) <= LOGICAL_TYPES:
            return None
        # (no defaults, which polars' reader refuses, nor docs and aliases: not for reading)
        parsed = fastavro.parse_schema(_bare(declared))
        expanded = expand_schema(_bare(declared))
        # (measurable: no arrays or maps, no union but with null, which polars panics on)
        if not isinstance(expanded, dict) or not measurable(expanded):
            return None
        out = io.BytesIO()
        fastavro.writer(out, parsed, [], sync_marker=SYNC)
        header = out.getvalue()
        pl.read_avro(io.BytesIO(header))  # (a schema polars cannot read fails here)
    except (Exception, PanicException):  # (a panic is no Exception)
        return None
    return WriterSchema(header, expanded)


def _block_start(records: int, size: int) -> bytes:
    """What begins a container's block: its count of records and its size, as Avro longs."""
    out = io.BytesIO()
    encoder = BinaryEncoder(out)  # type: ignore[no-untyped-call]
    encoder.write_long(records)  # type: ignore[no-untyped-call]
    encoder.write_long(size)  # type: ignore[no-untyped-call]
    encoder.flush()  # type: ignore[no-untyped-call]
    return out.getvalue()


def _bare(schema: Any) -> Any:
    """A schema's JSON without ``default``, ``doc`` and ``aliases`` (what a reader of the
    writer's own schema never needs), however deep."""
    if isinstance(schema, list):
        return [_bare(item) for item in schema]
    if isinstance(schema, dict):
        return {k: _bare(v) for k, v in schema.items() if k not in _UNREAD}
    return schema


_UNREAD = frozenset({"default", "doc", "aliases"})


def _logical_types(schema: Any) -> set[str]:
    """Every ``logicalType`` a schema's JSON names, however deep."""
    if isinstance(schema, list):
        return set().union(*map(_logical_types, schema)) if schema else set()
    if not isinstance(schema, dict):
        return set()
    found = {schema["logicalType"]} if isinstance(schema.get("logicalType"), str) else set()
    for value in schema.values():
        if isinstance(value, (dict, list)):
            found |= _logical_types(value)
    return found


def _kind(kind: pa.DataType) -> str:
    """``scalar`` (a JSON record's string, number or boolean), ``logical`` (a time, a date, a
    decimal: made a number) or ``nested`` (a record, an array, bytes, null: the per-record path
    leaves them out of the record); :class:`Refused` for any other."""
    if (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_string_view(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or (pa.types.is_dictionary(kind) and _kind(kind.value_type) == "scalar")
    ):
        return "scalar"
    if pa.types.is_timestamp(kind) or pa.types.is_date32(kind) or pa.types.is_decimal(kind):
        return "logical"
    if (
        pa.types.is_struct(kind)
        or pa.types.is_list(kind)
        or pa.types.is_large_list(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
        or pa.types.is_null(kind)
    ):
        return "nested"
    raise Refused


def _scalar(column: pa.Array) -> pa.Array:
    """A scalar column as a JSON batch's table holds it."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        column = column.cast(kind.value_type)
        kind = column.type
    if pa.types.is_integer(kind):
        return column.cast(pa.int64())
    if pa.types.is_floating(kind):
        column = column.cast(pa.float64())
        values = column.to_numpy(zero_copy_only=False)
        finite = np.isfinite(values)
        if finite.all():
            return column
        # NaN and infinity are no JSON numbers: the per-record path writes them null
        valid = finite & column.is_valid().to_numpy(zero_copy_only=False)
        return pa.array(np.where(valid, values, 0.0), pa.float64(), mask=~valid)
    if pa.types.is_boolean(kind):
        return column
    return column.cast(pa.string())


def _logical(column: pa.Array) -> pa.Array:
    """A time, date or decimal column as the per-record path's numbers (:func:`plain
    <connectors.registry_records.plain>`): milliseconds since the epoch, a decimal's value."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        raw = column.cast(pa.int64()).to_numpy(zero_copy_only=False)
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        if kind.unit == "ms":
            return pa.array(raw.astype(np.float64), pa.float64(), mask=~valid)
        if kind.unit != "us":
            raise Refused
        # as plain() adds them: the whole milliseconds of days and seconds, then the
        # microseconds of the second divided by 1000 (one rounding, as Python's int + float)
        whole = (raw // 1_000_000) * 1000
        micro = raw % 1_000_000
        return pa.array(whole.astype(np.float64) + micro / 1000.0, pa.float64(), mask=~valid)
    if pa.types.is_date32(kind):
        days = column.cast(pa.int32()).cast(pa.int64())
        return pc.multiply(days, 86_400_000)
    if pa.types.is_decimal(kind) and kind.precision <= MAX_DECIMAL_DIGITS:
        # (through the digits: a double correctly rounded from the decimal, as float() makes)
        return column.cast(pa.string()).cast(pa.float64())
    raise Refused


def columnar_avro(
    client: Any, field_map: FieldMap, compared: Mapping[str, frozenset[str]]
) -> AvroColumns | None:
    """The fast path for a registry ``client`` (a ``SchemaRegistryClient``), or None when
    polars is not installed."""
    try:
        import polars  # noqa: F401
    except ImportError:
        return None

    def schema_of(schema_id: int) -> str | None:
        schema = client.get_schema(schema_id)
        if schema.schema_type not in (None, "AVRO") or schema.references:
            return None
        return str(schema.schema_str)

    return AvroColumns(schema_of, field_map, compared)
