"""Event time of a run: the watermark, per input partition, advanced at epoch boundaries.

The watermark says how far event time has come: events older than it minus a relation's
retention can be in no window any more. Per input partition (a Kafka partition, or the one
input of a file job) the clock keeps the largest event times seen; the partition's watermark is
the largest of them minus the allowed lateness, and the run's watermark the minimum over the
partitions that have delivered events (as Flink takes the minimum over its inputs), never
going back.

A single event with a wrong clock (a year ahead) must not expire the whole window: the clock
ignores the ``outliers`` largest times of each partition, so the partition's watermark follows
its ``outliers + 1``-th largest event time. With the default of 1, one bad event moves nothing;
it stays in the window until the watermark reaches it. ``outliers = 0`` is the textbook
definition.

The clock follows the epoch protocol: :meth:`EventClock.tick` computes the watermark an epoch
advances to without changing anything, :meth:`commit` keeps it, so an aborted epoch leaves the
clock where it was. Its state is a few numbers per partition, stored with the epoch
(:meth:`to_dict`) so that a restarted run continues with the stored watermark.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from core.records import UpdateBatch
from core.times import TIME_FIELD
from monitor.index.window import Tick

F64 = npt.NDArray[np.float64]

#: The partition of a file job's input.
FILE_PARTITION = "input"


class EventClock:
    """Per partition the ``outliers + 1`` largest event times seen, and the watermark."""

    def __init__(self, allowed_lateness: float, outliers: int = 1) -> None:
        self.lateness = float(allowed_lateness)
        self.outliers = outliers
        self.top: dict[str, F64] = {}
        self.watermark = -math.inf
        #: The watermark the last committed epoch began with: the events it expired, and the
        #: bindings an aggregate's window counts, are those of this watermark.
        self.began = -math.inf
        self._staged: tuple[dict[str, F64], float] | None = None

    def tick(self, times: Mapping[str, F64]) -> float:
        """The watermark after an epoch that saw ``times`` (per partition, event times in any
        order, NaN for events without one); staged until :meth:`commit`."""
        top = dict(self.top)
        keep = self.outliers + 1
        for partition, seen in times.items():
            seen = seen[~np.isnan(seen)]
            if not seen.shape[0]:
                continue
            known = top.get(partition, np.empty(0))
            merged = np.concatenate([known, seen])
            if merged.shape[0] > keep:
                merged = np.partition(merged, merged.shape[0] - keep)[-keep:]
            top[partition] = np.sort(merged)
        full = [t[0] for t in top.values() if t.shape[0] == keep]
        candidate = min(full) - self.lateness if full and len(full) == len(top) else -math.inf
        watermark = float(max(self.watermark, candidate))
        self._staged = (top, watermark)
        return watermark

    @property
    def staged(self) -> float:
        """The watermark of the staged epoch (the committed one when none is staged)."""
        return self.watermark if self._staged is None else self._staged[1]

    def commit(self) -> None:
        if self._staged is not None:
            self.began = self.watermark
            self.top, self.watermark = self._staged
            self._staged = None

    def abort(self) -> None:
        self._staged = None

    def partitions(self) -> dict[str, float]:
        """Per partition its watermark (-inf until it saw more than ``outliers`` times)."""
        keep = self.outliers + 1
        return {
            p: float(t[0]) - self.lateness if t.shape[0] == keep else -math.inf
            for p, t in sorted(self.top.items())
        }

    def staged_times(self, partitions: Iterable[str]) -> dict[str, list[float]]:
        """The largest event times the staged epoch leaves for ``partitions`` (those known)."""
        top = self.top if self._staged is None else self._staged[0]
        return {p: top[p].tolist() for p in partitions if p in top}

    def to_dict(self, staged: bool = False) -> dict[str, Any]:
        """The committed state (``staged``: the staged epoch's, as :meth:`commit` would keep
        it), for :meth:`restore`."""
        began = self.began
        top, watermark = self.top, self.watermark
        if staged and self._staged:
            began, (top, watermark) = self.watermark, self._staged
        return {
            "watermark": None if math.isinf(watermark) else float(watermark),
            "began": None if math.isinf(began) else float(began),
            "top": {p: t.tolist() for p, t in top.items()},
        }

    def restore(self, data: Mapping[str, Any] | None) -> None:
        """Continue from a stored :meth:`to_dict` (None: a new run)."""
        if not data:
            return
        keep = self.outliers + 1
        self.top = {p: np.sort(np.asarray(t, np.float64))[-keep:] for p, t in data["top"].items()}
        watermark = data.get("watermark")
        self.watermark = -math.inf if watermark is None else float(watermark)
        began = data.get("began", watermark)  # (a state of before it was kept: the watermark)
        self.began = -math.inf if began is None else float(began)
        if watermark is None:  # times only (a changelog): the watermark they give
            self.tick({})
            self.commit()


def epoch_tick(clock: EventClock, batch: UpdateBatch) -> Tick:
    """The step of event time ``batch`` makes: the watermark before it, the one it advances
    the clock to (staged), and its last ``seq``."""
    times = batch.times or {FILE_PARTITION: _inserted_times(batch)}
    before = clock.watermark
    return Tick(before, clock.tick(times), max(batch.first_seq + batch.count - 1, 0))


def _inserted_times(batch: UpdateBatch) -> npt.NDArray[np.float64]:
    """The ``ts`` of the batch's inserted events (NaN where an event has none)."""
    found = [
        part.fields[TIME_FIELD][part.diff > 0]
        for part in batch.events.values()
        if TIME_FIELD in part.fields and part.fields[TIME_FIELD].dtype == np.float64
    ]
    return np.concatenate(found) if found else np.empty(0, np.float64)
