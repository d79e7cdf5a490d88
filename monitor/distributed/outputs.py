"""The partitioned engine's match deltas as the single process outputs them.

A query's deltas come from the evaluation in global ids: vertices numbered by the partitioned
dictionary, events by the shards of their ids. What a user reads is the single process's
:class:`~monitor.service.query_output.QueryOutput`: external vertex ids, each edge variable's events
(``id``, ``src``, ``dst`` and their fields), ``match_id``, and ``cause`` in a run with a window.
Every query's events are read in one round (each distinct event once, at its shard), and every
vertex id, the events' ends too, is decoded in another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from core.columns import Coded, Column, Member
from monitor.distributed.routing import Split
from monitor.engine.consolidate import by_identity as by_identity_of
from monitor.engine.delta import MatchDeltas
from monitor.index.levels import I32, I64
from monitor.index.unique import first_appearances
from monitor.plan.events import EventQuery
from monitor.service.causes import causes
from monitor.service.grouped import BodyReads
from monitor.service.match_ids import Hashed, match_ids
from monitor.service.query_output import QueryOutput

if TYPE_CHECKING:
    from monitor.distributed.delta import ShardedEpochs
    from monitor.distributed.sharded_events import ShardedEvents


def outputs(
    epochs: ShardedEpochs, deltas: Sequence[MatchDeltas], whole: bool = False
) -> list[QueryOutput]:
    """``deltas`` (global ids) as :class:`QueryOutput` s, in the order given (of an aggregate's
    body, what its groups read, unless ``whole``: :meth:`~monitor.service.grouped.GroupedQuery.
    reads`)."""
    settings, events = epochs.settings, epochs.events
    at = {q.name: i for i, q in enumerate(epochs.internal)}
    kept: list[tuple[int, list[I32], I64]] = []
    for found in deltas:
        i = at[found.query]
        columns, diff = list(found.columns), found.diff
        body = found.query in epochs.grouped  # (an aggregate's body: its groups read it all)
        if events is not None and events.replaced and epochs.plan.rewritten[i].edges and not body:
            columns, diff = by_identity(events, epochs.plan.rewritten[i], columns, diff)
        if settings.emit == "appearances" and not body:
            keep = diff > 0
            columns, diff = [c[keep] for c in columns], diff[keep]
        if diff.shape[0]:
            kept.append((i, columns, diff))
    reads = [_reads(epochs, i, whole) for i, _, _ in kept]
    matched = _matched(epochs, kept, reads)
    heads = [c[: len(epochs.plan.rewritten[i].source.head)] for i, c, _ in kept]
    ends = [column for m in matched for e in m for column in (e[2], e[3])]
    decoded = epochs.index.vertices.decode([c for head in heads for c in head] + ends)
    out, n = [], 0
    end_at = sum(len(h) for h in heads)
    for (i, columns, diff), head, query_matched, read in zip(
        kept, heads, matched, reads, strict=True
    ):
        rewritten = epochs.plan.rewritten[i]
        source = rewritten.source
        vertices, n = decoded[n : n + len(head)], n + len(head)
        edges: dict[str, Mapping[str, Column]] = {}
        hashes: list[Hashed] = []
        for var, fields, _, _, ids in query_matched:
            src, dst, end_at = decoded[end_at], decoded[end_at + 1], end_at + 2
            edges[var] = {"id": fields.pop("id"), "src": src, "dst": dst, **fields}
            hashes.append(Hashed(ids))
        extra: dict[str, Member] = {}
        if events is not None and events.caused:
            extra["cause"] = causes(source, columns, diff, events, epochs.changes)
        if read is None or read.match_ids:
            extra["match_id"] = match_ids(source.name, [*vertices, *hashes], diff.shape[0])
        out.append(QueryOutput(source.name, source.head, vertices, diff, edges, extra))
    return out


#: An edge variable's events, per row: the variable, fields (``id`` first), ends (global ids),
#: id hashes.
Matched = tuple[str, dict[str, Column], I32, I32, npt.NDArray[np.uint64]]


#: An edge variable's events asked of the shards: the variable, its relation, each row's place
#: among the distinct events, the distinct events, where each shard's answer goes, the fields
#: asked for.
Asked = tuple[str, str, npt.NDArray[np.intp], I32, list[tuple[int, int, Any]], Sequence[str] | None]


def _reads(epochs: ShardedEpochs, i: int, whole: bool) -> BodyReads | None:
    """What query ``i``'s output needs of its events if it is an aggregate's body (None: all)."""
    grouped = epochs.grouped.get(epochs.plan.rewritten[i].source.name)
    return None if grouped is None or whole else grouped.reads()


def _matched(
    epochs: ShardedEpochs,
    kept: list[tuple[int, list[I32], I64]],
    reads: list[BodyReads | None],
) -> list[list[Matched]]:
    """Per query, per edge variable it reads, its events read at their shards (all in one
    round)."""
    events = epochs.events
    count = epochs.index.shards.count
    calls: list[list[Any]] = [[] for _ in range(count)]
    asked: list[list[Asked]] = []
    for (i, columns, _), read in zip(kept, reads, strict=True):
        rewritten = epochs.plan.rewritten[i]
        # (an aggregate's body: its conditions read fields the output may leave out)
        body = rewritten.source.name in epochs.grouped
        width = len(rewritten.source.head)
        mine: list[Asked] = []
        for k, (var, relation) in enumerate(rewritten.edges.items()):
            if read is not None and var not in read.edges:
                continue
            fields: Sequence[str] | None = (
                (None if body else epochs.settings.output_fields)
                if read is None
                else read.edges[var]
            )
            distinct, inverse = first_appearances(columns[width + k])
            split = Split(distinct, count)
            where = []
            for s in range(count):
                p = split.part(s)
                if p is not None:
                    where.append((s, len(calls[s]), p))
                    calls[s].append((relation, distinct[p].astype(np.int32), fields))
            mine.append((var, relation, inverse, distinct, where, fields))
        asked.append(mine)
    if not any(calls):
        return [[] for _ in kept]
    assert events is not None  # (an edge variable reads events)
    answers = epochs.index.shards.call("event_matched_many", [(c,) if c else None for c in calls])
    out = []
    for mine in asked:
        query_matched = []
        for var, relation, inverse, distinct, where, asked_fields in mine:
            n = distinct.shape[0]
            parts = [(p, answers[s][j]) for s, j, p in where]
            merged = _merged(events, relation, n, parts, asked_fields)
            src, dst = np.zeros(n, np.int32), np.zeros(n, np.int32)
            hashes = np.zeros(n, np.uint64)
            for p, (_, h, part_src, part_dst) in parts:
                src[p], dst[p], hashes[p] = part_src, part_dst, h
            rows = {name: column[inverse] for name, column in merged.items()}
            query_matched.append((var, rows, src[inverse], dst[inverse], hashes[inverse]))
        out.append(query_matched)
    return out


def _merged(
    events: ShardedEvents,
    relation: str,
    n: int,
    parts: list[tuple[npt.NDArray[np.intp], Any]],
    fields: Sequence[str] | None,
) -> dict[str, Column]:
    """The shards' columns of ``n`` events as one: ``id``, then every field the relation has
    (or those in ``fields``) in the order first seen, absent where a shard has none."""
    out: dict[str, Column] = {"id": _ids(n, [(p, a[0]["id"]) for p, a in parts])}
    for name, kind in events.kinds[relation].items():
        if fields is not None and name not in fields:
            continue
        found = [(p, a[0][name]) for p, a in parts if name in a[0]]
        if kind == "number":
            values = np.full(n, np.nan)
            for p, column in found:
                values[p] = column
            out[name] = values
            continue
        codes = np.full(n, -1, np.int32)
        table: list[object] = []
        for p, column in found:
            codes[p] = np.where(column.codes >= 0, column.codes + len(table), -1)
            table.extend(column.values)
        out[name] = Coded(codes, tuple(table))
    return out


def _ids(n: int, parts: list[tuple[npt.NDArray[np.intp], npt.NDArray[Any]]]) -> Column:
    """Event ids from the shards as one column: integers, ASCII bytes (as wide as the widest),
    or Python values where the shards' kinds differ."""
    kinds = {column.dtype.kind for _, column in parts}
    if kinds == {"i"}:
        out = np.zeros(n, np.int64)
    elif kinds == {"S"}:
        out = np.zeros(n, f"S{max(column.dtype.itemsize for _, column in parts)}")
    else:
        out = np.empty(n, object)
        parts = [(p, _python(column)) for p, column in parts]
    for p, column in parts:
        out[p] = column
    return out


def _python(column: npt.NDArray[Any]) -> npt.NDArray[Any]:
    if column.dtype.kind == "S":
        return np.array([v.decode() for v in column.tolist()] + [None], object)[:-1]
    return column.astype(object)


def by_identity(
    events: ShardedEvents, rewritten: EventQuery, columns: list[I32], diff: I64
) -> tuple[list[I32], I64]:
    """The deltas consolidated by what a binding is outside, with the slots of the events'
    ids read at their shards (:func:`~monitor.engine.consolidate.by_identity`)."""
    width = len(rewritten.source.head)
    slots = [
        events.reads.slots(relation, columns[width + k])
        for k, relation in enumerate(rewritten.edges.values())
    ]
    return by_identity_of(columns, diff, width, slots)
