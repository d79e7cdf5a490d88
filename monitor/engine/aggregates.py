"""Aggregates over a query's bindings, kept per group from the body's deltas (issue #35).

A query that ends with aggregate conditions (``count(distinct a) >= 10``, ``sum(t.amount) >
50000``) groups its body's bindings by its head's variables and reports a group when it starts
to satisfy every condition (+1) and when it stops (-1). The body's bindings are maintained as
for any query; what arrives here is each epoch's change of them, rows with a diff of +1 or -1.
The state is kept incrementally from those rows, never by enumerating a group's bindings:

- per group, the count of its live bindings and each ``sum``'s running total;
- for ``count(distinct v)``, the (group, value) pairs with multiplicities
  (:class:`~monitor.engine.group_values.PairCounts`, by a hash of the pair), so that a group's
  distinct values are counted as pairs appear and vanish; for ``min`` and ``max`` a
  :class:`~monitor.engine.group_values.Multiset` of them sorted by group then value, a group's
  least and greatest values the first and last of its run;
- with ``over D`` and events kept longer than ``D``, a :class:`Window` of the counted bindings.

Everything is whole-array work per epoch: a batch of rows is reduced to its net change per group
(``np.add.at`` over dense group ids) and per pair (their first rows by a compiled hash, not a
sort), and the pairs and the groups' keys are found in hash tables of them
(:class:`~monitor.index.hashtable.SlotTable`: one compiled probe per key), so that an epoch's
cost follows its rows, not the state's size. Only ``min`` and ``max`` keep a sorted multiset.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from monitor.engine.group_values import Multiset, PairCounts, Sums, grown, renumbered
from monitor.index.hashtable import SlotTable, mix
from monitor.index.unique import first_appearances

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Kind = Literal["count", "count_distinct", "sum", "min", "max"]

#: The comparison of an aggregate condition, by its operator.
COMPARE: Mapping[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "=": operator.eq,
    "!=": operator.ne,
}


@dataclass(frozen=True)
class Aggregate:
    """One condition, ``kind(argument) op threshold``: ``count`` is ``count(*)``, the others
    read one value per binding (a vertex or an event for ``count_distinct``, a number for
    ``sum``, ``min`` and ``max``). ``name`` is what the output calls its value."""

    kind: Kind
    op: str
    threshold: float
    name: str

    def holds(self, values: F64) -> npt.NDArray[np.bool_]:
        held: npt.NDArray[np.bool_] = COMPARE[self.op](values, self.threshold)
        return held


class KeyIds:
    """Dense ids for int64 keys, a new key the next id: each id's key in a column,
    found by a :class:`~monitor.index.hashtable.SlotTable` of the keys' hashes (one compiled
    probe per key; no sort of an epoch's keys, nor insertion into a sorted array)."""

    def __init__(self) -> None:
        self.keys: I64 = np.empty(0, np.int64)  # by id (beyond ``len(self)``: room)
        self._size = 0
        self._table = SlotTable()

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes) + self._table.nbytes

    def keep(self, live: npt.NDArray[np.bool_]) -> None:
        """Forget the ids not ``live`` (a mask over the ids) and number the others on from 0,
        in their order (:func:`renumbered`)."""
        self.keys = self.keys[: self._size][live[: self._size]]
        self._size = int(self.keys.shape[0])
        self._table = SlotTable()
        self._table.add(_hashes(self.keys), np.arange(self._size, dtype=np.int32), _none)

    def of(self, keys: I64) -> I64:
        """The id of each key; a key never seen gets the next id."""
        keys = keys.astype(np.int64, copy=False)
        found = self._table.find_values(_hashes(keys), self.keys, keys)
        ids = found.astype(np.int64)
        missing = np.flatnonzero(found < 0)
        if not missing.shape[0]:
            return ids
        fresh, inverse = first_appearances(keys[missing])
        known, count = self._size, int(fresh.shape[0])
        if known + count > self.keys.shape[0]:
            self.keys = grown(self.keys, max(known + count, 2 * self.keys.shape[0]))
        self.keys[known : known + count] = fresh
        self._size = known + count
        new = np.arange(known, known + count, dtype=np.int32)

        def existing() -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int32]]:
            return _hashes(self.keys[:known]), np.arange(known, dtype=np.int32)

        self._table.add(_hashes(fresh), new, existing)
        ids[missing] = new[inverse]
        return ids


def _hashes(keys: I64) -> npt.NDArray[np.uint64]:
    return mix(keys.view(np.uint64))


def _none() -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int32]]:
    return np.empty(0, np.uint64), np.empty(0, np.int32)


