"""The time orders over shards: per selection read by time, its events by vertex in time order
(``R{S}#by_src``, ``R{S}#by_dst``), each vertex's on the shard that owns it (``vertex % S``).

A shard keeps a :class:`~monitor.index.time_index.TimeIndex` per order over its vertices'
entries (:class:`ShardTimeOrders`): staged from each epoch's event changes with the epoch's
horizon, loaded whole after a restore (from the events' shards), renumbered after a store's
compaction. The driver's ``ShardedTimeView`` is what a range step reads: each batch of
range queries split by vertex, one round per count, proposal or intersection
(:mod:`monitor.distributed.event_reads`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from monitor.index.levels import I8, I32, I64
from monitor.index.time_index import TimeIndex, TimeProbe
from monitor.index.time_kernels import F64, time_ranks
from monitor.plan.cut import Cut


class ShardTimeOrders:
    """The time orders' entries of the vertices a shard owns, under their global ids (a time
    index is sorted by vertex and holds nothing per vertex, so ids need not be dense)."""

    def __init__(self) -> None:
        self.orders: dict[str, TimeIndex] = {}

    def index(self, name: str) -> TimeIndex:
        if name not in self.orders:
            self.orders[name] = TimeIndex()
        return self.orders[name]

    def stage(
        self,
        name: str,
        vertex: I32,
        times: F64,
        eids: I32,
        diff: I8,
        horizon: float,
        expired: int,
    ) -> None:
        self.index(name).stage(vertex, times, eids, diff, time_ranks(times, eids), horizon, expired)

    def probe(self, name: str, cut: Cut, vertices: I32, lo: F64, hi: F64) -> TimeProbe:
        return self.index(name).view(cut).probe(vertices, lo, hi)

    def count(self, name: str, cut: Cut, vertices: I32, lo: F64, hi: F64) -> I64:
        return self.probe(name, cut, vertices, lo, hi).counts

    def propose(self, name: str, cut: Cut, vertices: I32, lo: F64, hi: F64) -> tuple[I32, I32]:
        """Each query's events, each query's together in order: how many per query, and the
        eids."""
        view = self.index(name).view(cut)
        probe = view.probe(vertices, lo, hi)
        owner, eids = view.propose(probe)
        order = np.argsort(owner, kind="stable")  # (each query's together, in order)
        counts = np.bincount(owner, minlength=vertices.shape[0]).astype(np.int32)
        return counts, eids[order]

    def contains(
        self, name: str, cut: Cut, vertices: I32, lo: F64, hi: F64, eids: I32
    ) -> npt.NDArray[np.bool_]:
        view = self.index(name).view(cut)
        probe = view.probe(vertices, lo, hi)
        return view.contains(probe, np.arange(vertices.shape[0]), eids)

    def renumber(self, name: str, old: I32, new: I32) -> None:
        """Entries of events whose eid changed take the new one (committed state only)."""
        index = self.index(name)
        if not old.shape[0] or not len(index.base) + len(index.committed):
            return
        vertex, times, eids = index.entries(Cut.OLD)
        order = np.argsort(old)
        at = np.minimum(np.searchsorted(old[order], eids), old.shape[0] - 1)
        hit = old[order][at] == eids
        if hit.any():
            eids = eids.copy()
            eids[hit] = new[order][at[hit]]
            self.load(name, vertex, times, eids)

    def load(self, name: str, vertex: I32, times: F64, eids: I32) -> None:
        """Replace an order's entries by these (committed, all alive)."""
        self.index(name).load(vertex, times, eids, time_ranks(times, eids))

    def commit(self) -> None:
        for index in self.orders.values():
            index.commit()

    def abort(self) -> None:
        for index in self.orders.values():
            index.abort()

    @property
    def nbytes(self) -> int:
        return sum(index.nbytes for index in self.orders.values())
