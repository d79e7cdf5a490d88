"""What an epoch produced (:class:`EpochOutput`), and a run's totals over its epochs."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from monitor.index.events import EventChanges
from monitor.index.graph import Change
from monitor.index.levels import I64
from monitor.service.query_output import QueryOutput


@dataclass(frozen=True)
class EpochOutput:
    """Everything an epoch produced."""

    epoch: int
    updates: int
    applied: int
    ignored: Counter[str]
    queries: list[QueryOutput]
    seconds: float
    changes: dict[str, Change] = field(default_factory=dict)
    #: The epoch's effective event changes, by event relation (what the store records).
    event_changes: dict[str, EventChanges] = field(default_factory=dict)
    #: Per event relation, the sequence numbers of the updates refused as late or untimed.
    late: dict[str, I64] = field(default_factory=dict)
    #: The watermark the epoch advanced to.
    watermark: float = -math.inf
    #: Per event relation with a window: events expired, inserts refused as late.
    expired_by: dict[str, int] = field(default_factory=dict)
    late_by: dict[str, int] = field(default_factory=dict)

    @property
    def deltas(self) -> int:
        return sum(len(q) for q in self.queries)

    @property
    def expired(self) -> int:
        """Events that expired as the epoch began."""
        return sum(self.expired_by.values())


@dataclass
class RunTotals:
    """Running totals over a run, for progress lines and the final summary."""

    updates: int = 0
    applied: int = 0
    ignored: Counter[str] = field(default_factory=Counter)
    deltas: Counter[tuple[str, int]] = field(default_factory=Counter)
    epochs: int = 0
    epoch_seconds: list[float] = field(default_factory=list)
    expired: int = 0
    watermark: float = -math.inf

    def add(self, out: EpochOutput) -> None:
        self.updates += out.updates
        self.expired += out.expired
        self.watermark = out.watermark
        self.applied += out.applied
        self.ignored.update(out.ignored)
        for q in out.queries:
            plus = int((q.diff > 0).sum())
            self.deltas[(q.query, 1)] += plus
            self.deltas[(q.query, -1)] += len(q) - plus
        self.epochs += 1
        self.epoch_seconds.append(out.seconds)
