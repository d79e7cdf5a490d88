"""Whole-batch decoding of JSON records: many record values into columns, one error per bad one.

A batch of record values (Kafka message values) is parsed by ``orjson`` inside one ``map`` (a C
call per value, no Python frame; a value that is not JSON costs one caught exception). The
decoded objects are then checked a column at a time: ``op``, ``relation``, ``src``, ``dst``, the
id and each field are pulled out by one list comprehension, and the set of their types decides
the whole column at once (all integers: one conversion to ``int64``, which also checks the
range; all strings: one length check); only a mixed column is checked value by value, with
numpy. Records the batch rules do not accept go through the per-record decoders
(:func:`~connectors.formats.parse_json_record`, :func:`~connectors.events.decode_event`), which
also write every error message; so a batch decodes to exactly what those decoders give record
by record, in the same order (``tests/connectors/test_kafka_records.py`` holds it to the
per-record Kafka decoding on random batches).

Records of an event relation are decoded a relation at a time: when every one of them is valid
(ids, ``src``/``dst``, one kind per field agreeing with the relation's, strings short enough,
``ts`` a time), the kinds of new fields are learned in record order and the columns built at
once; otherwise that relation's records go through :func:`~connectors.events.decode_event` one
by one, in order, because a record that fails may still fix the kind of a field it has before
the one it fails at.

The Kafka source and the scale-out workers decode through here
(:func:`connectors.kafka_records.decode_messages`); the file source still decodes JSON Lines a
line at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from connectors.events import (
    MAX_FIELD_LENGTH,
    RESERVED,
    EventRecord,
    FieldTypes,
    decode_event,
    event_updates,
)
from connectors.formats import MAX_ID_LENGTH, is_relation_name, parse_json_record
from core.errors import InputError
from core.fields import absent_column, to_column
from core.records import INT64_MAX, EventUpdates, RelationUpdates, VertexId, id_column
from core.times import TIME_FIELD, parse_time

#: Where a value is not JSON (or was not parsed: too large).
INVALID: Any = object()
_MISSING: Any = object()

# Type codes of decoded JSON values (``type`` is exact: orjson makes no subclasses).
_INT, _STR, _OTHER = range(3)
_TYPE_CODES = {int: _INT, str: _STR}
#: The kind of a field value of each JSON type (arrays, objects and null are not values).
_KIND_OF_TYPE = {bool: "bool", int: "number", float: "number", str: "string"}
_OPS = {"insert": 1, "delete": -1}
#: :func:`core.times.parse_time`'s range: 10,000 years either side of 1970, in milliseconds.
_TIME_LIMIT_MS = 10_000 * 365.25 * 86_400_000

#: Given record rows, the identities of their events when they have no ``id`` (their positions).
Identities = Callable[[Sequence[int]], list[str]]


@dataclass
class DecodedRecords:
    """A batch of records decoded. ``kept[i]``: record ``i`` became an update or an event.

    ``parts`` and ``events`` are per relation in order of first appearance; their ``seq`` holds
    the *record row* of each update (callers renumber). ``errors``: the bad records' rows and
    messages, in row order.
    """

    kept: npt.NDArray[np.bool_]
    parts: dict[str, RelationUpdates] = field(default_factory=dict)
    events: dict[str, EventUpdates] = field(default_factory=dict)
    errors: list[tuple[int, str]] = field(default_factory=list)


def load_all(values: Iterable[bytes]) -> list[Any]:
    """Every value parsed by ``orjson``, :data:`INVALID` where it is not JSON."""
    out: list[Any] = []
    rest = iter(values)
    while True:
        try:
            out.extend(map(orjson.loads, rest))
            return out
        except orjson.JSONDecodeError:
            out.append(INVALID)


def decode_records(
    values: Sequence[bytes],
    defaults: Sequence[str] | str,
    identities: Identities,
    events: FieldTypes | None,
    max_bytes: int,
) -> DecodedRecords:
    """Decode ``values``; ``defaults[i]`` is the relation of record ``i`` if it names none (a
    string: of every record).

    A value longer than ``max_bytes`` is an error and is not parsed. Records of the ``events``
    relations are events, the others tuple updates; ``events`` learns the kinds of new fields.
    """
    n = len(values)
    if isinstance(defaults, str):
        defaults = [defaults] * n
    lengths = np.fromiter(map(len, values), np.int64, n)
    large = lengths > max_bytes
    errors = [
        (row, f"record of {int(lengths[row]):,} bytes is larger than {max_bytes:,}")
        for row in np.flatnonzero(large).tolist()
    ]
    if errors:
        values = [b"" if big else v for v, big in zip(values, large.tolist(), strict=True)]
    parsed = load_all(values)
    rows: npt.NDArray[np.intp] = np.arange(n)
    records: list[dict[str, Any]] = parsed
    if set(map(type, parsed)) != {dict}:
        is_dict = [type(r) is dict for r in parsed]
        rows = np.flatnonzero(np.array(is_dict, np.bool_))
        records = list(compress(parsed, is_dict))
    diffs = _diffs([r.get("op", "insert") for r in records])
    relations = _relations(records, rows, defaults)
    is_event = _of_event_relations(relations, diffs, events)
    candidate = ~is_event & (diffs != 0) & _allowed(relations)
    fast, src, dst = _fast_tuples(records, candidate)
    slow = ~large
    slow[rows[is_event | fast]] = False
    accepted = _per_record(values, defaults, np.flatnonzero(slow).tolist(), errors)
    out = DecodedRecords(np.zeros(n, np.bool_))
    at = np.flatnonzero(fast)
    names = [relations[i] for i in at.tolist()]
    out.parts = _tuple_parts(names, rows[at], src, dst, diffs[at], accepted)
    if is_event.any():
        assert events is not None
        out.events = _events(records, relations, diffs, rows, is_event, identities, events, errors)
    for part in out.parts.values():
        out.kept[part.seq] = True
    for events_part in out.events.values():
        out.kept[events_part.seq] = True
    out.errors = sorted(errors)
    return out


def _distinct(values: list[Any]) -> set[Any] | None:
    """The distinct values, or None when one is not hashable (an array or object)."""
    try:
        return set(values)
    except TypeError:
        return None


def _diffs(ops: list[Any]) -> npt.NDArray[np.int8]:
    """+1 for ``insert``, -1 for ``delete``, 0 for any other op."""
    distinct = _distinct(ops)
    if distinct is not None and distinct <= {"insert", "delete"}:
        if "delete" not in distinct:
            return np.ones(len(ops), np.int8)
        return np.where(np.array(ops) == "delete", -1, 1).astype(np.int8)
    return np.array([_OPS.get(op, 0) if type(op) is str else 0 for op in ops], np.int8)


def _relations(
    records: list[dict[str, Any]], rows: npt.NDArray[np.intp], defaults: Sequence[str]
) -> list[Any]:
    """Each record's ``relation``, else its default."""
    distinct = set(defaults)
    if len(distinct) <= 1:
        default = distinct.pop() if distinct else ""
        return [r.get("relation", default) for r in records]
    mine = [defaults[i] for i in rows.tolist()]
    return [r.get("relation", d) for r, d in zip(records, mine, strict=True)]


