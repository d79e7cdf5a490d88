"""Delta evaluation of an epoch: every query's change, from every changed atom, consolidated.

For a query ``Q`` with atoms ``R1 .. Rn`` and an epoch changing the relations by ``dR``, the
change of ``Q`` is the sum of the delta queries

    dQ/dRi := R1'(..), .., R(i-1)'(..), dRi(..), R(i+1)(..), .., Rn(..)

(primes read NEW, the rest OLD), each evaluated by prefix extension from the changes of its seed
atom. Their sum is consolidated so that each binding appears at most once with diff +1 or -1.

A query whose live matches are kept (:mod:`monitor.engine.live_matches`) runs its delta queries
seeded by the insertions only; its retractions are the kept matches the epoch removes a tuple
of.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from monitor.engine.consolidate import consolidate
from monitor.engine.extend import IndexReader, StageRunner
from monitor.engine.live_matches import LiveMatches, Removed
from monitor.engine.pipeline import Emit, Pipeline, run_plan
from monitor.engine.prefixes import Prefixes
from monitor.engine.seeds import seed_prefixes
from monitor.engine.shared import PlanTrie
from monitor.index.graph import Change
from monitor.index.levels import I32, I64
from monitor.plan.plan import DeltaQuery
from monitor.plan.planner import delta_queries
from monitor.query.ast import Query


@dataclass(frozen=True)
class MatchDeltas:
    """A query's consolidated change in one epoch: binding columns in head order, and diffs."""

    query: str
    variables: tuple[str, ...]
    columns: list[I32]
    diff: I64

    def __len__(self) -> int:
        return int(self.diff.shape[0])


@dataclass
class EvaluationStats:
    """What evaluating epochs cost: seeds used, bindings produced before consolidation."""

    seeds: int = 0
    produced: int = 0
    peak_prefixes: int = 0
    #: Prefixes sent down an alternative of their plan (:mod:`monitor.plan.alternatives`).
    alternated: int = 0
    per_query: dict[str, int] = field(default_factory=dict)


