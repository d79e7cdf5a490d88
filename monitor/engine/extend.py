"""Prefix extension: one stage of a plan, applied to a whole batch of prefixes.

The paper's three operations on every extender of the stage's variable: each extender *counts*
the values it would propose for every prefix; each prefix goes to the extender with the smallest
count, which *proposes* them; every other extender *intersects* (keeps the proposals it holds).
Checks and comparisons then drop the prefixes that fail them. All of it is array work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from core.fields import affine, compare
from monitor.engine.field_joins import keep_joined
from monitor.engine.prefixes import Candidates, Prefixes
from monitor.engine.shared_keys import SharedProbe, distinct_keys, distinct_probes, expanded
from monitor.engine.time_order import EndpointSource, RangeSource
from monitor.index import kernels
from monitor.index.adjacency import AdjacencyView, Probe
from monitor.index.field_columns import NumberField
from monitor.index.intersect import fusable, intersect
from monitor.index.levels import I32, I64
from monitor.index.time_index import TimeIndexView
from monitor.index.unique import first_rows
from monitor.plan.cut import Cut
from monitor.plan.plan import (
    Check,
    Comparison,
    EndpointExtender,
    Extender,
    FieldFilter,
    RangeExtender,
    Stage,
)

#: Per extender of a stage, its probe of every prefix (for an adjacency: the key, with its
#: level's range).
Keys = list[Any]


def fewest(counts: Sequence[I64]) -> tuple[npt.NDArray[np.intp], I64]:
    """For every prefix, the first extender with the smallest count, and that count (one
    comparison per extender: ``np.argmin`` over a stack's first axis strides, ten times slower)."""
    smallest = counts[0].copy()
    winner = np.zeros(smallest.shape[0], np.intp)
    for e, count in enumerate(counts[1:], start=1):
        fewer = count < smallest
        winner[fewer] = e
        np.minimum(smallest, count, out=smallest)
    return winner, smallest


class View(Protocol):
    """One adjacency as a cut sees it: :class:`~monitor.index.adjacency.AdjacencyView`, or the
    partitioned index's view over its shards (:mod:`monitor.distributed.sharded`)."""

    def probe(self, keys: npt.NDArray[np.integer]) -> Probe: ...

    def count(self, keys: npt.NDArray[np.integer] | Probe) -> I64: ...

    def propose(self, keys: npt.NDArray[np.integer] | Probe) -> tuple[I64, I32]: ...

    def contains(
        self, keys: npt.NDArray[np.integer] | Probe, values: npt.NDArray[np.integer]
    ) -> npt.NDArray[np.bool_]: ...


class IndexReader(Protocol):
    """What evaluation needs of an index."""

    def view(self, relation: str, position: int, cut: Cut) -> View: ...

    def keys(self, relation: str, position: int, columns: Sequence[I32]) -> I64: ...

    def tuples(self, relation: str, cut: Cut = ...) -> list[I32]: ...

    def ranks(self, columns: Sequence[I32]) -> list[I64]:
        """Keys ordering the vertices of ``columns`` as their external ids (comparable within
        one call)."""
        ...

    def field_values(self, relation: str, name: str, eids: I32) -> npt.NDArray[Any] | None: ...

    def number_field(self, relation: str, name: str) -> NumberField | None:
        """A number field as compiled loops read it (None: the filter gathers it)."""
        ...

    def time_view(self, relation: str, cut: Cut) -> TimeIndexView: ...

    def endpoints(self, relation: str, position: int, eids: npt.NDArray[np.integer]) -> I32: ...


class Source(Protocol):
    """One extender of a stage, bound to what it reads: it probes a batch of prefixes once,
    then counts, proposes and intersects from the probe (rows of it for a part of the batch)."""

    def probe(self, prefixes: Prefixes) -> Any: ...

    def count(self, probe: Any) -> I64: ...

    def propose(self, probe: Any) -> tuple[I64, I32]: ...

    def contains(self, probe: Any, values: I32) -> npt.NDArray[np.bool_]: ...


class AdjacencySource:
    """An extender over an atom's adjacency, as one cut sees it."""

    def __init__(self, extender: Extender, view: View, index: IndexReader) -> None:
        self.extender = extender
        self.view = view
        self.index = index

    def probe(self, prefixes: Prefixes) -> Probe:
        return self.view.probe(adjacency_keys(self.extender, prefixes, self.index))

    def count(self, probe: Probe) -> I64:
        return self.view.count(probe)

    def propose(self, probe: Probe) -> tuple[I64, I32]:
        return self.view.propose(probe)

    def contains(self, probe: Probe, values: I32) -> npt.NDArray[np.bool_]:
        return self.view.contains(probe, values)


def source(extender: Extender, index: IndexReader) -> Source:
    """The source an extender reads: its adjacency, or a range step's time index or event."""
    if isinstance(extender, EndpointExtender):
        return EndpointSource(extender, index)
    if isinstance(extender, RangeExtender):
        return RangeSource(extender, index.time_view(extender.relation, extender.cut), index)
    return AdjacencySource(
        extender, index.view(extender.relation, extender.position, extender.cut), index
    )


def adjacency_keys(
    extender: Extender,
    prefixes: Prefixes,
    index: IndexReader,
    rows: npt.NDArray[np.integer] | None = None,
) -> npt.NDArray[np.integer]:
    """The adjacency key of every prefix (or of those at ``rows``) for an extender: its other
    positions' values."""
    columns = [prefixes.columns[c] for c in extender.key]
    if rows is not None:
        columns = [c[rows] for c in columns]
    if extender.arity == 2:
        return columns[0]
    if not columns:
        return np.zeros(len(prefixes) if rows is None else rows.shape[0], np.int64)
    return index.keys(extender.relation, extender.position, columns)


class StageRunner:
    """A :class:`~monitor.plan.plan.Stage` bound to the index views its extenders read."""

    def __init__(self, stage: Stage, index: IndexReader) -> None:
        self.stage = stage
        self.index = index
        self.sources = [source(e, index) for e in stage.extenders]
        self.comparisons = Filters((), stage.comparisons, index)
        self.checks = Filters(stage.checks, (), index, stage.fields)
        #: Two extenders over adjacencies keyed by one vertex each: their probes and counts
        #: are shared by the prefixes with equal keys (:mod:`monitor.engine.shared_keys`).
        self.paired = len(self.sources) == 2 and all(
            isinstance(s, AdjacencySource) and s.extender.arity == 2 for s in self.sources
        )
        #: Two adjacencies of this process's index, narrow: proposed and intersected in one
        #: pass (:mod:`monitor.index.intersect`).
        self.fused = _fused_views(self.sources)

    def _shared_counts(self, prefixes: Prefixes) -> tuple[npt.NDArray[np.intp], I64, Keys] | None:
        """:meth:`counts` probed and counted once per distinct pair of keys (None: they do
        not repeat enough); the keys are :class:`SharedProbe` s, which :meth:`extend` reads."""
        sources = [s for s in self.sources if isinstance(s, AdjacencySource)]
        columns = [adjacency_keys(s.extender, prefixes, self.index) for s in sources]
        shared = distinct_keys(columns)
        if shared is None:
            return None
        first, inverse = shared
        probes = [s.view.probe(c[first]) for s, c in zip(sources, columns, strict=True)]
        winner, counts = fewest([s.count(p) for s, p in zip(sources, probes, strict=True)])
        keys: Keys = [SharedProbe(p, inverse) for p in probes]
        return winner[inverse], counts[inverse], keys

    def counts(self, prefixes: Prefixes) -> tuple[npt.NDArray[np.intp], I64, Keys]:
        """For every prefix, the extender with the fewest values, and that number; and each
        extender's adjacency keys of the prefixes with their ranges in its level, which
        :meth:`extend` reads again (a tuple key is a hash lookup, a range two binary searches:
        once a stage, not once a count and once a proposal)."""
        if self.paired:
            shared = self._shared_counts(prefixes)
            if shared is not None:
                return shared
        keys = [s.probe(prefixes) for s in self.sources]
        if len(self.sources) == 1:
            return np.zeros(len(prefixes), np.intp), self.sources[0].count(keys[0]), keys
        return (*fewest([s.count(k) for k, s in zip(keys, self.sources, strict=True)]), keys)

    def extend(self, prefixes: Prefixes, winner: npt.NDArray[np.intp], keys: Keys) -> Prefixes:
        """Every extension of every prefix by the stage's variable that passes the stage
        (``keys``: :meth:`counts`'s of these prefixes); intersected once per distinct tuple
        of keys where they repeat (:mod:`monitor.engine.shared_keys`)."""
        shared = _distinct(keys)
        if shared is None:
            rows, values = self._proposed(winner, keys, prefixes)
        else:
            first, inverse, probes = shared
            found, values = self._proposed(winner[first], probes, None)
            rows, values = expanded(found, values, inverse, first.shape[0])
            if self.comparisons.comparisons:
                keep = self.comparisons.compare(Candidates(prefixes, rows, values))
                rows, values = rows[keep], values[keep]
        candidates = Candidates(prefixes, rows, values)
        if self.checks.active:
            candidates = candidates.take(self.checks.passing(candidates))
        return candidates.extended()

    def _proposed(
        self, winner: npt.NDArray[np.intp], keys: Keys, prefixes: Prefixes | None
    ) -> tuple[npt.NDArray[np.integer], I32]:
        """The rows (of ``keys``) and values that each prefix's chosen extender proposes and
        every other holds; ``prefixes``' comparisons drop candidates before the intersection
        (cheap), when given."""
        if self.fused is not None and all(isinstance(k, Probe) for k in keys):
            return self._intersected(self.fused, winner, keys, prefixes)
        single = len(self.sources) == 1
        all_rows: list[npt.NDArray[np.integer]] = []
        all_values: list[I32] = []
        for e, chosen in enumerate(self.sources):
            if single:  # (every prefix: its probe as it is, rows as proposed)
                rows, values = chosen.propose(keys[e])
            else:
                rows = np.flatnonzero(winner == e)
                if not rows.shape[0]:
                    continue
                owner, values = chosen.propose(keys[e][rows])
                rows = rows[owner]
            if prefixes is not None and self.comparisons.comparisons:
                keep = self.comparisons.compare(Candidates(prefixes, rows, values))
                rows, values = rows[keep], values[keep]
            for f, other in enumerate(self.sources):
                if f == e or not rows.shape[0]:
                    continue
                keep = other.contains(keys[f][rows], values)
                rows, values = rows[keep], values[keep]
            all_rows.append(rows)
            all_values.append(values)
        if not all_rows:
            return np.empty(0, np.int64), np.empty(0, np.int32)
        if len(all_rows) == 1:
            return all_rows[0], all_values[0]
        return np.concatenate(all_rows), np.concatenate(all_values)

    def _intersected(
        self,
        views: tuple[AdjacencyView, AdjacencyView],
        winner: npt.NDArray[np.intp],
        keys: Keys,
        prefixes: Prefixes | None,
    ) -> tuple[npt.NDArray[np.integer], I32]:
        """:meth:`_proposed` of two adjacencies in one pass, the comparisons after it."""
        a, b = views
        rows, values = intersect(
            (a.offsets, a.targets, a.delta),
            (keys[0].keys, *keys[0].ranges()),
            (b.offsets, b.targets, b.delta),
            (keys[1].keys, *keys[1].ranges()),
            winner == 1,
        )
        if prefixes is not None and self.comparisons.comparisons and rows.shape[0]:
            keep = self.comparisons.compare(Candidates(prefixes, rows, values))
            rows, values = rows[keep], values[keep]
        return rows, values


def _fused_views(sources: Sequence[Source]) -> tuple[AdjacencyView, AdjacencyView] | None:
    """The two adjacency views of a stage that :func:`~monitor.index.intersect.intersect`
    takes (None: other sources, a partitioned index's views, wide CSRs, or no compiled
    loops)."""
    views = [s.view for s in sources if isinstance(s, AdjacencySource)]
    if len(sources) != 2 or kernels.KERNELS != "numba":
        return None
    local = [v for v in views if isinstance(v, AdjacencyView)]
    if len(local) != 2 or not fusable(local[0].offsets, local[1].offsets):
        return None
    return local[0], local[1]


def _distinct(
    keys: Keys,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], Keys] | None:
    """Where the prefixes repeat their tuples of keys: the first prefix of each tuple, every
    prefix's tuple, and the tuples' probes (from the counts' :class:`SharedProbe` s, or
    found among the probes themselves); None where they do not."""
    if keys and isinstance(keys[0], SharedProbe):
        first, inverse = first_rows(keys[0].of)
        tuples = keys[0].of[first]
        return first, inverse, [k.probe[tuples] for k in keys]
    shared = distinct_probes(keys)
    if shared is None:
        return None
    return shared[0], shared[1], [k[shared[0]] for k in keys]


