"""An Arrow table of JSON records checked against the per-record decoders' rules, a column at
a time, and turned into the batch's updates and events (the fast path of
:mod:`connectors.json_arrow`, which reads the table).

Each rule of :func:`~connectors.formats.parse_json_record` and
:func:`~connectors.events.decode_event` is checked over whole columns: ops, relation names,
ids (integers, or strings of at most :data:`~connectors.formats.MAX_ID_LENGTH` characters),
the kind of every event field against the relation's (:class:`~connectors.events.FieldTypes`),
string lengths, times (numbers within 10,000 years of 1970, ISO-8601 texts through
:mod:`core.time_columns`). The first rule a record breaks raises :class:`Refused`, and the
caller decodes the batch the slow way; nothing is learned until every relation has passed.
The columns come out as the per-record decoders make them: ``int64`` ids where all are
integers, else ``object``; fields as :mod:`core.fields` holds them; events in order of their
relation's first record, fields in the order the per-record decoder meets them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from connectors.event_batch import Identities
from connectors.events import MAX_FIELD_LENGTH, RESERVED, TABLE_RESERVED, FieldTypes
from connectors.formats import MAX_ID_LENGTH, is_relation_name
from core.fields import absent_column
from core.records import EventUpdates, RelationUpdates, UpdateBatch
from core.time_columns import parse_time_texts
from core.times import parse_time

#: The keys whose null (missing) has a meaning of its own.
_KEYED = ("op", "relation", "id", "src", "dst")
_KEYED_NULL = re.compile(rb'"(?:op|relation|id|src|dst)"\s*:\s*null')
_TIME_LIMIT_MS = 10_000 * 365.25 * 86_400_000
_NUMBERS = (pa.int64(), pa.float64())


@dataclass
class DecodedRecords:
    """A batch of records decoded (on either path). ``kept[i]``: record ``i`` became an update
    or an event.

    ``parts`` and ``events`` are per relation in order of first appearance; their ``seq`` holds
    the *record row* of each update (callers renumber). ``errors``: the bad records' rows and
    messages, in row order.
    """

    kept: npt.NDArray[np.bool_]
    parts: dict[str, RelationUpdates] = field(default_factory=dict)
    events: dict[str, EventUpdates] = field(default_factory=dict)
    errors: list[tuple[int, str]] = field(default_factory=list)

    def seq_of_rows(self, first_seq: int) -> npt.NDArray[np.int64]:
        """Each record row's sequence number when the kept ones are numbered from
        ``first_seq`` in row order."""
        return np.cumsum(self.kept, dtype=np.int64) + (first_seq - 1)

    def batch(self, first_seq: int) -> UpdateBatch:
        """The updates and events as one batch, numbered from ``first_seq`` in row order."""
        seq = self.seq_of_rows(first_seq)
        parts = {
            name: RelationUpdates(part.columns, part.diff, seq[part.seq])
            for name, part in self.parts.items()
        }
        found = {name: replace(part, seq=seq[part.seq]) for name, part in self.events.items()}
        return UpdateBatch(parts, first_seq, int(self.kept.sum()), None, found)


class Refused(Exception):
    """The batch is not one the fast path decodes (the slow path will)."""


def _keyed_null(text: bytes) -> bool:
    """Whether ``text`` may hold an explicit ``null`` for a key with a meaning (a key spelled
    with escapes is not searched for: any escape counts as one)."""
    return b"null" in text and (b"\\u" in text or _KEYED_NULL.search(text) is not None)


def column_of(table: pa.Table, name: str) -> pa.Array | None:
    if name not in table.column_names:
        return None
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


class TableDecoder:
    """One table's checks and columns (raises :class:`Refused` at the first rule broken)."""

    def __init__(
        self,
        table: pa.Table,
        text: bytes,
        starts: npt.NDArray[np.intp],
        lines: npt.NDArray[np.intp],
        defaults: str | Sequence[str],
        identities: Identities,
        events: FieldTypes | None,
    ) -> None:
        self.table = table
        self.text = text
        self.starts = starts
        self.lines = lines
        self.n = table.num_rows
        self.identities = identities
        self.events = events
        if "tuple" in table.column_names:
            raise Refused
        self.columns = {name: column_of(table, name) for name in _KEYED}
        nulls = any(a is not None and a.null_count for a in self.columns.values())
        if nulls and _keyed_null(text):
            raise Refused  # an explicit null in a key with a meaning: the slow path says what
        self.diffs = self._diffs()
        self.names, self.codes = self._relations(defaults)

    def _diffs(self) -> npt.NDArray[np.int8]:
        op = self.columns["op"]
        if op is None or op.null_count == self.n:
            return np.ones(self.n, np.int8)
        if op.type != pa.string():
            raise Refused
        found = set(pc.unique(op).to_pylist()) - {None}
        if not found <= {"insert", "delete"}:
            raise Refused
        if "delete" not in found:
            return np.ones(self.n, np.int8)
        delete = pc.fill_null(pc.equal(op, "delete"), False).to_numpy(zero_copy_only=False)
        return np.where(delete, -1, 1).astype(np.int8)

    def _relations(self, defaults: str | Sequence[str]) -> tuple[list[str], npt.NDArray[np.intp]]:
        """The distinct relations, in order of first record, and each record's code."""
        column = self.columns["relation"]
        if column is not None and column.null_count < self.n:
            if column.type != pa.string():
                raise Refused
            encoded = column.dictionary_encode()
            named = encoded.dictionary.to_pylist()
            codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.intp)
        else:
            named, codes = [], np.full(self.n, -1, np.intp)
        missing = codes < 0
        if missing.any():
            if isinstance(defaults, str):
                named.append(defaults)
                codes[missing] = len(named) - 1
            else:
                given = [defaults[i] for i in np.flatnonzero(missing).tolist()]
                defaulted = list(dict.fromkeys(given))
                base = len(named)
                named += defaulted
                code_of = {name: base + k for k, name in enumerate(defaulted)}
                codes[missing] = np.fromiter(map(code_of.__getitem__, given), np.intp, len(given))
        if not all(is_relation_name(name) for name in named):
            raise Refused
        # One code per name (a record may name the default), numbered in order of first record.
        distinct: dict[str, int] = {}
        same = np.array([distinct.setdefault(name, len(distinct)) for name in named], np.intp)
        named = list(distinct)
        unique, first, inverse = np.unique(same[codes], return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(order.shape[0], np.intp)
        rank[order] = np.arange(order.shape[0])
        return [named[int(unique[k])] for k in order.tolist()], rank[inverse.reshape(-1)]

    # -- the whole batch ------------------------------------------------------------------

    def decode(self, arities: dict[str, int]) -> DecodedRecords:
        wanted = set() if self.events is None else self.events.relations
        is_event = [name in wanted for name in self.names]
        tuples = [name for name, event in zip(self.names, is_event, strict=True) if not event]
        if any(arities.get(name, 2) != 2 for name in tuples):
            raise Refused
        out = DecodedRecords(np.ones(self.n, np.bool_))
        rows_of = self._rows_by_relation()
        for code, name in enumerate(self.names):
            if not is_event[code]:
                out.parts[name] = self._tuples(rows_of[code])
        learned: dict[str, dict[str, str]] = {}
        for code, name in enumerate(self.names):
            if is_event[code]:
                out.events[name] = self._events(name, rows_of[code], learned)
        # Nothing is learned until every relation has passed.
        for name in tuples:
            arities.setdefault(name, 2)
        if self.events is not None:
            for relation, kinds in learned.items():
                known = self.events.types.setdefault(relation, {})
                for field, kind in kinds.items():
                    known.setdefault(field, kind)
        return out

    def _rows_by_relation(self) -> list[npt.NDArray[np.intp] | None]:
        """Each relation's record rows (None: every record)."""
        if len(self.names) == 1:
            return [None]
        order = np.argsort(self.codes, kind="stable")
        bounds = np.searchsorted(self.codes[order], np.arange(len(self.names) + 1))
        return [order[bounds[k] : bounds[k + 1]] for k in range(len(self.names))]

    def _tuples(self, rows: npt.NDArray[np.intp] | None) -> RelationUpdates:
        src = self._ids("src", rows, required=True)
        dst = self._ids("dst", rows, required=True)
        at = np.arange(self.n) if rows is None else rows
        return RelationUpdates([src, dst], self.diffs[at], at.astype(np.int64))

    def _take(self, name: str, rows: npt.NDArray[np.intp] | None) -> pa.Array | None:
        column = self.columns.get(name)
        if column is None:
            column = column_of(self.table, name)
        if column is None or rows is None:
            return column
        return column.take(pa.array(rows, pa.int64()))

    def _ids(
        self, name: str, rows: npt.NDArray[np.intp] | None, *, required: bool
    ) -> npt.NDArray[Any]:
        """An id column of ``rows`` (int64, or object when strings), every value present when
        ``required``."""
        column = self._take(name, rows)
        count = self.n if rows is None else rows.shape[0]
        if column is None or column.null_count:
            if required and count:
                raise Refused
            if column is None:
                return np.full(count, None, dtype=object)
        if column.type == pa.int64():
            return (
                column.to_numpy(zero_copy_only=False) if not column.null_count else _objects(column)
            )
        if column.type == pa.string() or column.type == pa.null():
            _check_lengths(column, MAX_ID_LENGTH)
            return _objects(column)
        raise Refused

    def _events(
        self, relation: str, rows: npt.NDArray[np.intp] | None, learned: dict[str, dict[str, str]]
    ) -> EventUpdates:
        """One event relation's records (``rows``; None: all), as
        :func:`~connectors.event_batch.decode_events` makes them."""
        assert self.events is not None
        at = np.arange(self.n) if rows is None else rows
        diffs = self.diffs[at]
        insert = diffs > 0
        everything = bool(insert.all())
        inserts = at if everything else at[insert]
        if relation in self.events.tables:  # (a table's record: its key is id, src and dst)
            keys = self._ids("key", rows, required=True)
            ends = keys if everything else keys[insert]
            if not everything:
                ends = _spread(ends, insert)
            fields = self._fields(relation, inserts, insert, everything, learned, TABLE_RESERVED)
            identity = keys.astype(object) if keys.dtype != object else keys
            return EventUpdates(identity, diffs, at.astype(np.int64), ends, ends, fields)
        ids_column = self._take("id", rows)
        identity = np.full(at.shape[0], None, dtype=object)
        anonymous = insert
        if ids_column is not None and ids_column.null_count < len(ids_column):
            named = self._ids("id", rows, required=False)
            identity[:] = named if named.dtype == object else named.astype(object)
            has_id = ids_column.is_valid().to_numpy(zero_copy_only=False)
            anonymous = insert & ~has_id
        if anonymous.any():
            positions = np.empty(int(anonymous.sum()), dtype=object)
            positions[:] = self.identities(self.lines[at[anonymous]].tolist())
            identity[anonymous] = positions
        src = self._ids("src", inserts, required=True)
        dst = self._ids("dst", inserts, required=True)
        if not everything:
            src, dst = _spread(src, insert), _spread(dst, insert)
        fields = self._fields(relation, inserts, insert, everything, learned)
        return EventUpdates(identity, diffs, at.astype(np.int64), src, dst, fields)

    def _fields(
        self,
        relation: str,
        inserts: npt.NDArray[np.intp],
        insert: npt.NDArray[np.bool_],
        everything: bool,
        learned: dict[str, dict[str, str]],
        reserved: frozenset[str] = RESERVED,
    ) -> dict[str, npt.NDArray[Any]]:
        """The field columns of a relation's events, in the order the per-record decoder meets
        them (first event with the field, then its place in that record)."""
        assert self.events is not None
        known = self.events.types.get(relation, {})
        found: list[tuple[int, str, str, npt.NDArray[Any]]] = []
        for name in self.table.column_names:
            if name in reserved:
                continue
            column = column_of(self.table, name)
            assert column is not None
            if inserts.shape[0] != self.n:
                column = column.take(pa.array(inserts, pa.int64()))
            if column.null_count == len(column):
                continue
            kind, values = _field(name, column, self.events.is_time(relation, name))
            if known.get(name, kind) != kind:
                raise Refused
            first = int(inserts[_first_valid(column)])
            found.append((first, name, kind, values))
        found.sort(key=lambda item: item[0])
        found = self._in_record_order(found)
        mine = learned.setdefault(relation, {})
        columns: dict[str, npt.NDArray[Any]] = {}
        for _, name, kind, values in found:
            mine.setdefault(name, kind)
            if not everything:
                spread = absent_column(kind, insert.shape[0])
                spread[insert] = values
                values = spread
            columns[name] = values
        return columns

    def _in_record_order(
        self, found: list[tuple[int, str, str, npt.NDArray[Any]]]
    ) -> list[tuple[int, str, str, npt.NDArray[Any]]]:
        """Fields that first appear in the same record, in that record's key order."""
        firsts = [item[0] for item in found]
        if len(set(firsts)) == len(firsts):
            return found
        out: list[tuple[int, str, str, npt.NDArray[Any]]] = []
        start = 0
        while start < len(found):
            end = start
            while end < len(found) and found[end][0] == found[start][0]:
                end += 1
            group = found[start:end]
            if len(group) > 1:
                keys = list(orjson.loads(self._line(group[0][0])))
                group.sort(key=lambda item: keys.index(item[1]))
            out += group
            start = end
        return out

    def _line(self, row: int) -> bytes:
        """Record ``row``'s text."""
        start = int(self.starts[row])
        end = self.text.find(b"\n", start)
        return self.text[start : None if end < 0 else end]


def _field(name: str, column: pa.Array, time: bool) -> tuple[str, npt.NDArray[Any]]:
    """A field's kind and its column (absent values as :mod:`core.fields` writes them; a
    ``time`` field's as milliseconds)."""
    kind = column.type
    if time:
        if kind in _NUMBERS:
            values = column.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
            present = values[~np.isnan(values)] if column.null_count else values
            if not (np.abs(present) <= _TIME_LIMIT_MS).all():
                raise Refused  # (no infinity: Arrow refuses a number beyond a double)
            return "number", values
        if kind == pa.string():
            return "number", _times(column)
        raise Refused
    if kind in _NUMBERS:
        return "number", column.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    if kind == pa.bool_():
        return "bool", column.cast(pa.int8()).fill_null(-1).to_numpy(zero_copy_only=False)
    if kind == pa.string():
        _check_lengths(column, MAX_FIELD_LENGTH)
        return "string", _objects(column)
    raise Refused


def _times(column: pa.Array) -> npt.NDArray[np.float64]:
    """Milliseconds of a string ``ts`` column (NaN where absent), as
    :func:`~core.times.parse_time` reads each value."""
    _, offsets, data = column.buffers()
    start = column.offset
    bounds = np.frombuffer(offsets, np.int32, len(column) + 1, start * 4).astype(np.int64)
    text = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
    ms, canonical = parse_time_texts(text, bounds)
    present = column.is_valid().to_numpy(zero_copy_only=False)
    odd = np.flatnonzero(present & ~canonical)
    if odd.shape[0]:
        values = column.take(pa.array(odd, pa.int64())).to_pylist()
        try:
            ms[odd] = [parse_time(value) for value in values]
        except Exception as error:  # InputError: the slow path writes it
            raise Refused from error
    return ms


def _first_valid(column: pa.Array) -> int:
    if not column.null_count:
        return 0
    return int(np.argmax(column.is_valid().to_numpy(zero_copy_only=False)))


def _check_lengths(column: pa.Array, limit: int) -> None:
    """Refuse strings of more than ``limit`` characters (bytes first: never fewer)."""
    if column.type == pa.null() or not len(column):
        return
    longest = pc.max(pc.binary_length(column)).as_py()
    if longest is not None and longest > limit:
        chars = pc.max(pc.utf8_length(column)).as_py()
        if chars is not None and chars > limit:
            raise Refused


def _objects(column: pa.Array) -> npt.NDArray[Any]:
    """A column as an ``object`` array (``None`` where null)."""
    values: npt.NDArray[Any] = column.to_numpy(zero_copy_only=False)
    if values.dtype == object:
        return values
    out = np.empty(values.shape[0], dtype=object)
    out[:] = column.to_pylist()
    return out


def _spread(inserted: npt.NDArray[Any], insert: npt.NDArray[np.bool_]) -> npt.NDArray[Any]:
    """An id column of the inserts spread over all events, 0 for the deletes (as the
    per-record decoder gives a delete's ``src`` and ``dst``)."""
    if inserted.dtype == np.int64 or not inserted.shape[0]:
        out = np.zeros(insert.shape[0], np.int64)
        out[insert] = inserted
        return out
    column = np.zeros(insert.shape[0], dtype=object)
    column[insert] = inserted
    return column