def _of_event_relations(
    relations: list[Any], diffs: npt.NDArray[np.int8], events: FieldTypes | None
) -> npt.NDArray[np.bool_]:
    """Which records are of an event relation (with a valid op)."""
    wanted = set() if events is None else events.relations
    distinct = _distinct(relations)
    if distinct is not None:
        if not distinct & wanted:
            return np.zeros(len(relations), np.bool_)
        if distinct <= wanted:
            return np.asarray(diffs != 0)
    of = [type(r) is str and r in wanted for r in relations]
    return np.asarray((diffs != 0) & np.array(of, np.bool_))


def _allowed(relations: list[Any]) -> npt.NDArray[np.bool_]:
    """Whether each relation is a string and an allowed name (each name checked once)."""
    distinct = _distinct(relations)
    if distinct is not None and all(type(r) is str for r in distinct):
        allowed = {name: is_relation_name(name) for name in distinct}
        if all(allowed.values()):
            return np.ones(len(relations), np.bool_)
        return np.array(list(map(allowed.__getitem__, relations)), np.bool_)
    is_str = [type(r) is str for r in relations]
    names = list(compress(relations, is_str))
    checked = {name: is_relation_name(name) for name in set(names)}
    out = np.zeros(len(relations), np.bool_)
    out[np.array(is_str, np.bool_)] = np.array(list(map(checked.__getitem__, names)), np.bool_)
    return out


