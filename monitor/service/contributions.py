"""The events that contribute to an aggregate group's row: ``"events": ["tx-1", ...]``.

A group's row says that it started or stopped holding; an analyst wants the transfers behind
it. The groups keep no binding (:mod:`monitor.service.grouped`: counts, sums and distinct
values only), so the events are found when a row is written: one static evaluation of the
query's body over the staged index, seeded by the epoch's group rows
(:func:`~monitor.engine.static.enumerate_given`: ``scatter_gather``'s ``b`` is one of ``a``'s
successors among ``c``'s predecessors), its bindings kept, when the aggregate keeps a window of
its own, where the binding is counted (its earliest event within ``over`` of the watermark the
epoch began with). Each row lists the distinct ids of its bindings' events, sorted as text, at
most ``--output-limit`` (0: no list): the same bytes in a rerun. The work (the groups'
bindings) is done on the epochs that write group rows only, by either engine
(:class:`Bindings`: the single process's or the partitioned one's evaluation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from core.columns import Coded, Column, python_values
from core.times import TIME_FIELD
from monitor.index.levels import I32
from monitor.query.ast import Query
from monitor.service.grouped import numbers
from monitor.service.match_ids import match_hashes
from monitor.service.query_output import QueryOutput

#: ``bindings(variables, given, take)``: the body's current bindings whose ``variables`` take
#: the values of a row of ``given`` (dense vertex ids, a column per variable), to ``take`` as
#: outputs.
Bindings = Callable[[tuple[str, ...], list[I32], Callable[[QueryOutput], None]], None]
#: External vertex id columns -> dense ids (-1: unknown).
Encode = Callable[[list[npt.NDArray[np.generic]]], list[I32]]


def contributions(
    groups: QueryOutput,
    body_head: Sequence[str],
    timed: Sequence[str],
    window: tuple[float, float] | None,
    limit: int,
    encode: Encode,
    bindings: Bindings,
) -> Coded:
    """Per row of ``groups`` (an aggregate query's group rows), the sorted ids of the events
    of its bindings, at most ``limit``: the bindings ``bindings`` gives (the body's, whose
    variables ``body_head`` start with the group's), those counted in ``window`` (span,
    watermark the epoch began with; by the earliest ``ts`` of the ``timed`` edge variables)
    when the aggregate keeps one."""
    rows, width = len(groups), len(groups.variables)
    dense = encode([np.asarray(c) for c in groups.columns])
    known = np.logical_and.reduce([d >= 0 for d in dense])
    wanted = match_hashes(groups.query, groups.columns, rows)
    order = np.argsort(wanted[known], kind="stable")
    sorted_keys, rows_of = wanted[known][order], np.flatnonzero(known)[order]
    owners_found: list[npt.NDArray[np.intp]] = []
    ids_found: list[npt.NDArray[np.str_]] = []

    def take(out: QueryOutput) -> None:
        keys = match_hashes(groups.query, out.columns[:width], len(out))
        at = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.shape[0] - 1)
        keep = sorted_keys[at] == keys
        if window is not None and timed:
            span, began = window
            times = [numbers(out.edges[v][TIME_FIELD]) for v in timed]
            earliest = np.minimum.reduce(times) if len(times) > 1 else times[0]
            keep &= earliest + span >= began
        picked = np.flatnonzero(keep)
        if not picked.shape[0]:
            return
        owners = rows_of[at[picked]]
        for fields in out.edges.values():
            owners_found.append(owners)
            ids_found.append(texts(fields["id"][picked]))

    if sorted_keys.shape[0]:
        rows_known = np.unique(np.stack([d[known] for d in dense], axis=1), axis=0)
        given = [np.ascontiguousarray(rows_known[:, k]) for k in range(width)]
        bindings(tuple(body_head[:width]), given, take)
    return Coded(np.arange(rows, dtype=np.int64), first_texts(owners_found, ids_found, rows, limit))


def texts(column: Column) -> npt.NDArray[np.str_]:
    """An id column as text, as the output prints it (``str`` of each value)."""
    if isinstance(column, Coded):
        table = np.array([str(v) for v in column.values], dtype=str)
        found: npt.NDArray[np.str_] = table[column.codes]
        return found
    if column.dtype.kind in "SUiu":
        return column.astype(str)
    return np.array([str(v) for v in python_values(column)], dtype=str)


def first_texts(
    owners: list[npt.NDArray[np.intp]], ids: list[npt.NDArray[np.str_]], rows: int, limit: int
) -> list[list[str]]:
    """Per row, its distinct ``ids`` (``owners``: each id's row) sorted as text, at most
    ``limit``: one sort of them all, not a set per row."""
    if not owners:
        return [[] for _ in range(rows)]
    owner, text = np.concatenate(owners), np.concatenate(ids)
    order = np.lexsort((text, owner))
    owner, text = owner[order], text[order]
    first = np.ones(owner.shape[0], np.bool_)
    first[1:] = (owner[1:] != owner[:-1]) | (text[1:] != text[:-1])
    owner, text = owner[first], text[first]
    rank = np.arange(owner.shape[0]) - np.searchsorted(owner, owner, side="left")
    kept = rank < limit
    owner, listed = owner[kept], text[kept].tolist()
    ends = np.cumsum(np.bincount(owner, minlength=rows)).tolist()
    return [listed[lo:hi] for lo, hi in zip([0, *ends[:-1]], ends, strict=True)]


def contributed(
    out: QueryOutput,
    body: Query,
    window_span: float | None,
    began: float,
    limit: int,
    encode: Encode,
    bindings: Bindings,
) -> QueryOutput:
    """``out`` (group rows of the aggregate whose body is ``body``; ``window_span``: the span
    of the window the aggregate keeps of its own, None: none) with its rows' ``events``."""
    window = None if window_span is None else (window_span, began)
    events = contributions(out, body.head, body.timed_edges, window, limit, encode, bindings)
    return with_events(out, events)


def with_events(out: QueryOutput, events: Coded) -> QueryOutput:
    """``out`` with its rows' ``events`` beside their ``values``."""
    extra = dict(out.extra)
    values = extra.pop("values")
    return replace(out, extra={"values": values, "events": events, **extra})
