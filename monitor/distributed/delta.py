"""Epochs on the partitioned index: each query's change per epoch, as the single process has it.

An epoch's updates are staged on the shards (each relation's pairs netted where their keys
live), every query's delta queries run through the single process's evaluator
(:class:`~monitor.engine.delta.DeltaEvaluator`: the OLD and NEW cuts, the prefix budget,
consolidation) over the :class:`~monitor.distributed.sharded.ShardedIndex`, and the shards then
commit. The match deltas come with global vertex ids; :meth:`ShardedEpochs.external` decodes
them (each distinct id once, at the shard that numbered it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from core.fields import time_order_side
from core.records import UpdateBatch
from monitor.distributed.outputs import outputs
from monitor.distributed.rounds import SharedRoundsEvaluator
from monitor.distributed.shard_calls import Shards
from monitor.distributed.sharded import ShardedIndex
from monitor.distributed.sharded_events import ShardedEvents
from monitor.distributed.stages import ShardedStageRunner
from monitor.distributed.vertices import External
from monitor.engine.delta import MatchDeltas
from monitor.engine.static import enumerate_given, enumerate_matches
from monitor.index.graph import Change
from monitor.index.levels import I32
from monitor.plan.cut import Cut
from monitor.plan.needs import unread
from monitor.query.ast import Query
from monitor.service.clock import EventClock, epoch_tick
from monitor.service.contributions import contributed
from monitor.service.event_plan import event_field_types, event_plan, positional_events
from monitor.service.grouped import GroupedQuery, emit_grouped, grouped_outputs, grouped_queries
from monitor.service.query_output import QueryOutput
from monitor.service.settings import Settings


class ShardedEpochs:
    """The queries' delta evaluation, epoch after epoch, over shards."""

    def __init__(
        self,
        queries: Sequence[Query],
        shards: Shards,
        max_prefixes: int,
        shared_rounds: bool | None = None,
        settings: Settings | None = None,
        static: bool = True,
    ) -> None:
        """``shared_rounds``: whether a query's delta queries share their rounds of calls
        (:mod:`monitor.distributed.rounds`; None: when the shards are not in this process);
        ``settings``: retention, lateness and what the output holds (the defaults without);
        ``static``: whether a static evaluation will run (:meth:`initial`, a count), which
        reads every relation derived from the events (without one, those no delta query reads
        are not kept)."""
        self.settings = settings if settings is not None else Settings()
        self.queries = tuple(queries)
        static = static or any(q.aggregates for q in queries)  # (groups rebuilt by enumerating)
        self.max_prefixes = max_prefixes
        self.plan = event_plan(self.queries, self.settings.retention, self.settings.tables)
        self.internal = self.plan.internal
        self.index = ShardedIndex(shards)
        for query in self.internal:
            self.index.arity.update(
                (r, arity) for r, arity in query.relations.items() if time_order_side(r) is None
            )
        self.evaluator = SharedRoundsEvaluator(self.internal, max_prefixes, shared_rounds)
        self.evaluator.runner = ShardedStageRunner  # (a stage in three rounds of calls)
        self.events: ShardedEvents | None = None
        if self.plan.relations:
            plans = [p for plans in self.evaluator.plans.values() for p in plans]
            selections = self.plan.selections
            ignored = (
                frozenset() if static else unread([(s.pairs, s.events) for s in selections], plans)
            )
            self.events = ShardedEvents(
                self.index,
                selections,
                self.plan.retention,
                self.plan.time_orders(plans),
                ignored,
                self.plan.tables,
            )
            self.index.events = self.events
        self.clock = EventClock(self.settings.allowed_lateness, self.settings.watermark_outliers)
        #: The event relations and their field types, for the sources (None: no events).
        self.field_types = event_field_types(self.queries, self.plan.relations)
        self.changes: dict[str, Change] = {}
        self.epochs = 0
        #: The aggregate queries, by name: their groups, kept here at the driver from their
        #: bodies' changes (a group's bindings are on many shards).
        windowed = self.events is not None and self.events.caused
        retention = self.plan.retention
        self.grouped = grouped_queries(
            queries, windowed, self.settings.emit, retention, self.evaluator, self.plan.rewritten
        )

    def process(self, batch: UpdateBatch) -> list[MatchDeltas]:
        """Stage ``batch``, evaluate every query's change, commit; the changes (external
        ids)."""
        deltas = self.evaluate(batch)
        self.commit()
        return self.decoded(deltas)

    def evaluate(self, batch: UpdateBatch) -> list[MatchDeltas]:
        """Stage ``batch`` and evaluate every query's change (aborted on failure); the changes
        in global ids (:meth:`outputs` gives them as the single process outputs them). Then
        :meth:`commit` it (with a state directory, after the shards prepared it)."""
        try:
            self.changes = self._stage(batch, timed=True)
            return self.evaluator.evaluate(self.index, self.changes)
        except BaseException:
            self.abort()
            raise

    def _stage(self, batch: UpdateBatch, timed: bool) -> dict[str, Change]:
        if self.events is None:
            return self.index.stage_batch(batch)
        ignored = self.index.ignored
        parts, events = positional_events(batch, self.events.relations, ignored)
        changes = self.index.stage_batch(replace(batch, parts=parts, events={}))
        tick = epoch_tick(self.clock, batch) if timed else None
        changes.update(self.events.stage(events, ignored, tick))
        return changes

    def abort(self) -> None:
        self.index.abort()
        self.clock.abort()
        self._regroup()

    def _regroup(self) -> None:
        """The aggregate queries' groups rebuilt from their bodies' current bindings (after a
        restore, or an aborted epoch whose changes they had counted)."""
        if self.grouped:
            self._initial(lambda out: None, set(self.grouped))

    def grouped_deadline(self) -> float:
        """The watermark at which some group's counted binding leaves its window."""
        return min((g.deadline() for g in self.grouped.values()), default=math.inf)

    def external(self, deltas: Sequence[MatchDeltas]) -> list[list[External]]:
        """The external ids of every delta's vertex columns (its head's: an edge variable's
        events are :meth:`outputs`'), in one round."""
        columns = [c for d in deltas for c in d.columns[: len(d.variables)]]
        decoded = self.index.vertices.decode(columns)
        out, at = [], 0
        for d in deltas:
            out.append(decoded[at : at + len(d.variables)])
            at += len(d.variables)
        return out

    def decoded(self, deltas: Sequence[MatchDeltas]) -> list[MatchDeltas]:
        """``deltas`` with the external ids of their vertices as their columns."""
        return [
            replace(d, columns=columns)
            for d, columns in zip(deltas, self.external(deltas), strict=True)
        ]

    def preload(self, batch: UpdateBatch) -> None:
        """Load ``batch`` into the shards without evaluating (epoch 0); its events' time moves
        the clock, as the single process's preload does."""
        self._stage(batch, timed=True)
        self.index.commit()
        self.clock.commit()
        if self.events is not None:
            self.events.compact(self.settings.event_compaction_min)

    def initial(self, emit: Callable[[QueryOutput], None]) -> None:
        """Every current match of every query, as +1 rows in batches (made ``static``); of an
        aggregate query, the groups that hold (with the events of their bindings), its groups
        rebuilt on the way."""
        self._initial(lambda out: emit(self._contributed(out, self.clock.began)), None)

    def _initial(self, emit: Callable[[QueryOutput], None], names: set[str] | None) -> None:
        if self.events is not None and self.events.unread:
            raise ValueError("a static evaluation needs ShardedEpochs(..., static=True)")
        for query in self.internal:
            if names is not None and query.name not in names:
                continue
            grouped = self.grouped.get(query.name)
            if grouped is not None:
                grouped.rebuild_state()

            def send(
                columns: list[I32], query: Query = query, grouped: GroupedQuery | None = grouped
            ) -> None:
                diff = np.ones(columns[0].shape[0], np.int64)
                for out in outputs(self, [MatchDeltas(query.name, query.head, columns, diff)]):
                    emit_grouped(grouped, out, self.clock.began, emit)

            enumerate_matches(
                query,
                self.index,
                send,
                max_prefixes=self.max_prefixes,
                cut=Cut.NEW,
                runner=ShardedStageRunner,
            )

    def position(self) -> dict[str, Any]:
        """What the driver records of event time and fields with the staged epoch (as if it
        were committed): the clock, and each event relation's field kinds as first seen."""
        kinds = {} if self.events is None else self.events.kinds
        return {"clock": self.clock.to_dict(staged=True), "kinds": kinds}

    def restored(self, position: dict[str, Any]) -> None:
        """Continue from a recorded :meth:`position`, after the shards loaded their part."""
        self.clock.restore(position.get("clock"))
        if self.events is not None:
            self.events.restored(position.get("kinds") or {})
        self._regroup()

    def commit(self) -> None:
        """Fold the evaluated epoch into the shards."""
        self.index.commit()
        self.clock.commit()
        if self.events is not None:
            self.events.compact(self.settings.event_compaction_min)
        self.epochs += 1

    def outputs(self, deltas: Sequence[MatchDeltas]) -> list[QueryOutput]:
        """The deltas as the single process outputs them (:class:`QueryOutput`): external ids,
        each edge variable's events with their fields, ``match_id``, and ``cause`` in a run
        with a window; an aggregate query's groups that start or stop holding instead of its
        body's changes. Once per epoch: the groups count the changes here."""
        began = self.clock.watermark
        found = grouped_outputs(self.grouped, outputs(self, deltas), began)
        if self.grouped and self.settings.output_limit:
            found = [self._contributed(out, began) for out in found]
        return found

    def _contributed(self, out: QueryOutput, began: float) -> QueryOutput:
        """An aggregate query's group rows with the events of their bindings, as the single
        process finds them (:mod:`monitor.service.contributions`), over the shards."""
        grouped = self.grouped.get(out.query)
        if grouped is None or not len(out):
            return out
        i = next(k for k, r in enumerate(self.plan.rewritten) if r.source.name == out.query)
        body, internal = self.plan.rewritten[i].source, self.internal[i]

        def bindings(
            variables: tuple[str, ...], given: list[I32], take: Callable[[QueryOutput], None]
        ) -> None:
            def send(columns: list[I32]) -> None:
                diff = np.ones(columns[0].shape[0], np.int64)
                for found in outputs(
                    self, [MatchDeltas(internal.name, internal.head, columns, diff)], whole=True
                ):
                    take(found)

            enumerate_given(
                internal,
                self.index,
                variables,
                given,
                send,
                max_prefixes=self.max_prefixes,
                runner=ShardedStageRunner,
            )

        def encode(columns: list[npt.NDArray[np.generic]]) -> list[I32]:
            return self.index.vertices.encode(
                columns, [np.zeros(c.shape[0], np.bool_) for c in columns]
            )

        span = None if grouped.window is None else grouped.window.span
        limit = self.settings.output_limit
        return contributed(out, body, span, began, limit, encode, bindings)
