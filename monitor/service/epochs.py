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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial

import numpy as np
import numpy.typing as npt

from core.columns import Column, Member
from core.errors import StateError
from core.fields import time_order_side
from core.records import UpdateBatch, mirrored
from monitor.engine import field_joins, prefixes, sorting
from monitor.engine.consolidate import by_identity
from monitor.engine.delta import DeltaEvaluator
from monitor.engine.owned import ChangedTuples, decide
from monitor.engine.static import count_matches, enumerate_given, enumerate_matches
from monitor.index import warmup as index_kernels
from monitor.index.event_relations import EventIndex
from monitor.index.graph import Change, GraphIndex, StagedEpoch
from monitor.index.levels import I32, I64
from monitor.index.store import StateStore
from monitor.index.window import Tick
from monitor.plan.cut import Cut
from monitor.plan.needs import unread
from monitor.query.ast import Query
from monitor.service import match_ids as match_id_kernels
from monitor.service.causes import causes, holding
from monitor.service.clock import EventClock, epoch_tick
from monitor.service.contributions import contributed
from monitor.service.epoch_output import EpochOutput, RunTotals
from monitor.service.event_plan import event_field_types, event_plan, names, positional_events
from monitor.service.grouped import GroupedQuery, emit_grouped, grouped_outputs, grouped_queries
from monitor.service.kept_matches import KeptMatches
from monitor.service.match_ids import Hashed, match_ids
from monitor.service.query_output import QueryOutput
from monitor.service.settings import Settings


