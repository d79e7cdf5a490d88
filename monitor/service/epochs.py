"""The epoch processor: an index, the queries' delta evaluator, and the epoch protocol.

One epoch: :meth:`EpochProcessor.stage` the batch (set semantics, effective changes), evaluate
every query's delta against the staged index, hand the match deltas to the caller, which emits
them and then calls :meth:`EpochProcessor.commit`. Sources and sinks live in ``connectors``; the
processor only sees :class:`~core.records.UpdateBatch` es and returns
:class:`EpochOutput` with external vertex ids.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from core.records import UpdateBatch, mirrored
from monitor.engine.delta import DeltaEvaluator
from monitor.engine.owned import ChangedTuples, decide
from monitor.engine.static import count_matches, enumerate_matches
from monitor.index.graph import Change, GraphIndex
from monitor.index.levels import I32, I64
from monitor.plan.cut import Cut
from monitor.query.ast import Query
from monitor.service.settings import Settings


@dataclass(frozen=True)
class QueryOutput:
    """One query's match deltas in one epoch, with external vertex ids (one column per var)."""

    query: str
    variables: tuple[str, ...]
    columns: list[npt.NDArray[np.generic]]
    diff: I64

    def __len__(self) -> int:
        return int(self.diff.shape[0])


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

    @property
    def deltas(self) -> int:
        return sum(len(q) for q in self.queries)


@dataclass
class RunTotals:
    """Running totals over a run, for progress lines and the final summary."""

    updates: int = 0
    applied: int = 0
    ignored: Counter[str] = field(default_factory=Counter)
    deltas: Counter[tuple[str, int]] = field(default_factory=Counter)
    epochs: int = 0
    epoch_seconds: list[float] = field(default_factory=list)

    def add(self, out: EpochOutput) -> None:
        self.updates += out.updates
        self.applied += out.applied
        self.ignored.update(out.ignored)
        for q in out.queries:
            plus = int((q.diff > 0).sum())
            self.deltas[(q.query, 1)] += plus
            self.deltas[(q.query, -1)] += len(q) - plus
        self.epochs += 1
        self.epoch_seconds.append(out.seconds)


class EpochProcessor:
    """Applies epochs to an in-memory index and evaluates the queries' deltas."""

    def __init__(self, queries: Sequence[Query], settings: Settings) -> None:
        self.settings = settings
        self.queries = list(queries)
        self.index = GraphIndex(settings.compaction_ratio, settings.compaction_min)
        for query in self.queries:
            for relation, arity in query.relations.items():
                self.index.relation(relation, arity)
        self.evaluator = DeltaEvaluator(self.queries, settings.max_prefixes)
        self.epoch = 0
        self.totals = RunTotals()

    def _prepare(self, batch: UpdateBatch) -> UpdateBatch:
        return mirrored(batch) if self.settings.undirected else batch

    def preload(self, batch: UpdateBatch) -> Counter[str]:
        """Load updates into the index without evaluating (epoch 0); returns what was ignored."""
        staged = self.index.apply(self._prepare(batch))
        self.totals.updates += batch.count
        self.totals.applied += staged.applied
        self.totals.ignored.update(staged.ignored)
        return staged.ignored

    def process(self, batch: UpdateBatch) -> EpochOutput:
        """Stage the next epoch and evaluate every query's change; call :meth:`commit` after."""
        started = time.perf_counter()
        staged = self.stage(batch)
        out = replace(
            staged,
            queries=self.evaluate(staged.changes),
            seconds=time.perf_counter() - started,
        )
        self.totals.add(out)
        return out

    def stage(self, batch: UpdateBatch) -> EpochOutput:
        """Stage the next epoch without evaluating anything (``queries`` is empty).

        Scale-out stages every epoch whole, then :meth:`evaluate` s the queries seeded with the
        changes of the partitions it owns only.
        """
        started = time.perf_counter()
        self.epoch += 1
        staged = self.index.stage(self._prepare(batch))
        return EpochOutput(
            self.epoch,
            batch.count,
            staged.applied,
            staged.ignored,
            [],
            time.perf_counter() - started,
            staged.changes,
        )

    def evaluate(self, changes: dict[str, Change]) -> list[QueryOutput]:
        """Every query's match deltas seeded by ``changes`` (some or all of the staged epoch's)."""
        if not any(len(c) for c in changes.values()):
            return []
        results = self.evaluator.evaluate(self.index, changes)
        decode = self.index.dictionary.decode
        return [
            QueryOutput(r.query, r.variables, [decode(c) for c in r.columns], r.diff)
            for r in results
            if len(r)
        ]

    def commit(self) -> None:
        """Make the staged epoch part of the committed state."""
        self.index.commit()

    def abort(self) -> None:
        """Forget the staged epoch (its output was not committed); its number is reused."""
        self.index.abort()
        self.epoch -= 1

    def evaluate_decided(
        self, changes: dict[str, Change], changed: ChangedTuples
    ) -> list[QueryOutput]:
        """Every query's deltas seeded by ``changes``, consolidated across workers: only the
        bindings this worker decides (``monitor.engine.owned``), each with its whole change."""
        if not any(len(c) for c in changes.values()):
            return []
        decode = self.index.dictionary.decode
        outputs = []
        for query in self.queries:
            found = self.evaluator.bindings(query, self.index, changes)
            columns, diff = decide(query, found, changed)
            if len(diff):
                outputs.append(
                    QueryOutput(query.name, query.head, [decode(c) for c in columns], diff)
                )
        return outputs

    def counts(self) -> dict[str, int]:
        """The number of current matches of every query (static evaluation)."""
        return {
            q.name: count_matches(q, self.index, max_prefixes=self.settings.max_prefixes)
            for q in self.queries
        }

    def initial(
        self, emit: Callable[[QueryOutput], None], queries: Sequence[Query] | None = None
    ) -> None:
        """Emit every current match of every query (or of ``queries``) as +1 deltas."""
        decode = self.index.dictionary.decode
        for query in self.queries if queries is None else queries:

            def send(columns: list[I32], query: Query = query) -> None:
                emit(
                    QueryOutput(
                        query.name,
                        query.head,
                        [decode(c) for c in columns],
                        np.ones(columns[0].shape[0], np.int64),
                    )
                )

            enumerate_matches(
                query, self.index, send, max_prefixes=self.settings.max_prefixes, cut=Cut.NEW
            )
