"""The sliding window of an event relation: its events by the time they expire.

An event of a relation with a retention ``R`` expires once the watermark passes ``ts + R``
(its *deadline*): :meth:`ExpiryQueue.due` finds the events whose deadline is below a
watermark without looking at the others. The queue is a few *runs*, each sorted by deadline
(one per committed epoch, merged into one when there are many), so finding what is due is a
binary search per run and adding an epoch's events is one sort of the epoch's events. Events
deleted by id stay in their run until their deadline passes (the caller skips events no
longer alive): the queue holds at most the events inserted within the window.

It follows the epoch protocol: :meth:`add` stages an epoch's new events, :meth:`commit` keeps
them and forgets what the committed watermark made due, :meth:`abort` forgets the staged ones.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from monitor.index.levels import I32, inverse_permutation

F64 = npt.NDArray[np.float64]

#: Runs kept before they are merged into one (finding what is due reads each run).
MAX_RUNS = 16


class ExpiryQueue:
    """Eids by deadline, in sorted runs."""

    def __init__(self) -> None:
        self.runs: list[tuple[F64, I32]] = []
        self._staged: tuple[F64, I32] | None = None

    def __len__(self) -> int:
        return sum(run[1].shape[0] for run in self.runs)

    @property
    def nbytes(self) -> int:
        return sum(deadlines.nbytes + eids.nbytes for deadlines, eids in self.runs)

    def add(self, eids: I32, deadlines: F64) -> None:
        """Stage new events with their deadlines (at most one call per epoch)."""
        order = np.argsort(deadlines, kind="stable")
        self._staged = (deadlines[order], eids[order])

    def due(self, watermark: float) -> I32:
        """The eids whose deadline is below ``watermark``, committed and staged (some may have
        died already)."""
        found = [eids[: np.searchsorted(d, watermark, "left")] for d, eids in self._all()]
        return np.concatenate(found) if found else np.empty(0, np.int32)

    def next_deadline(self) -> float:
        """The earliest committed deadline (inf: none)."""
        return min((float(d[0]) for d, _ in self.runs if d.shape[0]), default=np.inf)

    def _all(self) -> list[tuple[F64, I32]]:
        return self.runs if self._staged is None else [*self.runs, self._staged]

    def commit(self, watermark: float) -> None:
        """Keep the staged events and drop every event due at the committed ``watermark``."""
        runs = []
        for deadlines, eids in self._all():
            cut = int(np.searchsorted(deadlines, watermark, "left"))
            if cut < deadlines.shape[0]:  # copied once most is gone: a view holds all of it
                copy = 2 * cut > deadlines.shape[0]
                kept = (deadlines[cut:], eids[cut:])
                runs.append((kept[0].copy(), kept[1].copy()) if copy else kept)
        self._staged = None
        if len(runs) > MAX_RUNS:
            deadlines = np.concatenate([d for d, _ in runs])
            eids = np.concatenate([e for _, e in runs])
            order = np.argsort(deadlines, kind="stable")
            runs = [(deadlines[order], eids[order])]
        self.runs = runs

    def abort(self) -> None:
        self._staged = None

    def renumber(self, old_of_new: I32) -> None:
        """The store's live events were renumbered in order (``old_of_new``: the old eid of each
        new one): the committed runs renumbered, their order kept (no sort), the events no
        longer alive dropped."""
        new_of_old = inverse_permutation(old_of_new, *(eids for _, eids in self.runs))
        runs = []
        for deadlines, eids in self.runs:
            renumbered = new_of_old[eids]
            kept = renumbered >= 0
            runs.append((deadlines[kept], renumbered[kept]))
        self.runs = runs

    def rebuild(self, eids: I32, deadlines: F64) -> None:
        """The committed queue of a store just loaded: its live events and their deadlines."""
        self._staged = None
        self.runs = []
        self.add(eids, deadlines)
        self.commit(-np.inf)


def first_live(watermark: float, retention: float) -> float:
    """The earliest time an event can have and still be alive at ``watermark`` with this
    retention: the least float ``t`` whose deadline ``t + retention`` (rounded, as the queue
    computes it) is not below the watermark; -inf when nothing expires. A bisection between a
    time expired and one alive (rounding may move the answer off ``watermark - retention``,
    and near zero floats are too dense to step through)."""
    if watermark == -math.inf or retention == math.inf:
        return -math.inf
    if watermark == math.inf:
        return math.inf
    step = 4 * (math.ulp(watermark) + math.ulp(retention))
    expired, alive = watermark - retention - step, watermark - retention + step
    while expired + retention >= watermark:
        expired, step = expired - step, 2 * step
    while alive + retention < watermark:
        alive, step = alive + step, 2 * step
    while True:
        middle = expired + (alive - expired) / 2
        if not expired < middle < alive:
            middle = math.nextafter(expired, math.inf)
            if middle >= alive:
                return alive
        if middle + retention >= watermark:
            alive = middle
        else:
            expired = middle


class Tick:
    """An epoch's step of event time: the watermark before it (late events are older than it
    minus the retention), after it (events expire below it minus the retention), and the
    sequence number expiries take (after every update of the epoch)."""

    __slots__ = ("after", "before", "seq")

    def __init__(self, before: float, after: float, seq: int) -> None:
        self.before = before
        self.after = after
        self.seq = seq

    def __repr__(self) -> str:
        return f"Tick({self.before}, {self.after}, {self.seq})"