class GroupIds:
    """Dense ids for groups, rows of the head's vertex ids (one column each): one column is its
    own id space; two or more are paired left to right, each pair ``(id << 32) | vertex`` a key
    of a :class:`KeyIds`."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.pairs = [KeyIds() for _ in range(max(0, width - 1))]

    def of(self, columns: Sequence[I64]) -> I64:
        ids = np.asarray(columns[0], np.int64)
        for pairs, column in zip(self.pairs, columns[1:], strict=True):
            if len(column) and (int(ids.max()) >= 1 << 31 or int(column.max()) >= 1 << 32):
                raise OverflowError("a group key past 2**31 groups or 2**32 vertices")
            ids = pairs.of((ids << 32) | np.asarray(column, np.int64))
        return ids


@dataclass
class GroupChanges:
    """The groups that started (+1) or stopped (-1) satisfying the conditions in a batch, and
    each condition's value for them after it."""

    groups: I64
    diffs: I64
    values: dict[str, F64]

    def __len__(self) -> int:
        return int(self.groups.shape[0])


class AggregateState:
    """Per group: its live bindings' count, and what each condition needs."""

    def __init__(self, aggregates: Sequence[Aggregate]) -> None:
        self.aggregates = tuple(aggregates)
        names = [a.name for a in self.aggregates]
        if len(set(names)) != len(names):
            raise ValueError(f"aggregates need names of their own, got {names}")
        self.bindings: I64 = np.zeros(0, np.int64)
        self.sums = {a.name: Sums() for a in self.aggregates if a.kind == "sum"}
        self.distinct: dict[str, I64] = {
            a.name: np.zeros(0, np.int64) for a in self.aggregates if a.kind == "count_distinct"
        }
        self.multisets: dict[str, Multiset | PairCounts] = {
            a.name: PairCounts() if a.kind == "count_distinct" else Multiset(np.float64)
            for a in self.aggregates
            if a.kind in ("count_distinct", "min", "max")
        }

    @property
    def nbytes(self) -> int:
        arrays = [self.bindings, *self.distinct.values()]
        sums = sum(m.nbytes for m in self.sums.values())
        return sum(a.nbytes for a in arrays) + sums + sum(m.nbytes for m in self.multisets.values())

    def apply(
        self, groups: I64, arguments: Mapping[str, npt.NDArray[Any]], diffs: I64
    ) -> GroupChanges:
        """Apply one batch of binding changes: ``groups`` (ids from :class:`GroupIds`), each
        condition's argument per row (by the condition's name; none for ``count``), ``diffs``
        of +1 and -1. The groups whose satisfaction changed, with their values."""
        touched = distinct_ids(groups)
        self._grow(int(touched[-1]) + 1 if touched.shape[0] else 0)
        held_before = self._holds(touched)
        # (np.add.at: numpy 2's unbuffered add is a tenth of a float bincount over every group,
        # on its fast path only: values of the target's dtype; int32 into int64 is 15x slower)
        np.add.at(self.bindings, groups, diffs)
        for name, sums in self.sums.items():
            sums.add(groups, arguments[name], diffs)
        for name, multiset in self.multisets.items():
            values = arguments[name]
            if values.dtype.kind == "f" and np.isnan(values).any():  # (nor to min and max)
                has = ~np.isnan(values)
                change = multiset.apply(groups[has], values[has], diffs[has])
            else:
                change = multiset.apply(groups, values, diffs)
            if name in self.distinct:
                step = change.after.astype(np.int64) - change.before.astype(np.int64)
                np.add.at(self.distinct[name], change.groups, step)
        held_after = self._holds(touched)
        changed = held_before != held_after
        groups_changed = touched[changed]
        return GroupChanges(
            groups_changed,
            np.where(held_after[changed], 1, -1).astype(np.int64),
            self.values(groups_changed),
        )

    def values(self, groups: I64) -> dict[str, F64]:
        """Each condition's value for ``groups`` (NaN for a min or max of a group without
        bindings)."""
        out: dict[str, F64] = {}
        for a in self.aggregates:
            if a.kind == "count":
                out[a.name] = self.bindings[groups].astype(np.float64)
            elif a.kind == "sum":
                out[a.name] = self.sums[a.name].values(groups)
            elif a.kind == "count_distinct":
                out[a.name] = self.distinct[a.name][groups].astype(np.float64)
            else:
                multiset = self.multisets[a.name]
                assert isinstance(multiset, Multiset)
                least, greatest, some = multiset.ends(groups)
                value = (least if a.kind == "min" else greatest).astype(np.float64)
                out[a.name] = np.where(some, value, np.nan)
        return out

    def _holds(self, groups: I64) -> npt.NDArray[np.bool_]:
        holds = self.bindings[groups] > 0
        for a, values in zip(self.aggregates, self.values(groups).values(), strict=True):
            holds &= a.holds(values)
        return holds

    def keep(self, live: npt.NDArray[np.bool_]) -> None:
        """Keep the groups ``live`` (a mask over the ids in use; none the others hold a pair
        of), numbered on from 0 in their order: the multisets stay sorted."""
        n = live.shape[0]
        self._grow(n)  # (ids given to groups whose rows were never counted)
        new = renumbered(live)
        self.bindings = self.bindings[:n][live]
        self.distinct = {k: v[:n][live] for k, v in self.distinct.items()}
        for sums in self.sums.values():
            sums.keep(live)
        for multiset in self.multisets.values():
            multiset.renumber(new)

    def _grow(self, groups: int) -> None:
        """Room for group ids below ``groups``."""
        if groups <= len(self.bindings):
            return
        size = max(groups, 2 * len(self.bindings))
        self.bindings = grown(self.bindings, size)
        for sums in self.sums.values():
            sums.grow(size)
        self.distinct = {k: grown(v, size) for k, v in self.distinct.items()}