def last_key(index: IndexReader, relation: str, columns: Sequence[I32]) -> npt.NDArray[np.integer]:
    """The key under which a tuple's last position is stored (its other positions: none,
    one vertex, or a tuple key): what membership lookups and tuple ids use."""
    last = len(columns) - 1
    if last == 0:
        return np.zeros(columns[0].shape[0], np.int64)
    if last == 1:
        return columns[0]
    return index.keys(relation, last, list(columns[:-1]))


class Filters:
    """Checks (membership of fully bound atoms), comparisons, join filters and guards
    (extenders of later stages that must count a value), applied to whole batches."""

    def __init__(
        self,
        checks: Sequence[Check],
        comparisons: Sequence[Comparison],
        index: IndexReader,
        fields: Sequence[FieldFilter] = (),
        guards: Sequence[Extender] = (),
    ) -> None:
        self.checks = [(c, index.view(c.relation, len(c.columns) - 1, c.cut)) for c in checks]
        self.comparisons = list(comparisons)
        self.fields = list(fields)
        self.guards = [(g, index.view(g.relation, g.position, g.cut)) for g in guards]
        self._index = index

    @property
    def active(self) -> bool:
        """Whether there is anything to filter by."""
        return bool(self.checks or self.comparisons or self.fields or self.guards)

    def __call__(self, prefixes: Prefixes) -> Prefixes:
        """The prefixes that pass every comparison, check, join filter and guard."""
        if not len(prefixes) or not self.active:
            return prefixes
        keep = self.passing(prefixes)
        for guard, view in self.guards:
            rows = np.flatnonzero(keep)
            keep[rows] = view.count(adjacency_keys(guard, prefixes, self._index, rows)) > 0
        return prefixes if keep.all() else prefixes.take(keep)

    def passing(self, batch: Prefixes | Candidates) -> npt.NDArray[np.bool_]:
        """Which rows of ``batch`` pass every comparison, check and join filter (not the
        guards); each reads only its columns, at the rows still kept."""
        keep = self.compare(batch)
        for check, view in self.checks:
            rows = np.flatnonzero(keep)
            cols = [batch.column(c, rows) for c in check.columns]
            keep[rows] = view.contains(last_key(self._index, check.relation, cols), cols[-1])
        for join in self.fields:
            if isinstance(batch, Candidates) and self._fused(keep, batch, join):
                continue
            rows = np.flatnonzero(keep)
            left, right = batch.column(join.left, rows), batch.column(join.right, rows)
            keep[rows] = self._join(join, left, right)
        return keep

    def _fused(self, keep: npt.NDArray[np.bool_], batch: Candidates, join: FieldFilter) -> bool:
        """``join`` applied to ``keep`` in one compiled pass (:mod:`~monitor.engine.field_joins`)
        where both of its fields are numbers the index holds; False where not applied."""
        left = self._index.number_field(join.left_relation, join.left_field)
        right = self._index.number_field(join.right_relation, join.right_field)
        return (
            left is not None and right is not None and keep_joined(keep, batch, join, left, right)
        )

    def _join(self, join: FieldFilter, left: I32, right: I32) -> npt.NDArray[np.bool_]:
        """Field comparison of the events in two columns (false where a field is absent)."""
        a = self._index.field_values(join.left_relation, join.left_field, left)
        b = self._index.field_values(join.right_relation, join.right_field, right)
        if a is None or b is None or a.dtype != b.dtype:
            return np.zeros(left.shape[0], np.bool_)
        return compare(a, join.op, affine(b, join.factor, join.offset))

    def compare(self, batch: Prefixes | Candidates) -> npt.NDArray[np.bool_]:
        """Which rows of ``batch`` pass every comparison (checks are not applied)."""
        keep = np.ones(len(batch), np.bool_)
        ordered: list[Comparison] = []
        for comparison in self.comparisons:
            if comparison.op == "!=":
                keep &= batch.column(comparison.left) != batch.column(comparison.right)
            else:
                ordered.append(comparison)
        if ordered:
            names = sorted({v for c in ordered for v in (c.left, c.right)})
            rank = dict(
                zip(names, self._index.ranks([batch.column(v) for v in names]), strict=True)
            )
            for comparison in ordered:
                keep &= _compare(rank[comparison.left], comparison.op, rank[comparison.right])
        return keep


def _compare(left: I64, op: str, right: I64) -> npt.NDArray[np.bool_]:
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    if op == ">=":
        return left >= right
    raise ValueError(f"unknown comparison {op!r}")