def _ids(values: list[Any]) -> tuple[npt.NDArray[np.bool_] | None, npt.NDArray[Any]]:
    """Which values are vertex ids (strings of at most ``MAX_ID_LENGTH`` characters, integers
    within int64; None: all of them) and the values as a column: ``int64`` when all are
    integers, else ``object`` (as :func:`~core.records.id_column` makes them)."""
    n = len(values)
    kinds = set(map(type, values))
    if kinds == {int}:
        try:
            return None, np.array(values, np.int64)
        except OverflowError:
            pass
    elif kinds == {str} and max(map(len, values)) <= MAX_ID_LENGTH:
        return None, _objects(values)
    codes = np.fromiter(map(_TYPE_CODES.get, map(type, values), repeat(_OTHER)), np.int8, n)
    items = _objects(values)
    ok = codes == _STR
    if ok.any():
        ok[ok] = np.fromiter(map(len, items[ok]), np.int64, int(ok.sum())) <= MAX_ID_LENGTH
    ints = codes == _INT
    if ints.any():
        ints[ints] = items[ints] <= INT64_MAX  # orjson's integers are at least INT64_MIN
    ok |= ints
    if ok.all():
        return None, _narrow(items)
    return ok, items


def _objects(values: list[Any]) -> npt.NDArray[Any]:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _narrow(items: npt.NDArray[Any]) -> npt.NDArray[np.generic]:
    """An ``object`` column of valid ids as ``int64`` when they are all integers."""
    if items.dtype == object and set(map(type, items.tolist())) <= {int}:
        return items.astype(np.int64)
    return items


def _fast_tuples(
    records: list[dict[str, Any]], candidate: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[Any], npt.NDArray[Any]]:
    """Which ``candidate`` records (a valid op and relation) are ``src``/``dst`` records every
    rule accepts (no ``tuple``, both ids valid), and their ``src`` and ``dst`` columns."""
    at = np.flatnonzero(candidate)
    picked = records if at.shape[0] == len(records) else [records[i] for i in at.tolist()]
    src_ok, src = _ids([r.get("src", _MISSING) for r in picked])
    dst_ok, dst = _ids([r.get("dst", _MISSING) for r in picked])
    with_tuple = ["tuple" in r for r in picked]
    if src_ok is None and dst_ok is None and True not in with_tuple:
        return candidate, src, dst
    ok = ~np.array(with_tuple, np.bool_)
    for checked in (src_ok, dst_ok):
        if checked is not None:
            ok &= checked
    fast = candidate.copy()
    fast[at] = ok
    return fast, _narrow(src[ok]), _narrow(dst[ok])


Accepted = list[tuple[int, str, tuple[VertexId, ...], int]]


def _per_record(
    values: Sequence[bytes], defaults: Sequence[str], rows: list[int], errors: list[tuple[int, str]]
) -> Accepted:
    """The records the batch rules left, through the per-record JSON decoder: the accepted
    ones as ``(row, relation, ids, diff)``; the others' messages into ``errors``."""
    accepted: Accepted = []
    for row in rows:
        try:
            relation, ids, diff = parse_json_record(values[row], defaults[row])
        except InputError as error:
            errors.append((row, error.message))
            continue
        accepted.append((row, relation, ids, diff))
    return accepted


