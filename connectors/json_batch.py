"""Whole-batch decoding of JSON records: many record values into columns, one error per bad one.

A batch of record values (Kafka message values) is parsed by ``orjson`` inside one ``map`` (a C
call per value, no Python frame; a value that is not JSON costs one caught exception), and the
decoded objects are checked and turned into columns a rule at a time over the whole batch:
``op``, ``relation``, ``src``, ``dst`` and each field are pulled out by one list comprehension,
typed by mapping ``type`` over them, and checked with numpy. What the batch rules do not accept
goes through the per-record decoders (:func:`~connectors.formats.parse_json_record`,
:func:`~connectors.events.decode_event`), which also write every error message; so a batch
decodes to exactly what those decoders give record by record, in the same order (the property
test in ``tests/connectors/test_json_batch.py`` holds it to the per-record Kafka decoding).

Records of an event relation are decoded a relation at a time: when every one of them is valid
(ids, ``src``/``dst``, one kind per field agreeing with the relation's, strings short enough,
``ts`` a time), the kinds of new fields are learned in record order and the columns built at
once; otherwise that relation's records go through :func:`~connectors.events.decode_event` one
by one, in order, because a record that fails may still fix the kind of a field it has before
the one it fails at.
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
_NULL, _BOOL, _INT, _FLOAT, _STR, _OTHER = range(6)
_TYPE_CODES = {type(None): _NULL, bool: _BOOL, int: _INT, float: _FLOAT, str: _STR}
_KIND_OF_CODE = {_BOOL: "bool", _INT: "number", _FLOAT: "number", _STR: "string"}
_OPS = {"insert": 1, "delete": -1}

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
    defaults: Sequence[str],
    identities: Identities,
    events: FieldTypes | None,
    max_bytes: int,
) -> DecodedRecords:
    """Decode ``values``; ``defaults[i]`` is the relation of record ``i`` if it names none.

    A value longer than ``max_bytes`` is an error and is not parsed. Records of the ``events``
    relations are events, the others tuple updates; ``events`` learns the kinds of new fields.
    """
    n = len(values)
    lengths = np.fromiter(map(len, values), np.int64, n)
    large = lengths > max_bytes
    errors = [
        (row, f"record of {int(lengths[row]):,} bytes is larger than {max_bytes:,}")
        for row in np.flatnonzero(large).tolist()
    ]
    if errors:
        values = [b"" if big else v for v, big in zip(values, large.tolist(), strict=True)]
    parsed = load_all(values)
    is_dict = np.fromiter((type(r) is dict for r in parsed), np.bool_, n)
    rows = np.flatnonzero(is_dict)
    records: list[dict[str, Any]] = list(compress(parsed, is_dict.tolist()))
    ops = [r.get("op", "insert") for r in records]
    record_defaults = [defaults[i] for i in rows.tolist()]
    relations = [r.get("relation", d) for r, d in zip(records, record_defaults, strict=True)]
    diffs = np.fromiter(
        (_OPS.get(op, 0) if type(op) is str else 0 for op in ops), np.int8, len(records)
    )
    is_event = np.zeros(len(records), np.bool_)
    if events is not None and events.relations:
        wanted = events.relations
        is_event = (diffs != 0) & np.fromiter(
            (type(r) is str and r in wanted for r in relations), np.bool_, len(records)
        )
    fast = ~is_event & (diffs != 0) & _allowed(relations)
    fast[fast] = _has_ids([records[i] for i in np.flatnonzero(fast).tolist()])
    slow = ~large
    slow[rows[is_event | fast]] = False
    accepted = _per_record(values, defaults, np.flatnonzero(slow).tolist(), errors)
    out = DecodedRecords(np.zeros(n, np.bool_))
    out.parts = _tuple_parts(records, relations, diffs, rows, np.flatnonzero(fast), accepted)
    if is_event.any():
        assert events is not None
        out.events = _events(records, relations, diffs, rows, is_event, identities, events, errors)
    for part in out.parts.values():
        out.kept[part.seq] = True
    for events_part in out.events.values():
        out.kept[events_part.seq] = True
    out.errors = sorted(errors)
    return out


def _codes(values: Iterable[Any], n: int) -> npt.NDArray[np.int8]:
    """The type code of each value (``_OTHER`` for arrays, objects and the sentinels)."""
    return np.fromiter(map(_TYPE_CODES.get, map(type, values), repeat(_OTHER)), np.int8, n)


def _allowed(relations: list[Any]) -> npt.NDArray[np.bool_]:
    """Whether each relation is a string and an allowed name (each name checked once)."""
    is_str = [type(r) is str for r in relations]
    names = list(compress(relations, is_str))
    allowed = {name: is_relation_name(name) for name in dict.fromkeys(names)}
    out = np.zeros(len(relations), np.bool_)
    out[np.fromiter(is_str, np.bool_, len(is_str))] = np.fromiter(
        map(allowed.__getitem__, names), np.bool_, len(names)
    )
    return out


def _ids(values: list[Any]) -> tuple[npt.NDArray[np.bool_], npt.NDArray[Any]]:
    """Which values are vertex ids (strings of at most ``MAX_ID_LENGTH`` characters, integers
    within int64), and the values as an ``object`` array."""
    n = len(values)
    codes = _codes(values, n)
    items = np.empty(n, dtype=object)
    items[:] = values
    ok = codes == _STR
    if ok.any():
        ok[ok] = np.fromiter(map(len, items[ok]), np.int64, int(ok.sum())) <= MAX_ID_LENGTH
    ints = codes == _INT
    if ints.any():
        ints[ints] = items[ints] <= INT64_MAX  # orjson's integers are at least INT64_MIN
    return ok | ints, items


def _has_ids(records: list[dict[str, Any]]) -> npt.NDArray[np.bool_]:
    """Which records have no ``tuple`` and valid ``src`` and ``dst`` ids."""
    no_tuple = np.fromiter(("tuple" not in r for r in records), np.bool_, len(records))
    src_ok, _ = _ids([r.get("src", _MISSING) for r in records])
    dst_ok, _ = _ids([r.get("dst", _MISSING) for r in records])
    return no_tuple & src_ok & dst_ok


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
    records: list[dict[str, Any]],
    relations: list[Any],
    diffs: npt.NDArray[np.int8],
    rows: npt.NDArray[np.intp],
    fast: npt.NDArray[np.intp],
    accepted: Accepted,
) -> dict[str, RelationUpdates]:
    """Per relation, in order of first appearance, the tuple updates of the ``fast`` records
    (indices into ``records``) and the ``accepted`` ones."""
    names = [relations[i] for i in fast.tolist()]
    first = dict(zip(reversed(names), reversed(rows[fast].tolist()), strict=True))
    for row, name, _, _ in reversed(accepted):
        first[name] = min(row, first.get(name, row))
    src = np.empty(fast.shape[0], dtype=object)
    src[:] = [records[i]["src"] for i in fast.tolist()]
    dst = np.empty(fast.shape[0], dtype=object)
    dst[:] = [records[i]["dst"] for i in fast.tolist()]
    parts: dict[str, RelationUpdates] = {}
    for name in sorted(first, key=first.__getitem__):
        mine = (
            np.ones(len(names), np.bool_)
            if len(first) == 1
            else np.fromiter((x == name for x in names), np.bool_, len(names))
        )
        others = [a for a in accepted if a[1] == name]
        if not others:
            columns = [_id_column(src[mine]), _id_column(dst[mine])]
            parts[name] = RelationUpdates(columns, diffs[fast[mine]], rows[fast[mine]])
            continue
        # Both kinds: one tuple per update in stream order, columns as the per-record
        # decoding builds them (the first tuple's arity).
        at = np.concatenate([rows[fast[mine]], np.array([a[0] for a in others], np.int64)])
        ids = [*zip(src[mine].tolist(), dst[mine].tolist(), strict=True), *(a[2] for a in others)]
        signs = [*diffs[fast[mine]].tolist(), *(a[3] for a in others)]
        order = np.argsort(at, kind="stable").tolist()
        ordered = [ids[i] for i in order]
        columns = [id_column([v[k] for v in ordered]) for k in range(len(ordered[0]))]
        parts[name] = RelationUpdates(
            columns, np.array([signs[i] for i in order], np.int8), at[order]
        )
    return parts


def _id_column(items: npt.NDArray[Any]) -> npt.NDArray[np.generic]:
    """:func:`~core.records.id_column` of an ``object`` array of valid ids."""
    if all(type(v) is int for v in items.tolist()):
        return items.astype(np.int64)
    return items


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
    has_id = np.fromiter(("id" in r for r in records), np.bool_, n)
    id_ok, id_items = _ids([r.get("id", _MISSING) for r in records])
    if not (id_ok | ~has_id).all():
        return None
    insert = diffs > 0
    inserted = list(compress(records, insert.tolist()))
    src_ok, src_items = _ids([r.get("src", _MISSING) for r in inserted])
    dst_ok, dst_items = _ids([r.get("dst", _MISSING) for r in inserted])
    if not (src_ok.all() and dst_ok.all()):
        return None
    known = types.types.get(relation, {})
    fields: list[tuple[int, int, str, str, list[Any]]] = []
    for name in set().union(*inserted) - RESERVED:
        checked = _field(name, [r.get(name) for r in inserted], known.get(name))
        if checked is None:
            return None
        kind, values, first = checked
        if first >= 0:
            fields.append((first, list(inserted[first]).index(name), name, kind, values))
    fields.sort()
    learned = types.types.setdefault(relation, {})
    for _, _, name, kind, _ in fields:
        learned.setdefault(name, kind)
    ids = np.empty(n, dtype=object)
    ids[has_id] = id_items[has_id]
    anonymous = insert & ~has_id
    if anonymous.any():
        named = np.empty(int(anonymous.sum()), dtype=object)
        named[:] = identities(rows[anonymous].tolist())
        ids[anonymous] = named
    src = np.zeros(n, dtype=object)
    src[insert] = src_items
    dst = np.zeros(n, dtype=object)
    dst[insert] = dst_items
    columns = {}
    for _, _, name, kind, values in fields:
        column = absent_column(kind, n)
        column[insert] = to_column(kind, values)
        columns[name] = column
    return EventUpdates(
        ids, diffs.astype(np.int8), rows.astype(np.int64), _id_column(src), _id_column(dst), columns
    )


def _field(name: str, values: list[Any], known: str | None) -> tuple[str, list[Any], int] | None:
    """One field over the inserted events: its kind, its values (``ts`` parsed) and the first
    event that has it (-1: none); None when a value is not valid for it."""
    n = len(values)
    codes = _codes(values, n)
    present = codes != _NULL
    if not present.any():
        return known or "number", values, -1
    if (codes == _OTHER).any():
        return None
    first = int(np.argmax(present))
    if name == TIME_FIELD:
        if (codes == _BOOL).any():
            return None
        try:
            values = [None if v is None else parse_time(v) for v in values]
        except InputError:
            return None
        kind = "number"
    else:
        kinds = {_KIND_OF_CODE[c] for c in np.unique(codes[present]).tolist()}
        if len(kinds) != 1:
            return None
        kind = kinds.pop()
        if kind == "string":
            strings = list(compress(values, present.tolist()))
            if max(map(len, strings)) > MAX_FIELD_LENGTH:
                return None
    if known is not None and known != kind:
        return None
    return kind, values, first
