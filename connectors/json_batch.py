"""Whole-batch decoding of JSON records: many record values into columns, one error per bad one.

A batch of record values (Kafka message values) is first offered, as one text of a line each, to
the fast path (:mod:`connectors.json_arrow`: pyarrow's JSON reader, the columns checked at
once), which takes every batch whose records it can decode exactly. The others are parsed by
``orjson`` inside one ``map`` (a C call per value, no Python frame; a value that is not JSON
costs one caught exception). The decoded objects are then checked a column at a time: ``op``,
``relation``, ``src`` and ``dst`` are pulled out by one list comprehension each, and the set of
their types decides the whole column at once (:mod:`connectors.batch_ids`); only a mixed column
is checked value by value. Records the batch rules do not accept go through the per-record
decoder (:func:`~connectors.formats.parse_json_record`), which also writes every error message;
records of event relations are decoded by :mod:`connectors.event_batch`. So a batch decodes to
exactly what the per-record decoders give record by record, in the same order
(``tests/connectors/test_kafka_records.py`` holds it to the per-record Kafka decoding on random
batches).

A relation has one arity: the one the caller knows (the queries', the index's), else its first
tuple's, learned for the batches after. A tuple of another length is a bad record, as in a
file (the lengths are checked at once, one message per relation and wrong length).

The Kafka source and the scale-out workers decode through here
(:func:`connectors.kafka_records.decode_messages`), and so does the file source for a block
of JSON Lines the fast path does not take (:mod:`connectors.json_lines`, with ``origins`` for
its ``(since path:line)`` messages).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from connectors.arrow_records import DecodedRecords
from connectors.batch_ids import MISSING, checked_ids, narrow
from connectors.event_batch import Identities, decode_events
from connectors.events import FieldTypes
from connectors.formats import is_relation_name, parse_json_record
from connectors.json_arrow import decode_lines
from core.errors import InputError, arity_message
from core.records import RelationUpdates, VertexId, id_column

#: Where a value is not JSON (or was not parsed: too large).
INVALID: Any = object()
_OPS = {"insert": 1, "delete": -1}


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
    arities: dict[str, int],
    max_bytes: int,
    *,
    fast_path: bool = True,
    origins: dict[str, str] | None = None,
) -> DecodedRecords:
    """Decode ``values``; ``defaults[i]`` is the relation of record ``i`` if it names none (a
    string: of every record).

    A value longer than ``max_bytes`` is an error and is not parsed. Records of the ``events``
    relations are events, the others tuple updates; ``events`` learns the kinds of new fields.
    A tuple whose length is not its relation's arity in ``arities`` is an error; ``arities``
    learns the first tuple's length of a relation it does not hold. With ``origins`` (a file's
    relations and where the input fixed their arity, ``""``: known before), a relation's arity
    learned here is noted at its first tuple's position (``identities``), and a message about a
    tuple of another length says where the arity came from (``(since path:line)``).
    """
    n = len(values)
    lengths = np.fromiter(map(len, values), np.int64, n)
    if fast_path and n and int(lengths.max()) <= max_bytes:
        # A line each (the count of lines is checked: no value may hold a line break).
        quick = decode_lines(b"\n".join(values), defaults, identities, events, arities, rows=n)
        if quick is not None:
            return quick[0]
    if isinstance(defaults, str):
        defaults = [defaults] * n
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
    keep, accepted = _of_arity(names, rows[at], accepted, arities, errors, origins, identities)
    if keep is not None:
        at, src, dst = at[keep], src[keep], dst[keep]
        names = list(compress(names, keep.tolist()))
    out.parts = _tuple_parts(names, rows[at], src, dst, diffs[at], accepted)
    if is_event.any():
        assert events is not None
        out.events = decode_events(
            records, relations, diffs, rows, is_event, identities, events, errors
        )
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


def _fast_tuples(
    records: list[dict[str, Any]], candidate: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[Any], npt.NDArray[Any]]:
    """Which ``candidate`` records (a valid op and relation) are ``src``/``dst`` records every
    rule accepts (no ``tuple``, both ids valid), and their ``src`` and ``dst`` columns."""
    at = np.flatnonzero(candidate)
    picked = records if at.shape[0] == len(records) else [records[i] for i in at.tolist()]
    src_ok, src = checked_ids([r.get("src", MISSING) for r in picked])
    dst_ok, dst = checked_ids([r.get("dst", MISSING) for r in picked])
    with_tuple = ["tuple" in r for r in picked]
    if src_ok is None and dst_ok is None and True not in with_tuple:
        return candidate, src, dst
    ok = ~np.array(with_tuple, np.bool_)
    for checked in (src_ok, dst_ok):
        if checked is not None:
            ok &= checked
    fast = candidate.copy()
    fast[at] = ok
    return fast, narrow(src[ok]), narrow(dst[ok])


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


def _of_arity(
    names: list[str],
    rows: npt.NDArray[np.intp],
    accepted: Accepted,
    arities: dict[str, int],
    errors: list[tuple[int, str]],
    origins: dict[str, str] | None,
    identities: Identities,
) -> tuple[npt.NDArray[np.bool_] | None, Accepted]:
    """The tuple updates whose length is their relation's arity: which of the batch rules'
    ``src``/``dst`` ones (relation ``names``, record ``rows``; None: all of them), and the
    ``accepted`` ones. A relation's arity is ``arities``', else its first tuple's (learned
    there); the other tuples' messages go into ``errors``."""
    learning = origins is not None and not arities.keys() >= set(names)
    if not accepted and not learning and all(arities.setdefault(n, 2) == 2 for n in set(names)):
        return None, accepted
    every = [*names, *map(itemgetter(1), accepted)]
    at = np.concatenate([rows, np.fromiter(map(itemgetter(0), accepted), np.intp, len(accepted))])
    lengths = np.concatenate(
        [
            np.full(len(names), 2, np.intp),
            np.fromiter(map(len, map(itemgetter(2), accepted)), np.intp, len(accepted)),
        ]
    )
    relations = list(dict.fromkeys(every))
    code_of = {name: code for code, name in enumerate(relations)}
    codes = np.fromiter(map(code_of.__getitem__, every), np.intp, len(every))
    order = np.argsort(at, kind="stable")
    _, first = np.unique(codes[order], return_index=True)  # every code, in code order
    if origins is not None:
        for name, row in zip(relations, at[order][first].tolist(), strict=True):
            if name not in arities:
                origins[name] = identities([row])[0]
    arity = np.array(
        [
            arities.setdefault(name, length)
            for name, length in zip(relations, lengths[order][first].tolist(), strict=True)
        ],
        np.intp,
    )
    wrong = lengths != arity[codes]
    if not wrong.any():
        return None, accepted
    for code, length in np.unique(np.stack([codes[wrong], lengths[wrong]], 1), axis=0).tolist():
        name = relations[code]
        origin = "" if origins is None else origins.get(name, "")
        message = arity_message(name, arities[name], length, f" (since {origin})" if origin else "")
        found = at[wrong & (codes == code) & (lengths == length)]
        errors.extend(zip(found.tolist(), repeat(message)))
    return ~wrong[: len(names)], list(compress(accepted, (~wrong[len(names) :]).tolist()))


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
            columns = [narrow(src[mine]), narrow(dst[mine])]
            parts[name] = RelationUpdates(columns, diffs[mine], rows[mine].astype(np.int64))
            continue
        # Both kinds: one tuple per update in stream order (all of the relation's arity),
        # columns as the per-record decoding builds them.
        at = np.concatenate([rows[mine], np.array([a[0] for a in others], np.int64)])
        tuples = [
            *zip(src[mine].tolist(), dst[mine].tolist(), strict=True),
            *(a[2] for a in others),
        ]
        signs = [*diffs[mine].tolist(), *(a[3] for a in others)]
        order = np.argsort(at, kind="stable").tolist()
        ordered = [tuples[i] for i in order]
        columns = [id_column([v[k] for v in ordered]) for k in range(len(ordered[0]))]
        parts[name] = RelationUpdates(
            columns, np.array([signs[i] for i in order], np.int8), at[order]
        )
    return parts
