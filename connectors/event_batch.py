"""Records of event relations decoded a batch at a time, a relation at a time.

When every record of the relation in the batch is valid (ids, ``src``/``dst``, one kind per
field agreeing with the relation's, strings short enough, ``ts`` a time), the kinds of new
fields are learned in record order and the columns built at once: one list comprehension per
field, the set of its types deciding its kind, one numpy conversion. Otherwise the relation's
records go through :func:`~connectors.events.decode_event` one by one, in order, because a
record that fails may still fix the kind of a field it has before the one it fails at. Either
way the result is what :func:`~connectors.events.decode_event` and
:func:`~connectors.events.event_updates` make of the records (:mod:`connectors.json_batch`
calls this; its property test covers both ways).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress
from typing import Any

import numpy as np
import numpy.typing as npt

from connectors.batch_ids import MISSING, checked_ids, narrow, objects
from connectors.events import (
    MAX_FIELD_LENGTH,
    RESERVED,
    TABLE_RESERVED,
    EventRecord,
    FieldTypes,
    decode_event,
    event_updates,
)
from core.errors import InputError
from core.fields import absent_column, to_column
from core.records import EventUpdates
from core.times import parse_time

#: The kind of a field value of each JSON type (arrays, objects and null are not values).
_KIND_OF_TYPE = {bool: "bool", int: "number", float: "number", str: "string"}
#: :func:`core.times.parse_time`'s range: 10,000 years either side of 1970, in milliseconds.
_TIME_LIMIT_MS = 10_000 * 365.25 * 86_400_000

#: Given record rows, the identities of their events when they have no ``id`` (their positions).
Identities = Callable[[Sequence[int]], list[str]]


def decode_events(
    records: list[dict[str, Any]],
    relations: list[Any],
    diffs: npt.NDArray[np.int8],
    rows: npt.NDArray[np.intp],
    is_event: npt.NDArray[np.bool_],
    identities: Identities,
    types: FieldTypes,
    errors: list[tuple[int, str]],
) -> dict[str, EventUpdates]:
    """The events of the records where ``is_event`` (decoded JSON objects with their
    ``relations``, op ``diffs`` and record ``rows``), per relation in order of their first
    event, numbered by record row; the bad records' rows and messages go into ``errors``."""
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
    table = relation in types.tables  # (a table's record: its vertex is its key)
    ids = [r.get("key" if table else "id", MISSING) for r in records]
    has_id = np.array([i is not MISSING for i in ids], np.bool_)
    if table and not has_id.all():
        return None
    named = ids if has_id.all() else list(compress(ids, has_id.tolist()))
    id_ok, named_ids = checked_ids(named)
    if id_ok is not None:
        return None
    insert = diffs > 0
    everything = bool(insert.all())
    inserted = records if everything else list(compress(records, insert.tolist()))
    if table:
        src = dst = named_ids if everything else narrow(named_ids[insert])
    else:
        src_ok, src = checked_ids([r.get("src", MISSING) for r in inserted])
        dst_ok, dst = checked_ids([r.get("dst", MISSING) for r in inserted])
        if src_ok is not None or dst_ok is not None:
            return None
    known = types.types.get(relation, {})
    fields: list[tuple[int, int, str, str, npt.NDArray[Any]]] = []
    for name in set().union(*inserted) - (TABLE_RESERVED if table else RESERVED):
        values = [r.get(name) for r in inserted]
        checked = _field(name, values, known.get(name), types.is_time(relation, name))
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
        identity[anonymous] = objects(identities(rows[anonymous].tolist()))
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
    return narrow(column)


def _field(
    name: str, values: list[Any], known: str | None, time: bool
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
    if time:
        if kinds <= {int, float}:
            column = np.array(values, np.float64)  # None: NaN
            present = column[~np.isnan(column)] if absent else column
            if not (np.isfinite(present).all() and (np.abs(present) <= _TIME_LIMIT_MS).all()):
                return None
        elif bool in kinds:
            return None
        else:
            try:
                parsed = [None if v is None else parse_time(v, name) for v in values]
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
