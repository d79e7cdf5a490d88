"""Extending prefixes through time: the range and endpoint stages of a range step.

A :class:`~monitor.plan.planner.RangeStep` binds an edge variable ``u`` from the events of a
bound vertex whose time lies within a gap of a bound anchor event, then the far end of ``u``'s
event. The index keeps those events by vertex and time bucket (``R{S}#by_src(x, bucket, eid)``,
:mod:`monitor.index.event_relations`); the range ``anchor.ts + [low, high]`` covers a few
consecutive buckets, so a prefix is probed once per bucket and its proposals are the events of
those buckets (a superset of the range: the stage's join filters hold the predicates exactly).

Both sources answer as an adjacency source does (probe, count, propose, contains) over whole
batches, so the stage runner counts, proposes and intersects with them like any extender.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from core.times import TIME_FIELD, bucket_number
from monitor.engine.prefixes import Prefixes
from monitor.index.adjacency import AdjacencyView, Probe
from monitor.index.levels import I32, I64
from monitor.plan.plan import EndpointExtender, RangeExtender

if TYPE_CHECKING:  # extend.py imports this module for its sources
    from monitor.engine.extend import IndexReader


@dataclass(frozen=True)
class RangeProbe:
    """Per prefix, the probes of its ``per_prefix`` buckets (row-major in ``inner``)."""

    inner: Probe
    per_prefix: int

    def __len__(self) -> int:
        return len(self.inner) // self.per_prefix

    def __getitem__(
        self, rows: npt.NDArray[np.integer] | npt.NDArray[np.bool_] | slice
    ) -> RangeProbe:
        picked = np.arange(len(self))[rows]
        inner = (picked[:, None] * self.per_prefix + np.arange(self.per_prefix)).reshape(-1)
        return RangeProbe(self.inner[inner], self.per_prefix)


class RangeSource:
    """The events of a bound vertex within the extender's time range of the anchor event."""

    def __init__(self, extender: RangeExtender, view: AdjacencyView, index: IndexReader):
        self.extender = extender
        self.view = view
        self.index = index
        self.width = index.bucket_width(extender.relation)

    def probe(self, prefixes: Prefixes) -> RangeProbe:
        e = self.extender
        vertex = prefixes.columns[e.key[0]]
        ts = self.index.field_values(e.anchor_relation, TIME_FIELD, prefixes.columns[e.anchor])
        n = vertex.shape[0]
        if ts is None or ts.dtype != np.float64:
            ts = np.full(n, np.nan)
        timed = np.isfinite(ts)
        first = np.floor(np.where(timed, ts + e.low, 0.0) / self.width)
        last = np.floor(np.where(timed, ts + e.high, 0.0) / self.width)
        spans = (last - first).astype(np.int64) + 1
        per = max(1, int(spans.max(initial=1)))
        step = np.arange(per)
        buckets = first[:, None] + step  # n x per
        live = timed[:, None] & (step < spans[:, None])
        numbers = bucket_number(buckets).reshape(-1)
        keys = self.index.keys(e.relation, 2, [np.repeat(vertex, per), numbers])
        keys = np.where(live.reshape(-1), keys, 0)  # key 0 holds nothing
        return RangeProbe(self.view.probe(keys), per)

    def count(self, probe: RangeProbe) -> I64:
        counts: I64 = self.view.count(probe.inner).reshape(-1, probe.per_prefix).sum(axis=1)
        return counts

    def propose(self, probe: RangeProbe) -> tuple[I64, I32]:
        owner, values = self.view.propose(probe.inner)
        return owner // probe.per_prefix, values

    def contains(self, probe: RangeProbe, values: I32) -> npt.NDArray[np.bool_]:
        """Whether each event is in one of its prefix's buckets (a stage with a range
        extender has no other extender today: the stage runner's interface asks for it)."""
        per = probe.per_prefix
        found = self.view.contains(probe.inner.keys, np.repeat(values, per))
        return np.asarray(found.reshape(-1, per).any(axis=1), np.bool_)


class EndpointSource:
    """One end of each bound event: the far vertex of a range step."""

    def __init__(self, extender: EndpointExtender, index: IndexReader) -> None:
        self.extender = extender
        self.index = index

    def probe(self, prefixes: Prefixes) -> Probe:
        return Probe(prefixes.columns[self.extender.key[0]], None, None)

    def count(self, probe: Probe) -> I64:
        return np.ones(len(probe), np.int64)

    def propose(self, probe: Probe) -> tuple[I64, I32]:
        ends = self.index.endpoints(self.extender.relation, self.extender.position, probe.keys)
        return np.arange(len(probe), dtype=np.int64), ends

    def contains(self, probe: Probe, values: I32) -> npt.NDArray[np.bool_]:
        ends = self.index.endpoints(self.extender.relation, self.extender.position, probe.keys)
        return np.asarray(ends == values, np.bool_)