def _tuple_parts(
    names: list[str],
    rows: npt.NDArray[np.intp],
    src: npt.NDArray[Any],
    dst: npt.NDArray[Any],
    diffs: npt.NDArray[np.int8],
    accepted: Accepted,
) -> dict[str, RelationUpdates]:
    """Per relation, in order of first appearance, the tuple updates of the batch rules (the
    relation ``names``, record ``rows``, ``src``, ``dst`` and ``diffs`` of each) and the
    ``accepted`` ones."""
    first = dict(zip(reversed(names), reversed(rows.tolist()), strict=True))
    for row, name, _, _ in reversed(accepted):
        first[name] = min(row, first.get(name, row))
    named = np.array(names) if len(first) > 1 else None
    parts: dict[str, RelationUpdates] = {}
    for name in sorted(first, key=first.__getitem__):
        mine = np.ones(len(names), np.bool_) if named is None else named == name
        others = [a for a in accepted if a[1] == name]
        if not others:
            columns = [_narrow(src[mine]), _narrow(dst[mine])]
            parts[name] = RelationUpdates(columns, diffs[mine], rows[mine].astype(np.int64))
            continue
        # Both kinds: one tuple per update in stream order, columns as the per-record
        # decoding builds them (the first tuple's arity).
        at = np.concatenate([rows[mine], np.array([a[0] for a in others], np.int64)])
        ids = [*zip(src[mine].tolist(), dst[mine].tolist(), strict=True), *(a[2] for a in others)]
        signs = [*diffs[mine].tolist(), *(a[3] for a in others)]
        order = np.argsort(at, kind="stable").tolist()
        ordered = [ids[i] for i in order]
        columns = [id_column([v[k] for v in ordered]) for k in range(len(ordered[0]))]
        parts[name] = RelationUpdates(
            columns, np.array([signs[i] for i in order], np.int8), at[order]
        )
    return parts


def _events(
    records: list[dict[str, Any]],
    relations: list[Any],
    diffs: npt.NDArray[np.int8],
    rows: npt.NDArray[np.intp],
    is_event: npt.NDArray[np.bool_],
    identities: Identities,
    types: FieldTypes,
    errors: list[tuple[int, str]],
) -> dict[str, EventUpdates]:
    """The event records, a relation at a time, in order of their first event."""
    at = np.flatnonzero(is_event)
    names = [relations[i] for i in at.tolist()]
    distinct = list(dict.fromkeys(names))
    out: dict[str, EventUpdates] = {}
    for name in distinct:
        mine = at
        if len(distinct) > 1:
            mine = at[np.fromiter((x == name for x in names), np.bool_, len(names))]
        picked = [records[i] for i in mine.tolist()]
        found = _clean_events(name, picked, diffs[mine], rows[mine], identities, types)
        if found is None:
            found, failed = _events_one_by_one(
                name, picked, diffs[mine], rows[mine], identities, types
            )
            errors.extend(failed)
        if found is not None:
            out[name] = found
    return dict(sorted(out.items(), key=lambda item: int(item[1].seq[0])))


def _events_one_by_one(
    relation: str,
    records: list[dict[str, Any]],
    diffs: npt.NDArray[np.int8],
    rows: npt.NDArray[np.intp],
    identities: Identities,
    types: FieldTypes,
) -> tuple[EventUpdates | None, list[tuple[int, str]]]:
    """The records of one event relation through :func:`decode_event`, in order."""
    found: list[tuple[int, EventRecord]] = []
    errors: list[tuple[int, str]] = []
    for record, diff, row in zip(records, diffs.tolist(), rows.tolist(), strict=True):
        position = "" if "id" in record else identities([row])[0]
        try:
            found.append((row, decode_event(record, relation, diff, position, types)))
        except InputError as error:
            errors.append((row, error.message))
    if not found:
        return None, errors
    seq = np.arange(int(rows.max()) + 1, dtype=np.int64)
    return event_updates(found, seq, types.types.get(relation, {})), errors


