"""How many bytes each record of an Avro block takes, computed back from its decoded columns.

:mod:`connectors.avro_columns` reads a poll's values as one Avro block, one record after another.
A reader of a block only knows where a record ends by decoding it, so a value with a byte too many
or too few would shift every record after it, and in a schema of longs the shifted bytes may
still decode: polars then returns the right number of records with wrong values (seen: two
records of two longs, the first with a trailing byte, read back as ``(1, 2), (3, 3)``). The
library's deserializer reads each value alone and never mixes two. So the column path proves the
cut: it computes each record's binary length from the values it decoded (the Avro encoding is
fixed by the values: a zig-zag varint per int and long, 4 or 8 bytes per float and double, a
length and the bytes per string, a branch index per union, ...) and compares it with the length
of the value it came from. Equal for every record, the block was read at the values'
boundaries; any difference (a bad value, or a writer that pads its varints) sends the poll to
the library.

Arrays and maps are written in blocks whose sizes the writer chooses, so their length does not
follow from their values: a schema with one is not read as columns (:func:`measurable`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

I64 = npt.NDArray[np.int64]
_FIXED_SIZES = {"null": 0, "boolean": 1, "float": 4, "double": 8}
_VARINT_STEPS = np.array([1 << (7 * k) for k in range(1, 10)], np.uint64)


def measurable(schema: Any) -> bool:
    """Whether a record's length follows from its values (an expanded schema's JSON: no
    arrays, no maps, unions only of one type with null)."""
    if isinstance(schema, str):
        return True
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return len(branches) <= 1 and len(schema) <= 2 and all(map(measurable, branches))
    kind = schema.get("type")
    if kind == "record":
        return all(measurable(f["type"]) for f in schema["fields"])
    if kind in ("array", "map"):
        return False
    return isinstance(kind, str) and (kind in ("enum", "fixed") or measurable(kind))


def record_lengths(schema: Mapping[str, Any], table: pa.Table) -> I64:
    """The binary length of each row of ``table`` (a record schema's fields as its columns,
    as polars reads them)."""
    total = np.zeros(table.num_rows, np.int64)
    for field in schema["fields"]:
        column = table.column(field["name"]).combine_chunks()
        total += _lengths(field["type"], column)
    return total


def _lengths(schema: Any, column: pa.Array) -> I64:
    n = len(column)
    if isinstance(schema, list):  # [null, T] or [T, null]: the branch's index, then T
        branch = next((b for b in schema if b != "null"), "null")
        present = column.is_valid().to_numpy(zero_copy_only=False)
        inner = _lengths(branch, column) if branch != "null" else np.zeros(n, np.int64)
        return 1 + np.where(present, inner, 0)
    if isinstance(schema, str):
        schema = {"type": schema}
    kind, logical = schema["type"], schema.get("logicalType")
    if isinstance(kind, (dict, list)):
        return _lengths(kind, column)
    if kind in _FIXED_SIZES:
        return np.full(n, _FIXED_SIZES[kind], np.int64)
    if kind == "fixed":
        return np.full(n, int(schema["size"]), np.int64)
    if kind in ("int", "long"):
        return _varint_lengths(_integers(column, logical))
    if kind in ("string", "bytes"):
        if logical == "decimal":
            size = _decimal_sizes(column)
        else:
            size = pc.fill_null(pc.binary_length(column), 0).to_numpy(zero_copy_only=False)
        size = size.astype(np.int64)
        return _varint_lengths(size) + size
    if kind == "enum":
        text = column.cast(pa.string()) if pa.types.is_dictionary(column.type) else column
        index = pc.index_in(text, value_set=pa.array(schema["symbols"], pa.string()))
        return _varint_lengths(pc.fill_null(index, 0).to_numpy(zero_copy_only=False))
    if kind == "record":
        total = np.zeros(n, np.int64)
        for field in schema["fields"]:
            total += _lengths(field["type"], pc.struct_field(column, field["name"]))
        return total
    raise ValueError(f"no length for Avro type {kind!r}")


def _integers(column: pa.Array, logical: str | None) -> I64:
    """The longs as written: a date's days, a timestamp's count in its unit."""
    if pa.types.is_date32(column.type):
        column = column.cast(pa.int32())
    elif pa.types.is_timestamp(column.type) or pa.types.is_time(column.type):
        column = column.cast(pa.int64())
    values: I64 = pc.fill_null(column.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    return values


def _varint_lengths(values: npt.NDArray[Any]) -> I64:
    """Bytes of each value as Avro's zig-zag varint."""
    signed = values.astype(np.int64)
    zigzag = ((signed << 1) ^ (signed >> 63)).view(np.uint64)
    lengths: I64 = np.searchsorted(_VARINT_STEPS, zigzag, side="right").astype(np.int64) + 1
    return lengths


def _decimal_sizes(column: pa.Array) -> I64:
    """Bytes of each decimal's unscaled value as the smallest two's complement (as writers
    write it)."""
    digits = pc.replace_substring(pc.fill_null(column, 0).cast(pa.string()), ".", "")
    unscaled = digits.cast(pa.int64()).to_numpy(zero_copy_only=False)
    magnitude = np.where(unscaled < 0, ~unscaled, unscaled).astype(np.uint64)
    bits = np.zeros(magnitude.shape[0], np.int64)
    nonzero = magnitude > 0
    bits[nonzero] = np.floor(np.log2(magnitude[nonzero].astype(np.float64))).astype(np.int64) + 1
    sizes: I64 = bits // 8 + 1
    return sizes
