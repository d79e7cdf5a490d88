"""A multi-version time index: per vertex, its events in time order.

What a range step reads (:mod:`monitor.engine.time_order`): the events of a bound vertex whose
time lies in a range, ``transfer#by_src`` for the transfers out of an account, ``#by_dst`` for
those into it. Entries are ``(vertex, time, eid)``, ordered by vertex, then time, then eid, in
the three levels of an adjacency (:mod:`monitor.index.adjacency`):

- *compacted* (the base): the entries sorted, 17 bytes an event (its vertex, 8-byte time, eid
  and a diff of ``+1``), nothing per vertex without events;
- *committed*: the sorted entries changed since the last compaction, each with a diff (``+1``
  added, ``-1`` removed), merged into the base once it passes a share of it;
- *uncommitted*: the epoch's changes, which a ``NEW`` cut sees and an ``OLD`` one does not.

Events of a window expire in time order, so the index does not remove them one by one: each cut
has a *horizon*, the earliest time alive at its watermark
(:func:`~monitor.index.window.first_live`), and a query's range starts there. Expired entries
stay until the next compaction drops everything below the committed horizon; an epoch stages
only its inserts and the events deleted by id (half the entries of a full window's epoch).
Each cut also knows the latest time it holds, so that a query of times all expired or all to
come (most of an epoch's, in a stream in time order) seeks nothing.

A batch of queries is answered in vertex order, so each level is walked once to find the
vertices, then a vertex's events in ``[lo, hi]`` are two binary searches away: no key per
``(vertex, time bucket)`` to hash, no bucket read beyond the range. The kernels are in
:mod:`monitor.index.time_kernels`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.index import time_kernels
from monitor.index.levels import I8, I32, I64, inverse_permutation
from monitor.index.time_kernels import F64, entry_order
from monitor.plan.cut import Cut


@dataclass(frozen=True)
class TimeLevel:
    """Sorted unique entries with their diffs."""

    vertex: I32
    times: F64
    eids: I32
    diff: I8

    @classmethod
    def empty(cls) -> TimeLevel:
        return cls(np.empty(0, np.int32), np.empty(0), np.empty(0, np.int32), np.empty(0, np.int8))

    @property
    def parts(self) -> tuple[I32, F64, I32, I8]:
        return self.vertex, self.times, self.eids, self.diff

    def __len__(self) -> int:
        return int(self.diff.shape[0])

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.parts)


@dataclass(frozen=True)
class TimeProbe:
    """Per query, its range ``[a, b)`` in the base and ``[c, d)`` in the view's level, and how
    many events it finds (those of the base's range the level does not remove, and those the
    level's range adds)."""

    a: I64
    b: I64
    c: I64
    d: I64
    counts: I64

    def __len__(self) -> int:
        return int(self.a.shape[0])

    def __getitem__(
        self, rows: npt.NDArray[np.integer] | npt.NDArray[np.bool_] | slice
    ) -> TimeProbe:
        return TimeProbe(self.a[rows], self.b[rows], self.c[rows], self.d[rows], self.counts[rows])

    @property
    def bounds(self) -> tuple[I64, I64, I64, I64]:
        return self.a, self.b, self.c, self.d


class TimeIndexView:
    """The index as one cut sees it: the base plus one level on top of it, alive from the
    cut's horizon on."""

    __slots__ = ("base", "horizon", "latest", "level")

    def __init__(
        self,
        base: TimeLevel,
        level: TimeLevel,
        horizon: float = -math.inf,
        latest: float = math.inf,
    ) -> None:
        self.base = base
        self.level = level
        #: No entry alive is earlier than the horizon, none later than ``latest``.
        self.horizon = horizon
        self.latest = latest

    def probe(self, vertices: npt.NDArray[np.integer], lo: F64, hi: F64) -> TimeProbe:
        """The ranges of each vertex's events with a time in ``[lo, hi]`` (none for a NaN
        bound), clamped to the times alive: a query outside them seeks nothing."""
        base, level = self.base, self.level
        lo = np.maximum(lo, self.horizon)  # NaN stays NaN
        hi = np.minimum(hi, self.latest)
        return TimeProbe(
            *time_kernels.ranges(
                (base.vertex, base.times), (level.vertex, level.times, level.diff), vertices, lo, hi
            )
        )

    def count(self, probe: TimeProbe) -> I64:
        """How many events each query finds."""
        return probe.counts

    def propose(self, probe: TimeProbe) -> tuple[I64, I32]:
        """``(owner, eid)`` of every event found, each query's together."""
        base, level = self.base, self.level
        return time_kernels.propose(
            base.eids, base.times, level.eids, level.times, level.diff, probe.bounds
        )

    def contains(
        self, probe: TimeProbe, owner: npt.NDArray[np.integer], eids: I32
    ) -> npt.NDArray[np.bool_]:
        """Whether each ``eids[i]`` is among the events query ``owner[i]`` finds."""
        found_owner, found = self.propose(probe)
        have = (found_owner << 32) | found.astype(np.int64)
        want = (owner.astype(np.int64) << 32) | eids.astype(np.int64)
        return np.isin(want, have)


class TimeIndex:
    """One time order of a selection's events, with its three levels."""

    def __init__(self, compaction_ratio: float = 0.125, compaction_min: int = 4096) -> None:
        self.compaction_ratio = compaction_ratio
        self.compaction_min = compaction_min
        self.base = TimeLevel.empty()
        self.committed = TimeLevel.empty()
        self.uncommitted = TimeLevel.empty()
        self._new: TimeLevel | None = None
        #: The earliest time alive in the committed state, and in the staged one.
        self.horizon = -math.inf
        self._staged_horizon = -math.inf
        #: The latest time of an entry ever added, committed and staged (an upper bound).
        self.latest = -math.inf
        self._staged_latest = -math.inf
        #: Entries left below the committed horizon (at most: some may be in no level), and
        #: those the staged epoch leaves.
        self.expired = 0
        self._staged_expired = 0
        self.compactions = 0

    def __len__(self) -> int:
        """Entries alive in the committed state."""
        base, committed, horizon = self.base, self.committed, self.horizon
        above = committed.times >= horizon
        return int((base.times >= horizon).sum()) + int(committed.diff[above].sum())

    @property
    def nbytes(self) -> int:
        """Bytes of the base and the committed level."""
        return self.base.nbytes + self.committed.nbytes

    def view(self, cut: Cut) -> TimeIndexView:
        """The index as an atom with this cut reads it."""
        if cut is Cut.OLD:
            return TimeIndexView(self.base, self.committed, self.horizon, self.latest)
        if not len(self.uncommitted):
            level = self.committed
        else:
            if self._new is None:
                merged = time_kernels.merge_levels(self.committed.parts, self.uncommitted.parts)
                self._new = TimeLevel(*merged)
            level = self._new
        return TimeIndexView(self.base, level, self._staged_horizon, self._staged_latest)

    def stage(
        self,
        vertex: I32,
        times: F64,
        eids: I32,
        diff: I8,
        ranks: I64 | None = None,
        horizon: float = -math.inf,
        expired: int = 0,
    ) -> None:
        """Set the epoch's changes: entries absent before for ``+1``, present for ``-1``
        (``ranks``: their :func:`~monitor.index.time_kernels.time_ranks`, when known), and
        the epoch's ``horizon`` (it never moves back): the ``expired`` entries below it are
        gone without a ``-1``."""
        order = entry_order(vertex, times, eids, ranks)
        self.uncommitted = TimeLevel(vertex[order], times[order], eids[order], diff[order])
        self._new = None
        self._staged_horizon = max(self.horizon, horizon)
        self._staged_latest = max(self.latest, _latest(times, diff))
        self._staged_expired = expired

    def commit(self) -> None:
        """Keep the epoch's changes; compact once the committed level, or the entries left
        below the horizon, have grown."""
        if len(self.uncommitted):
            self.committed = self.view(Cut.NEW).level
            self.uncommitted = TimeLevel.empty()
            self._new = None
        self.horizon, self.latest = self._staged_horizon, self._staged_latest
        self.expired += self._staged_expired
        self._staged_expired = 0
        threshold = max(self.compaction_min, self.compaction_ratio * len(self.base))
        if len(self.committed) > threshold or self.expired > threshold:
            self.compact()

    def abort(self) -> None:
        """Forget the epoch's changes."""
        self.uncommitted = TimeLevel.empty()
        self._new = None
        self._staged_horizon, self._staged_latest = self.horizon, self.latest
        self._staged_expired = 0

    def compact(self) -> None:
        """Merge the committed level into the base: one pass over both (a removal cancels
        its entry), dropping the entries below the horizon."""
        if not len(self.committed) and not self.expired:
            return
        merged = time_kernels.merge_levels(self.base.parts, self.committed.parts, self.horizon)
        self.base = TimeLevel(*merged)
        self.expired = 0
        if len(self.base) and int(self.base.diff.min()) < 0:
            raise AssertionError("a time index removed an entry it did not hold")
        self.committed = TimeLevel.empty()
        self.compactions += 1

    def load(self, vertex: I32, times: F64, eids: I32, ranks: I64 | None = None) -> None:
        """Replace everything by these entries (unique eids; ``ranks`` as for :meth:`stage`),
        as committed state: all of them alive, whatever the horizon was."""
        order = entry_order(vertex, times, eids, ranks)
        ones = np.ones(order.shape[0], np.int8)
        self.base = TimeLevel(
            vertex[order].astype(np.int32), times[order], eids[order].astype(np.int32), ones
        )
        self.committed = TimeLevel.empty()
        self.uncommitted = TimeLevel.empty()
        self._new = None
        self.expired = 0
        self.latest = self._staged_latest = _latest(times, ones)
        self.horizon = self._staged_horizon = -math.inf  # every entry loaded is alive

    def renumber(self, old_of_new: I32) -> None:
        """The store's live events were renumbered in order (``old_of_new``: the old eid of
        each new one, ascending; :func:`~monitor.index.compaction.compact_store`): the same
        renumbering of the entries keeps their order, so no sort. Committed state only."""
        if len(self.uncommitted):
            raise ValueError("a time index is renumbered between epochs only")
        self.compact()
        base = self.base
        eids = inverse_permutation(old_of_new, base.eids)[base.eids]
        if eids.shape[0] and int(eids.min()) < 0:
            raise AssertionError("a time index held an event its store did not keep")
        self.base = TimeLevel(base.vertex, base.times, eids, base.diff)

    def entries(self, cut: Cut = Cut.OLD) -> tuple[I32, F64, I32]:
        """Every entry alive under ``cut``, in order (for tests and inspection)."""
        view = self.view(cut)
        merged = time_kernels.merge_levels(self.base.parts, view.level.parts, view.horizon)
        vertex, times, eids, _ = merged
        return vertex, times, eids


def _latest(times: F64, diff: I8) -> float:
    """The latest time of the added entries (-inf: none)."""
    added = times[diff > 0]
    return float(added.max()) if added.shape[0] else -math.inf
