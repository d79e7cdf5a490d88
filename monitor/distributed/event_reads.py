"""What the engine reads of events over shards, a round per question: fields for join filters,
an event's ends for a range step's far vertex, id slots for consolidation by identity, and the
time orders' ranges (:mod:`monitor.distributed.time_orders`).

Each question goes to the shards of the events asked (an eid lives on ``eid % S``) and the
answers are put back in the batch's order. Field values come back in a form every shard's answers
compare in: numbers, booleans, slots and vertex ids as they are, strings as the strings, which
are given codes here, consistent within an epoch (:meth:`EventReads.clear` starts the next).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from monitor.distributed.routing import Split, proposals, scattered
from monitor.index.levels import I32, I64
from monitor.index.texts import unique_strings
from monitor.index.time_kernels import F64
from monitor.plan.cut import Cut

if TYPE_CHECKING:
    from monitor.distributed.sharded import ShardedIndex


class EventReads:
    """The events' fields, ends, slots and time orders, read from the shards."""

    def __init__(self, index: ShardedIndex) -> None:
        self.index = index
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        """A new epoch: string field values take new codes."""
        self._strings: dict[str, int] = {}

    def field_values(self, relation: str, name: str, eids: I32) -> npt.NDArray[Any] | None:
        """The field ``name`` of the events at ``eids`` (None: no event has it), comparable
        across shards: numbers, booleans, global slots and vertex ids as they are, strings as
        codes this epoch gives them."""
        answers = self._round("event_fields_many", eids, lambda part: (relation, name, part))
        kinds = {kind for _, (kind, _) in answers if kind != "absent"}
        if not kinds:
            return None
        (kind,) = kinds
        n = eids.shape[0]
        if kind == "string":
            out = np.full(n, -1, np.int64)
            for rows, (_, values) in answers:
                if values is not None:
                    out[rows] = self._codes(values)
            return out
        dtype = {"number": np.float64, "bool": np.int8}.get(kind, np.int64)
        absent = np.nan if kind == "number" else -1
        values = np.full(n, absent, dtype)
        for rows, (_, found) in answers:
            if found is not None:
                values[rows] = found
        return values

    def _codes(self, strings: npt.NDArray[Any]) -> I64:
        present = np.flatnonzero(strings != None)  # noqa: E711 (elementwise on objects)
        out = np.full(strings.shape[0], -1, np.int64)
        if present.shape[0]:
            unique, inverse = unique_strings(strings[present])
            with self._lock:  # (delta queries sharing rounds ask from threads)
                table = np.array([self._strings.setdefault(s, len(self._strings)) for s in unique])
            out[present] = table[inverse]
        return out

    def endpoints(self, relation: str, position: int, eids: npt.NDArray[np.integer]) -> I32:
        answers = self._round("event_ends_many", eids, lambda part: (relation, position, part))
        ends: I32 = scattered(answers, eids.shape[0], np.int32)
        return ends

    def slots(self, relation: str, eids: I32) -> I32:
        """The global slot of each event's id."""
        answers = self._round("event_slots_many", eids, lambda part: (relation, part))
        slots: I32 = scattered(answers, eids.shape[0], np.int64)
        return slots

    def _round(
        self, method: str, eids: npt.NDArray[np.integer], request: Any
    ) -> list[tuple[npt.NDArray[np.intp], Any]]:
        """One round: ``eids`` split by shard, ``request(part)`` to each; the answers with the
        rows they are of."""
        count = self.index.shards.count
        split = Split(eids, count)
        parts = [split.part(s) for s in range(count)]
        args = [None if p is None else ([request(eids[p].astype(np.int32))],) for p in parts]
        answers = self.index.shards.call(method, args)
        return [(p, a[0]) for p, a in zip(parts, answers, strict=True) if p is not None]

    def time_view(self, name: str, cut: Cut) -> ShardedTimeView:
        return ShardedTimeView(self.index, name, cut)


class TimeQueries:
    """A batch of range queries of a time order: each vertex's events in ``[lo, hi]``."""

    def __init__(self, vertices: npt.NDArray[np.integer], lo: F64, hi: F64) -> None:
        self.vertices = vertices.astype(np.int32)
        self.lo = lo
        self.hi = hi

    def __len__(self) -> int:
        return int(self.vertices.shape[0])

    def __getitem__(self, rows: Any) -> TimeQueries:
        return TimeQueries(self.vertices[rows], self.lo[rows], self.hi[rows])


class ShardedTimeView:
    """A time order under one cut, over the shards of its vertices: each question a round."""

    def __init__(self, index: ShardedIndex, name: str, cut: Cut) -> None:
        self.index = index
        self.head = (name, cut)

    def probe(self, vertices: npt.NDArray[np.integer], lo: F64, hi: F64) -> TimeQueries:
        return TimeQueries(vertices, lo, hi)

    def _round(
        self, method: str, queries: TimeQueries, extra: tuple[npt.NDArray[Any], ...] = ()
    ) -> list[tuple[npt.NDArray[np.intp], Any]]:
        count = self.index.shards.count
        split = Split(queries.vertices, count)
        parts = [split.part(s) for s in range(count)]
        args = [
            None
            if p is None
            else (
                [
                    (
                        *self.head,
                        queries.vertices[p],
                        queries.lo[p],
                        queries.hi[p],
                        *(x[p] for x in extra),
                    )
                ],
            )
            for p in parts
        ]
        answers = self.index.shards.call(method, args)
        return [(p, a[0]) for p, a in zip(parts, answers, strict=True) if p is not None]

    def count(self, queries: TimeQueries) -> I64:
        counts: I64 = scattered(self._round("time_count_many", queries), len(queries), np.int64)
        return counts

    def propose(self, queries: TimeQueries) -> tuple[I64, I32]:
        return proposals(self._round("time_propose_many", queries), len(queries))

    def contains(
        self, queries: TimeQueries, owner: npt.NDArray[np.integer], eids: I32
    ) -> npt.NDArray[np.bool_]:
        found: npt.NDArray[np.bool_] = scattered(
            self._round("time_contains_many", queries[owner], (eids,)), eids.shape[0], np.bool_
        )
        return found