class EpochProcessor:
    """Applies epochs to an in-memory index and evaluates the queries' deltas."""

    def __init__(self, queries: Sequence[Query], settings: Settings) -> None:
        self.settings = settings
        #: The queries as written; ``internal`` are the same over the index's relations
        #: (``monitor.plan.events``: event relations become pairs and events relations).
        self.queries = list(queries)
        plan = event_plan(self.queries, settings.retention, settings.tables, bounds=True)
        #: Per event relation, how long its events live (ms; inf: until deleted).
        self.retention = plan.retention
        self.rewritten = plan.rewritten
        self.internal = plan.internal
        self.index = GraphIndex(settings.compaction_ratio, settings.compaction_min)
        index_kernels.warm()
        sorting.warm()
        field_joins.warm()
        prefixes.warm()
        match_id_kernels.warm()
        self.evaluator = DeltaEvaluator(self.internal, settings.max_prefixes)
        plans = [p for plans in self.evaluator.plans.values() for p in plans]
        self.events = EventIndex(
            self.index,
            plan.selections,
            retention=self.retention,
            tables=plan.tables,
            time_orders=plan.time_orders(plans),
            unread=unread([(s.pairs, s.events) for s in plan.selections], plans),
        )
        self.clock = EventClock(settings.allowed_lateness, settings.watermark_outliers)
        self._changes: dict[str, Change] = {}
        for query in self.internal:
            for relation, arity in query.relations.items():
                if time_order_side(relation) is None:  # the events index keeps those it reads
                    self.index.relation(relation, arity)
        #: Each relation's arity, for the sources (a tuple of another length is a dead letter;
        #: they learn the first tuple's length of a relation they do not find here): the
        #: index's relations, kept up to date on restore and commit.
        self.arities: dict[str, int] = {}
        self._note_arities()
        #: The event relations and their field types, for the sources (None: no events).
        self.field_types = event_field_types(self.queries, self.events.relations)
        #: The aggregate queries, by name: their groups, kept from their bodies' changes.
        self.grouped = grouped_queries(
            queries, self.caused, settings.emit, self.retention, self.evaluator, self.rewritten
        )
        #: The live matches kept so that removals retract them by lookup.
        self.kept = KeptMatches(self.rewritten, self.retention, settings.live_matches)
        self.epoch = 0
        self.totals = RunTotals()

    def restore(self, store: StateStore) -> None:
        """Fill the empty index from ``store``: tuples, events, and the relations derived from
        the events. A store whose event relations are not this run's is refused."""
        meta = store.meta
        if meta is None:
            return
        stored, current = set(meta.events), self.events.relations
        if stored != current:
            raise StateError(
                f"state in {store.path} keeps {names(stored)} as events, this run's queries "
                f"read {names(current)} as events; run the queries that built it, or give a "
                f"new state directory"
            )
        store.load(self.index)
        self._note_arities()
        self.events.rebuild()
        self.clock.restore(meta.position.get("clock"))
        self.kept.outdated()
        for relation, events in self.index.event_stores.items():
            assert self.field_types is not None  # the stored event relations are this run's
            known = self.field_types.types.setdefault(relation, {})
            for name, column in events.fields.items():
                if known.setdefault(name, column.kind) != column.kind:
                    raise StateError(
                        f"state in {store.path} holds field {name!r} of {relation!r} as a "
                        f"{column.kind}, this run's queries compare it as a {known[name]}; "
                        f"run the queries that built it, or give a new state directory"
                    )
        self._regroup()

    def _prepare(self, batch: UpdateBatch) -> UpdateBatch:
        return mirrored(batch) if self.settings.undirected else batch

    @property
    def windowed(self) -> bool:
        """Whether some event relation has a finite retention."""
        return bool(self.events.queues)

    @property
    def caused(self) -> bool:
        """Whether a ``-1`` has a cause to tell: events expire, or tables are updated."""
        return self.windowed or bool(self.events.tables)

    def expiry_due(self) -> bool:
        """Whether the watermark has passed the deadline of some event still in a window: an
        epoch would expire it even without input (the Kafka service runs one when idle)."""
        watermark = self.clock.watermark
        if any(g.deadline() < watermark for g in self.grouped.values()):
            return True
        return any(q.next_deadline() < watermark for q in self.events.queues.values())

    def preload(self, batch: UpdateBatch, timed: bool = True) -> Counter[str]:
        """Load updates into the index without evaluating (epoch 0); returns what was ignored.
        Not ``timed``: the event clock neither advances nor expires anything (a state rebuilt
        from elsewhere, whose clock is restored apart)."""
        staged = self._stage(batch, timed)
        self.commit()
        self.kept.outdated()
        self.totals.updates += batch.count
        self.totals.applied += staged.applied
        self.totals.ignored.update(staged.ignored)
        return staged.ignored

    def _stage(self, batch: UpdateBatch, timed: bool = True) -> StagedEpoch:
        """Stage tuples and events; records of an event relation without an id are events
        whose identity is their stream position, and such deletes are counted, not applied."""
        batch = self._prepare(batch)
        ignored: Counter[str] = Counter()
        parts, events = positional_events(batch, self.events.relations, ignored)
        staged = self.index.stage(replace(batch, parts=parts, events={}))
        staged.ignored.update(ignored)
        tick = self._tick(batch) if timed else None
        staged.changes.update(self.events.stage(events, staged.ignored, tick))
        self._changes = staged.changes
        staged.events = self.events.staged_events
        staged.event_changes = dict(self.events.changed)
        staged.derived = self.events.derived
        return staged

    def _tick(self, batch: UpdateBatch) -> Tick | None:
        """The epoch's step of event time (None: no event relation)."""
        return epoch_tick(self.clock, batch) if self.events.stores else None

    def process(self, batch: UpdateBatch) -> EpochOutput:
        """Stage the next epoch and evaluate every query's change; call :meth:`commit` after."""
        started = time.perf_counter()
        began = self.clock.watermark  # (the window of the epoch: the watermark it begins with)
        staged = self.stage(batch)
        queries = grouped_outputs(self.grouped, self._evaluate(staged.changes), began)
        if self.grouped and self.settings.output_limit:
            queries = [self._contributed(q, began) for q in queries]
        out = replace(staged, queries=queries, seconds=time.perf_counter() - started)
        self.totals.add(out)
        return out

    def stage(self, batch: UpdateBatch) -> EpochOutput:
        """Stage the next epoch without evaluating anything (``queries`` is empty).

        Scale-out stages every epoch whole, then :meth:`evaluate` s the queries seeded with the
        changes of the partitions it owns only.
        """
        started = time.perf_counter()
        if self.kept.stale:  # (between epochs: the index holds what no epoch told them)
            self.kept.fill(self.index, self.events.complete, self.settings.max_prefixes)
        self.epoch += 1
        staged = self._stage(batch)
        return EpochOutput(
            self.epoch,
            batch.count,
            staged.applied,
            staged.ignored,
            [],
            time.perf_counter() - started,
            staged.changes,
            staged.event_changes,
            dict(self.events.late),
            self.clock.staged,
            {r: int(e.shape[0]) for r, e in self.events.expired.items()},
            dict(self.events.late_count),
        )

    def evaluate(self, changes: dict[str, Change]) -> list[QueryOutput]:
        """Every query's match deltas seeded by ``changes`` (some or all of the staged epoch's;
        the live matches are then no longer kept)."""
        self.kept.drop_all("its epochs are evaluated a part at a time")
        return self._evaluate(changes)

    def _evaluate(self, changes: dict[str, Change]) -> list[QueryOutput]:
        """Every query's match deltas seeded by the staged epoch's ``changes``."""
        if not any(len(c) for c in changes.values()):
            return []
        results = self.evaluator.evaluate(self.index, changes, self.kept.matches)
        self.kept.staged(results)
        outputs = [self._output(i, r.columns, r.diff) for i, r in enumerate(results) if len(r)]
        return [out for out in outputs if len(out)]

    def _output(
        self, i: int, columns: Sequence[I32], diff: I64, whole: bool = False
    ) -> QueryOutput:
        """External ids for query ``i``'s dense binding columns, and its matched events (of an
        aggregate's body, those its groups read, unless ``whole``)."""
        source = self.rewritten[i].source
        # An aggregate's body: its groups read every change, also of an event replaced in the
        # epoch by one of the same id (its fields changed: the -1 and +1 do not cancel).
        body = source.name in self.grouped
        if self.events.replaced and self.rewritten[i].edges and not body:
            columns, diff = self._by_identity(i, columns, diff)
        if self.settings.emit == "appearances" and not body:
            keep = diff > 0
            columns, diff = [c[keep] for c in columns], diff[keep]
        decode = self.index.dictionary.decode
        width = len(source.head)
        # (an aggregate's body: only what its groups read, of the many rows it has)
        reads = self.grouped[source.name].reads() if body and not whole else None
        edges: dict[str, Mapping[str, Column]] = {}
        hashes: list[Hashed] = []
        for k, (var, relation) in enumerate(self.rewritten[i].edges.items()):
            if reads is not None and var not in reads.edges:
                continue
            fields = (
                (None if body else self.settings.output_fields)
                if reads is None
                else reads.edges[var]
            )
            edges[var], h = self.events.stores[relation].matched(columns[width + k], decode, fields)
            hashes.append(Hashed(h))
        vertices = [decode(c) for c in columns[:width]]
        ids: list[npt.NDArray[np.generic] | Hashed] = [*vertices, *hashes]
        extra: dict[str, Member] = {}
        pruned = bool(self.rewritten[i].degrees)  # (its groups tell pruned retractions apart)
        if self.caused or pruned:
            holds = partial(holding, self.rewritten[i].whole, self.index, self.events.complete)
            extra["cause"] = causes(
                source, columns, diff, self.events, self._changes, pruned, holds
            )
        if reads is None or reads.match_ids:  # (with every edge variable: the window's keys)
            extra["match_id"] = match_ids(source.name, ids, diff.shape[0])
        return QueryOutput(source.name, source.head, vertices, diff, edges, extra)

    def _by_identity(self, i: int, columns: Sequence[I32], diff: I64) -> tuple[list[I32], I64]:
        width = len(self.rewritten[i].source.head)
        slots = [
            self.events.stores[relation].slot[columns[width + k]]
            for k, relation in enumerate(self.rewritten[i].edges.values())
        ]
        return by_identity(columns, diff, width, slots)

    def commit(self) -> None:
        """Make the staged epoch part of the committed state."""
        self.index.commit()
        self.clock.commit()
        self.events.commit()
        self.kept.commit(self.events.compact(self.settings.event_compaction_min))
        self._note_arities()

    def _note_arities(self) -> None:
        """:attr:`arities` updated in place (the sources hold it) with the index's relations."""
        self.arities.update((name, r.arity) for name, r in self.index.relations.items())

    def abort(self) -> None:
        """Forget the staged epoch (its output was not committed); its number is reused."""
        self.index.abort()
        self.events.abort()
        self.kept.abort()
        self.clock.abort()
        self.epoch -= 1
        self._regroup()

    def _contributed(self, out: QueryOutput, began: float) -> QueryOutput:
        """An aggregate query's group rows with the events of their bindings
        (:mod:`monitor.service.contributions`); any other output as it is."""
        grouped = self.grouped.get(out.query)
        if grouped is None or not len(out):
            return out
        i = next(k for k, r in enumerate(self.rewritten) if r.source.name == out.query)
        body = self.rewritten[i].source

        def bindings(
            variables: tuple[str, ...], given: list[I32], take: Callable[[QueryOutput], None]
        ) -> None:
            def send(columns: list[I32]) -> None:
                take(self._output(i, columns, np.ones(columns[0].shape[0], np.int64), whole=True))

            with self.events.complete():
                enumerate_given(
                    self.rewritten[i].whole,  # (a group that stopped: its bindings)
                    self.index,
                    variables,
                    given,
                    send,
                    max_prefixes=self.settings.max_prefixes,
                )

        def encode(columns: list[npt.NDArray[np.generic]]) -> list[I32]:
            return [self.index.dictionary.encode(c, add=False) for c in columns]

        span = None if grouped.window is None else grouped.window.span
        limit = self.settings.output_limit
        return contributed(out, body, span, began, limit, encode, bindings)

    def _regroup(self) -> None:
        """The aggregate queries' groups rebuilt from their bodies' current bindings (after a
        restore, or an aborted epoch whose changes they had counted)."""
        if self.grouped:
            with self.events.complete():
                self._initial(lambda out: None, set(self.grouped))

    def evaluate_decided(
        self, changes: dict[str, Change], changed: ChangedTuples
    ) -> list[QueryOutput]:
        """Every query's deltas seeded by ``changes``, consolidated across workers: only the
        bindings this worker decides (``monitor.engine.owned``), each with its whole change."""
        self.kept.drop_all("its epochs are evaluated a part at a time")
        if not any(len(c) for c in changes.values()):
            return []
        outputs = []
        for i, query in enumerate(self.internal):
            found = self.evaluator.bindings(query, self.index, changes)
            columns, diff = decide(query, found, changed)
            if len(diff):
                outputs.append(self._output(i, columns, diff))
        outputs = [out for out in outputs if len(out)]
        return outputs

    def counts(self) -> dict[str, int]:
        """The number of current matches of every query (static evaluation); of an aggregate
        query, the groups that hold."""
        holding: Counter[str] = Counter()
        with self.events.complete():
            if self.grouped:
                self._initial(lambda out: holding.update({out.query: len(out)}), set(self.grouped))
            return {
                q.name: holding[q.name]
                if q.name in self.grouped
                else count_matches(q, self.index, max_prefixes=self.settings.max_prefixes)
                for q in self.internal
            }

    def initial(
        self, emit: Callable[[QueryOutput], None], queries: Sequence[Query] | None = None
    ) -> None:
        """Every current match (of ``queries``; default all) as +1 rows, group rows with events."""
        names = None if queries is None else {q.name for q in queries}
        with self.events.complete():
            self._initial(lambda out: emit(self._contributed(out, self.clock.began)), names)

    def _initial(self, emit: Callable[[QueryOutput], None], names: set[str] | None) -> None:
        """Every current match of the queries named (all: None) as +1 rows to ``emit``; of an
        aggregate query, the groups that hold, its groups rebuilt on the way."""
        for i, query in enumerate(self.internal):
            if names is not None and query.name not in names:
                continue
            grouped = self.grouped.get(query.name)
            if grouped is not None:
                grouped.rebuild_state()

            def send(
                columns: list[I32], i: int = i, grouped: GroupedQuery | None = grouped
            ) -> None:
                out = self._output(i, columns, np.ones(columns[0].shape[0], np.int64))
                emit_grouped(grouped, out, self.clock.began, emit)

            enumerate_matches(
                query, self.index, send, max_prefixes=self.settings.max_prefixes, cut=Cut.NEW
            )