@dataclass
class Rows:
    """Binding changes for :meth:`AggregateState.apply`: their groups, arguments and diffs."""

    groups: I64
    arguments: dict[str, npt.NDArray[Any]]
    diffs: I64

    def __len__(self) -> int:
        return int(self.groups.shape[0])


class Window:
    """The bindings an aggregate ``over D`` counts: those whose earliest event lies within
    ``span`` of the watermark (``time + span >= watermark``, as an event with a retention of
    ``span`` stays: the watermark an epoch begins with). Each live one is kept as its key
    (the binding's hash), group, earliest time and arguments, sorted by key, so that the body's
    retraction of a binding finds it, and a binding whose time leaves the window is retracted
    from the aggregates here."""

    def __init__(self, span: float, names: Sequence[str]) -> None:
        self.span = span
        self.keys: I64 = np.empty(0, np.int64)
        self.groups: I64 = np.empty(0, np.int64)
        self.times: F64 = np.empty(0, np.float64)
        self.arguments: dict[str, npt.NDArray[Any]] = {n: np.empty(0) for n in names}

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    @property
    def nbytes(self) -> int:
        arrays = [self.keys, self.groups, self.times, *self.arguments.values()]
        return sum(a.nbytes for a in arrays)

    def admit(self, keys: I64, times: F64, rows: Rows, watermark: float) -> Rows:
        """The body's binding changes, as the aggregates count them: an insert already outside
        the window is not counted, a retraction of a binding that left it is not either."""
        return _rows_at(rows, self.counted(keys, times, rows, watermark))

    def counted(self, keys: I64, times: F64, rows: Rows, watermark: float) -> npt.NDArray[np.bool_]:
        """:meth:`admit`'s rows as a mask of ``rows``, the window updated."""
        inserted = rows.diffs > 0
        counted = inserted & (times + self.span >= watermark)
        # Retractions first: a binding whose event was replaced in the epoch by one of the same
        # id (a body's key is its external identity) leaves, then comes back with new fields.
        gone = np.flatnonzero(~inserted)
        at = np.searchsorted(self.keys, keys[gone])
        held = at < len(self)
        held[held] = self.keys[at[held]] == keys[gone][held]
        counted[gone[held]] = True
        self._drop(at[held])
        new = np.flatnonzero(counted & inserted)
        self._add(keys[new], rows.groups[new], times[new], _at(rows.arguments, new))
        return counted

    def expire(self, watermark: float) -> Rows:
        """Retract the bindings whose earliest event left the window at ``watermark``."""
        out = np.flatnonzero(self.times + self.span < watermark)
        rows = Rows(
            self.groups[out],
            {n: a[out] for n, a in self.arguments.items()},
            np.full(out.shape[0], -1, np.int64),
        )
        self._drop(out)
        return rows

    def _add(
        self, keys: I64, groups: I64, times: F64, arguments: dict[str, npt.NDArray[Any]]
    ) -> None:
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        at = np.searchsorted(self.keys, keys)
        if (at < len(self)).any() and (self.keys[at[at < len(self)]] == keys[at < len(self)]).any():
            raise ValueError("a binding inserted twice into a window")
        self.keys = np.insert(self.keys, at, keys)
        self.groups = np.insert(self.groups, at, groups[order])
        self.times = np.insert(self.times, at, times[order])
        self.arguments = {
            n: np.insert(a, at, arguments[n][order]) if a.shape[0] else arguments[n][order]
            for n, a in self.arguments.items()
        }

    def renumber(self, new: I64) -> None:
        """Each binding's group ``g`` becomes ``new[g]``."""
        self.groups = new[self.groups]

    def _drop(self, rows: I64) -> None:
        if rows.shape[0] == 0:
            return
        self.keys = np.delete(self.keys, rows)
        self.groups = np.delete(self.groups, rows)
        self.times = np.delete(self.times, rows)
        self.arguments = {n: np.delete(a, rows) for n, a in self.arguments.items()}


def distinct_ids(ids: I64) -> I64:
    """``np.unique(ids)`` of dense ids (below their count, or about): a mask, not a sort."""
    if not ids.shape[0]:
        return ids
    seen = np.zeros(int(ids.max()) + 1, np.bool_)
    seen[ids] = True
    return np.flatnonzero(seen)


def _at(arrays: Mapping[str, npt.NDArray[Any]], rows: I64) -> dict[str, npt.NDArray[Any]]:
    return {n: a[rows] for n, a in arrays.items()}


def _rows_at(rows: Rows, keep: npt.NDArray[np.bool_]) -> Rows:
    return Rows(
        rows.groups[keep], {n: a[keep] for n, a in rows.arguments.items()}, rows.diffs[keep]
    )
