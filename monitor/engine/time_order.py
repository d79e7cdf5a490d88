"""Extending prefixes through time: the range and endpoint stages of a range step.

A :class:`~monitor.plan.planner.RangeStep` binds an edge variable ``u`` from the events of a
bound vertex whose time lies within a gap of a bound anchor event, then the far end of ``u``'s
event. The index keeps those events by vertex in time order (``R{S}#by_src``,
:mod:`monitor.index.time_index`): the range ``anchor.ts + [low, high]`` of a prefix is two
binary searches in its vertex's events, and its proposals are exactly the events in it: the
bounds it computes as a filter would are not filtered again (``RangeExtender.holds``), the
stage's join filters hold the others, strict ones included. Other bound events' times narrow
the range where the query's predicates bound it more tightly through them
(:class:`~monitor.plan.plan.Narrowing`: a round trip's hops back from its seed all lie after
the seed's time minus the window), a little wider than exactly, as their filters still test.

Both sources answer as an adjacency source does (probe, count, propose, contains) over whole
batches, so the stage runner counts, proposes and intersects with them like any extender.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from core.times import TIME_FIELD
from monitor.engine.prefixes import Prefixes
from monitor.index.adjacency import Probe
from monitor.index.levels import I32, I64
from monitor.index.time_index import TimeIndexView, TimeProbe
from monitor.index.time_kernels import F64
from monitor.plan.plan import EndpointExtender, RangeExtender

if TYPE_CHECKING:  # extend.py imports this module for its sources
    from monitor.engine.extend import IndexReader

#: A narrowing's ends are widened by this share of their size (and as much absolutely): a sum
#: of two times or offsets rounds by 2**-53 of it, a chain of a query's filters by a few such.
MARGIN = 2.0**-40


class RangeSource:
    """The events of a bound vertex within the extender's time range of the anchor event."""

    def __init__(self, extender: RangeExtender, view: TimeIndexView, index: IndexReader):
        self.extender = extender
        self.view = view
        self.index = index

    def probe(self, prefixes: Prefixes) -> TimeProbe:
        e = self.extender
        vertex = prefixes.columns[e.key[0]]
        ts = self._times(e.anchor_relation, prefixes.columns[e.anchor])
        lo, hi = ts + e.low, ts + e.high
        if e.open_low:  # (the next float up: ``> lo`` exactly, as the filter it holds)
            np.nextafter(lo, np.inf, out=lo)
        if e.open_high:
            np.nextafter(hi, -np.inf, out=hi)
        for n in e.narrowing:
            # (each end widened by far more than a chain of rounded sums can be off by; a
            # NaN time makes the range empty, as its filters would fail)
            at = self._times(n.anchor_relation, prefixes.columns[n.anchor])
            if math.isfinite(n.low):
                end = at + n.low
                np.maximum(lo, end - (np.abs(end) * MARGIN + MARGIN), out=lo)
            if math.isfinite(n.high):
                end = at + n.high
                np.minimum(hi, end + (np.abs(end) * MARGIN + MARGIN), out=hi)
        return self.view.probe(vertex, lo, hi)

    def _times(self, relation: str, eids: I32) -> F64:
        """The times of events ``eids`` (NaN: none; no event has a time: nothing is in range)."""
        ts = self.index.field_values(relation, TIME_FIELD, eids)
        if ts is None or ts.dtype != np.float64:
            return np.full(eids.shape[0], np.nan)
        times: F64 = ts
        return times

    def count(self, probe: TimeProbe) -> I64:
        return self.view.count(probe)

    def propose(self, probe: TimeProbe) -> tuple[I64, I32]:
        return self.view.propose(probe)

    def contains(self, probe: TimeProbe, values: I32) -> npt.NDArray[np.bool_]:
        """Whether each event is in its prefix's range (a stage with a range extender has no
        other extender today: the stage runner's interface asks for it)."""
        return self.view.contains(probe, np.arange(len(probe)), values)


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
