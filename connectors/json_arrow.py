"""JSON Lines decoded a batch at a time into an Arrow table: the fast path of every batch.

:func:`decode_lines` reads a batch into typed columns with no Python object per record or per
value, first with the compiled scanner of flat records (:mod:`connectors.json_scan`, about
250 ns a record), and where it declines (an escape, a nested value, a number it cannot read
exactly, a column of mixed kinds) with ``pyarrow.json`` (C++, about 700 ns). It then checks the
columns, a column at a time, against every rule the per-record decoders apply
(:func:`~connectors.formats.parse_json_record`, :func:`~connectors.events.decode_event`): ops,
relation names, ids, the kinds of event fields, string lengths, times. When every record
passes, the batch is decoded here, exactly as the per-record decoders would decode it record by
record; when one does not (a bad record, a tuple of another arity, a column whose type changes,
an explicit ``null`` in a key that has a meaning, anything this module does not take), it
returns None and the caller decodes the batch the slower way (:mod:`connectors.json_batch`),
which writes the dead letters. So the fast path decides nothing a record could dispute.

What Arrow reads differently from ``orjson``, and how each is kept out:

- invalid UTF-8 inside a string, which Arrow passes on: the text is checked first;
- a key given twice, a number beyond double, a lone surrogate escape, a control
  character in a string, text after the object: Arrow refuses the batch (so does ``orjson``
  the record), and the slow path runs; ``NaN``, ``Infinity`` (found in the double columns)
  and a byte-order mark, which Arrow takes and ``orjson`` refuses, send a batch that holds
  them to the slow path, and so does a -0.0 (Arrow reads the integer ``-0`` as one where a
  column holds fractions too);
- a missing key and an explicit ``null`` are both a null: a null in ``op``, ``relation``,
  ``id``, ``src`` or ``dst`` is read as missing only when the text holds no such key followed
  by ``null`` (and no ``\\u`` escape, which could spell the key);
- integers and fractions in one column become doubles: a field is a number either way, an id
  column of doubles is refused;
- strings that look like times become timestamp columns: the batch is read again with those
  columns as strings, and the field types remember them (:attr:`FieldTypes.text_columns`) so
  the next batch reads them as strings at once;
- a record's key order (which fixes the order new fields are learned in) is not in a table:
  where two new fields first appear in the same record, that one record is parsed again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from connectors.arrow_records import DecodedRecords, Refused, TableDecoder
from connectors.event_batch import Identities
from connectors.events import FieldTypes
from connectors.json_scan import read_table

_MIN_BLOCK = 1 << 20


def decode_lines(
    text: bytes,
    defaults: str | Sequence[str],
    identities: Identities,
    events: FieldTypes | None,
    arities: dict[str, int],
    rows: int | None = None,
    *,
    scan: bool = True,
) -> tuple[DecodedRecords, npt.NDArray[np.intp], int] | None:
    """The records of ``text`` (lines each holding one JSON object that starts the line; empty
    lines are not records) decoded as the per-record decoders decode them, the line (from 0)
    of each, and how many lines the text has; None when a record is not valid or not plain
    enough for this path, or when ``rows`` is given and is not the number of lines and of
    records.

    The compiled scanner (:mod:`connectors.json_scan`) reads the text where it can
    (``scan``), pyarrow's reader where it cannot.

    ``defaults`` is the relation of records that name none (a sequence: per record).
    ``identities`` is given line numbers. On success ``events`` and ``arities`` learn what the
    records teach (new fields' kinds, relations' arities); on None nothing is learned."""
    if b"\r" in text or not _utf8(text):
        return None
    starts, ends, lines = _record_lines(text)
    if lines is None or not lines.shape[0]:
        return None
    if rows is not None and not rows == starts.shape[0] == lines.shape[0]:
        return None  # a record per line, and no line empty
    table = read_table(text, starts[lines], ends[lines]) if scan else None
    if table is None:
        table = _read(text, events)
    if table is None or table.num_rows != lines.shape[0]:
        return None  # (so every record line is one object: Arrow reads two on a line as two)
    try:
        decoder = TableDecoder(table, text, starts[lines], lines, defaults, identities, events)
        return decoder.decode(arities), lines, int(starts.shape[0])
    except Refused:
        return None


def _record_lines(
    text: bytes,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.intp] | None]:
    """Where each line of ``text`` starts and ends, and which lines are records (None when a
    line is neither empty nor starts with ``{``: a comment, a blank line of spaces, a stray
    value)."""
    data = np.frombuffer(text, np.uint8)
    breaks = np.flatnonzero(data == 10)
    end = len(text)
    if text.endswith(b"\n"):
        breaks, end = breaks[:-1], end - 1
    starts = np.concatenate([np.zeros(1, np.intp), breaks + 1])
    ends = np.append(breaks, end)
    full = starts < ends
    if not (data[starts[full]] == ord("{")).all():
        return starts, ends, None
    return starts, ends, np.flatnonzero(full)


def _utf8(text: bytes) -> bool:
    """Whether ``text`` is valid UTF-8 (Arrow does not check the bytes inside strings) and
    holds no byte-order mark (Arrow skips one, ``orjson`` refuses it)."""
    if text.isascii():
        return True
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\xef\xbb\xbf" not in text


def _read(text: bytes, events: FieldTypes | None) -> pa.Table | None:
    """The table of ``text``; None where Arrow refuses it. Columns Arrow would read as times
    are read as strings (and remembered in ``events``)."""
    hinted = set() if events is None else events.text_columns
    table = _parse(text, hinted)
    if table is None:
        if hinted:
            hinted.clear()  # the hint may be what failed; the next batch infers again
        return None
    if not _finite(table, text):
        return None
    timelike = {
        name
        for name, kind in zip(table.column_names, table.schema.types, strict=True)
        if pa.types.is_temporal(kind)
    }
    if not timelike:
        return table
    hinted |= timelike
    return _parse(text, hinted)


def _finite(table: pa.Table, text: bytes) -> bool:
    """Whether the table holds no ``NaN`` or ``Infinity`` (literals Arrow reads and ``orjson``
    refuses; a number beyond a double Arrow refuses itself) and no -0.0 (which Arrow also
    makes of the integer ``-0`` in a column of doubles, where ``orjson`` reads 0)."""
    for column, kind in zip(table.columns, table.schema.types, strict=True):
        if kind == pa.float64():
            if column.null_count < len(column) and not pc.all(pc.is_finite(column)).as_py():
                return False
            values = column.to_numpy(zero_copy_only=False)
            if np.signbit(values[values == 0]).any():
                return False
        elif pa.types.is_nested(kind) and (b"NaN" in text or b"Infinity" in text):
            return False
    return True


def _parse(text: bytes, strings: set[str]) -> pa.Table | None:
    options = pj.ReadOptions(use_threads=False, block_size=max(len(text) + 1, _MIN_BLOCK))
    schema = pa.schema([(name, pa.string()) for name in sorted(strings)]) if strings else None
    try:
        return pj.read_json(
            pa.BufferReader(text),
            read_options=options,
            parse_options=pj.ParseOptions(explicit_schema=schema),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