def _clean_events(
    relation: str,
    records: list[dict[str, Any]],
    diffs: npt.NDArray[np.int8],
    rows: npt.NDArray[np.intp],
    identities: Identities,
    types: FieldTypes,
) -> EventUpdates | None:
    """The events of ``records`` (all of one event relation) decoded at once, or None when
    one of them is not valid (then nothing is learned)."""
    n = len(records)
    ids = [r.get("id", _MISSING) for r in records]
    has_id = np.array([i is not _MISSING for i in ids], np.bool_)
    named = ids if has_id.all() else list(compress(ids, has_id.tolist()))
    id_ok, named_ids = _ids(named)
    if id_ok is not None:
        return None
    insert = diffs > 0
    everything = bool(insert.all())
    inserted = records if everything else list(compress(records, insert.tolist()))
    src_ok, src = _ids([r.get("src", _MISSING) for r in inserted])
    dst_ok, dst = _ids([r.get("dst", _MISSING) for r in inserted])
    if src_ok is not None or dst_ok is not None:
        return None
    known = types.types.get(relation, {})
    fields: list[tuple[int, int, str, str, npt.NDArray[Any]]] = []
    for name in set().union(*inserted) - RESERVED:
        checked = _field(name, [r.get(name) for r in inserted], known.get(name))
        if checked is None:
            return None
        if checked[2] >= 0:
            kind, column, first = checked
            fields.append((first, list(inserted[first]).index(name), name, kind, column))
    fields.sort(key=lambda f: f[:2])
    learned = types.types.setdefault(relation, {})
    for _, _, name, kind, _ in fields:
        learned.setdefault(name, kind)
    identity = np.empty(n, dtype=object)
    identity[has_id] = named_ids
    anonymous = insert & ~has_id
    if anonymous.any():
        identity[anonymous] = _objects(identities(rows[anonymous].tolist()))
    columns = {}
    for _, _, name, kind, column in fields:
        if not everything:
            column, inserted_column = absent_column(kind, n), column
            column[insert] = inserted_column
        columns[name] = column
    if not everything:
        src, dst = _with_deletes(src, insert), _with_deletes(dst, insert)
    return EventUpdates(identity, diffs.astype(np.int8), rows.astype(np.int64), src, dst, columns)


def _with_deletes(inserted: npt.NDArray[Any], insert: npt.NDArray[np.bool_]) -> Any:
    """An id column of the inserts spread over all events, 0 for the deletes (as the
    per-record decoder gives a delete's ``src`` and ``dst``)."""
    column = np.zeros(insert.shape[0], dtype=object)
    column[insert] = inserted
    return _narrow(column)


def _field(
    name: str, values: list[Any], known: str | None
) -> tuple[str, npt.NDArray[Any], int] | None:
    """One field over the inserted events: its kind, its column (``ts`` parsed) and the first
    event that has it (-1: none); None when a value is not valid for it."""
    kinds = set(map(type, values))
    absent = type(None) in kinds
    kinds.discard(type(None))
    if not kinds:
        return "number", np.empty(0), -1
    first = next(i for i, v in enumerate(values) if v is not None) if absent else 0
    if not kinds <= _KIND_OF_TYPE.keys():
        return None
    if name == TIME_FIELD:
        if kinds <= {int, float}:
            column = np.array(values, np.float64)  # None: NaN
            present = column[~np.isnan(column)] if absent else column
            if not (np.isfinite(present).all() and (np.abs(present) <= _TIME_LIMIT_MS).all()):
                return None
        elif bool in kinds:
            return None
        else:
            try:
                parsed = [None if v is None else parse_time(v) for v in values]
            except InputError:
                return None
            column = np.array(parsed, np.float64)
        kind = "number"
    else:
        named = {_KIND_OF_TYPE[k] for k in kinds}
        if len(named) != 1:
            return None
        kind = named.pop()
        if kind == "string":
            strings = [v for v in values if v is not None] if absent else values
            if max(map(len, strings)) > MAX_FIELD_LENGTH:
                return None
        column = np.array(values, np.float64) if kind == "number" else to_column(kind, values)
    if known is not None and known != kind:
        return None
    return kind, column, first