class DeltaEvaluator:
    """The delta queries of a set of queries; evaluates the change of each in an epoch."""

    def __init__(self, queries: Sequence[Query], max_prefixes: int = 1 << 20) -> None:
        self.queries = list(queries)
        self.plans = {q.name: delta_queries(q) for q in self.queries}
        self.max_prefixes = max_prefixes
        self.stats = EvaluationStats()
        #: Per query (by name), head columns that determine its bindings (an event's id its
        #: ends), which consolidation sorts and compares alone; the query's change then comes
        #: in their order. Set by a caller that reads the change in no particular order.
        self.keyed_by: dict[str, tuple[int, ...]] = {}
        self._trie: PlanTrie | None = None
        #: The queries whose retractions are looked up in their live matches, not evaluated.
        self.looked_up: frozenset[str] = frozenset()

    #: The stage implementation; a subclass may swap it (the binary-join baseline does).
    runner: type[StageRunner] = StageRunner

    #: Whether :meth:`evaluate` runs the stages plans share once (:mod:`monitor.engine.shared`);
    #: a subclass that schedules each query's plans itself does not.
    shares_stages = True

    def evaluate(
        self,
        index: IndexReader,
        changes: dict[str, Change],
        live: Mapping[str, LiveMatches] | None = None,
    ) -> list[MatchDeltas]:
        """Each query's consolidated match deltas for an epoch whose changes are staged; the
        queries of ``live`` retract the matches it keeps (:meth:`LiveMatches.retract`) and run
        their delta queries seeded by the insertions only."""
        live = {} if live is None else live
        if not self.shares_stages:
            if live:
                raise ValueError("live matches need the shared evaluation")
            return [self.evaluate_query(q, index, changes) for q in self.queries]
        if frozenset(live) != self.looked_up:
            self.looked_up, self._trie = frozenset(live), None
        produced = self._produce_shared(index, changes)
        removed = Removed(changes)
        out = []
        for q in self.queries:
            matches = live.get(q.name)
            if matches is None:
                out.append(self._consolidated(q, produced[q.name]))
                continue
            gone = matches.retract(removed)
            kept = [*produced[q.name], Prefixes(tuple(gone), np.full(gone[0].shape[0], -1))]
            deltas = self._consolidated(q, kept)
            # (bindings of inserted and removed tuples at once: never matches)
            keep = (deltas.diff < 0) | ~removed.holding(q, deltas.columns)
            if not keep.all():
                deltas = replace(
                    deltas, columns=[c[keep] for c in deltas.columns], diff=deltas.diff[keep]
                )
            out.append(deltas)
        return out

    def evaluate_query(
        self, query: Query, index: IndexReader, changes: dict[str, Change]
    ) -> MatchDeltas:
        """The consolidated change of one query."""
        return self._consolidated(query, self._produce(query, index, changes))

    def _consolidated(self, query: Query, produced: list[Prefixes]) -> MatchDeltas:
        width = len(query.head)
        if not produced:
            empty = Prefixes.empty(width)
            return MatchDeltas(query.name, query.head, list(empty.columns), empty.diff)
        columns, diff = consolidate(
            [np.concatenate([p.columns[i] for p in produced]) for i in range(width)],
            np.concatenate([p.diff for p in produced]),
            self.keyed_by.get(query.name),
        )
        self.stats.per_query[query.name] = self.stats.per_query.get(query.name, 0) + len(diff)
        return MatchDeltas(query.name, query.head, columns, diff)

    def bindings(self, query: Query, index: IndexReader, changes: dict[str, Change]) -> list[I32]:
        """Every distinct binding the delta queries seeded by ``changes`` produce, whatever its
        summed diff (zeros kept): the candidates of consolidation across workers."""
        produced = self._produce(query, index, changes)
        width = len(query.head)
        if not produced:
            return list(Prefixes.empty(width).columns)
        columns = [np.concatenate([p.columns[i] for p in produced]) for i in range(width)]
        distinct, _ = consolidate(columns, np.ones(columns[0].shape[0], np.int64))
        return distinct

    def _produce(
        self, query: Query, index: IndexReader, changes: dict[str, Change]
    ) -> list[Prefixes]:
        produced: list[Prefixes] = []
        for plan in self.plans[query.name]:
            change = changes.get(plan.seed.relation)
            if change is None or not len(change):
                continue
            self._run(plan, index, change, produced.append)
        return produced

    def _produce_shared(
        self, index: IndexReader, changes: dict[str, Change]
    ) -> dict[str, list[Prefixes]]:
        """Every query's bindings, the stages its plans share with others' run once."""
        produced: dict[str, list[Prefixes]] = {q.name: [] for q in self.queries}
        if self._trie is None:
            self._trie = PlanTrie(
                (q, p)
                for q, plans in self.plans.items()
                for p in (_insertions(plans) if q in self.looked_up else plans)
            )
        stats = self.stats

        def emit(query: str, plan: DeltaQuery, p: Prefixes) -> None:
            stats.produced += len(p)
            produced[query].append(p)

        for plan, root in self._trie.roots.values():
            change = changes.get(plan.seed.relation)
            if change is None or not len(change):
                continue
            seeds = seed_prefixes(plan, change.columns, change.diff.astype(np.int64), index)
            stats.seeds += len(seeds)
            pipeline = Pipeline(root, index, self.max_prefixes, self.runner)
            peak = pipeline.run(seeds, emit)
            stats.peak_prefixes = max(stats.peak_prefixes, peak)
            stats.alternated += pipeline.alternated
        return produced

    def _run(
        self,
        plan: DeltaQuery,
        index: IndexReader,
        change: Change,
        emit: Emit,
        stats: EvaluationStats | None = None,
    ) -> None:
        """Run one delta query seeded by ``change``, counting into ``stats`` (default: the
        evaluator's)."""
        stats = self.stats if stats is None else stats
        seeds = seed_prefixes(plan, change.columns, change.diff.astype(np.int64), index)
        stats.seeds += len(seeds)

        def counted(p: Prefixes) -> None:
            stats.produced += len(p)
            emit(p)

        peak = run_plan(plan, index, seeds, self.max_prefixes, counted, self.runner)
        stats.peak_prefixes = max(stats.peak_prefixes, peak)


def _insertions(plans: Sequence[DeltaQuery]) -> list[DeltaQuery]:
    """``plans`` seeded by the insertions only (a query whose retractions are looked up)."""
    return [replace(p, seed=replace(p.seed, sign=1)) for p in plans if p.seed.sign >= 0]
