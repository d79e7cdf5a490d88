"""What the queries make of their event relations: which relations hold events, how long they
live, the queries over the index's relations, the selections kept, and the time orders read.

The single process's :class:`~monitor.service.epochs.EpochProcessor` and the partitioned
engine's :class:`~monitor.distributed.delta.ShardedEpochs` plan events alike from here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from connectors.events import FieldTypes
from core.errors import ConfigError
from core.fields import FieldTest
from core.records import EventUpdates, RelationUpdates, UpdateBatch
from monitor.index.event_relations import selections_of
from monitor.index.selections import Selection
from monitor.plan.events import EventQuery, event_relations, rewrite
from monitor.plan.needs import time_ordered
from monitor.plan.plan import DeltaQuery
from monitor.plan.planner import static_plan
from monitor.plan.windows import retentions
from monitor.query.ast import Query
from monitor.query.types import field_types, time_fields


@dataclass(frozen=True)
class EventPlan:
    """The queries' event relations, their retentions (ms; inf: until deleted), each query
    rewritten over the index's relations, and the selections some atom reads."""

    relations: set[str]
    retention: dict[str, float]
    rewritten: list[EventQuery]
    selections: list[Selection]
    #: The event relations that are tables of vertex attributes (``account(a) as x``).
    tables: frozenset[str] = frozenset()

    @property
    def internal(self) -> list[Query]:
        return [r.internal for r in self.rewritten]

    def time_orders(self, plans: Iterable[DeltaQuery]) -> frozenset[str]:
        """The time orders the delta queries ``plans`` and the static plans read."""
        return time_ordered([*plans, *(static_plan(q) for q in self.internal)])


def event_plan(
    queries: Sequence[Query],
    retention: dict[str, float],
    tables: Collection[str] = (),
    bounds: bool = False,
) -> EventPlan:
    """The plan of ``queries``' events, with ``retention`` as set (a retention of a relation no
    query reads as events is a :class:`ConfigError`, and so is one of a table) and the
    relations declared tables (``--table``: :func:`checked_tables`); with the aggregate
    bodies' degree bounds where ``bounds`` (:mod:`monitor.plan.degrees`: the single process
    keeps them, the partitioned engine not yet)."""
    events = event_relations(tuple(queries))
    unknown = set(retention) - events
    if unknown:
        raise ConfigError(
            f"retention is set for {names(unknown)}, which no query reads as events "
            f"(with 'as'); the event relations are {names(events)}"
        )
    read_as_tables = checked_tables(queries, tables)
    kept = set(retention) & read_as_tables
    if kept:
        raise ConfigError(
            f"retention is set for {names(kept)}, a table: its records never expire (a "
            "tombstone removes one)"
        )
    rewritten = [rewrite(q, events, bounds=bounds) for q in queries]
    degrees: dict[tuple[str, tuple[FieldTest, ...]], set[tuple[str, int]]] = {}
    for q in rewritten:
        for r, t in q.selections:
            degrees.setdefault((r, t), set())
        for bound in q.degrees:
            degrees[(bound.relation, bound.tests)].add((bound.side, bound.least))
    found = [Selection(r, t, tuple(sorted(d))) for (r, t), d in degrees.items()]
    return EventPlan(
        events,
        retentions(list(queries), events, retention),
        rewritten,
        selections_of(found),
        read_as_tables,
    )


def checked_tables(queries: Sequence[Query], declared: Collection[str]) -> frozenset[str]:
    """The tables: the relations the queries read as ``account(a) as x``. Each relation
    ``declared`` (``--table``, ``SGM_TABLES``) must be one; a declared table some query reads as
    events or tuples is a :class:`ConfigError` that says where."""
    tables = frozenset().union(*(q.tables for q in queries))
    for relation in dict.fromkeys(declared):
        if relation in tables:
            continue
        uses = [(q, a) for q in queries for a in q.atoms if a.relation == relation]
        if uses:
            query, atom = uses[0]
            raise ConfigError(
                f"{relation} is declared a table (--table, SGM_TABLES) but query "
                f"'{query.name}' reads it as '{atom}' at line {atom.line}, column "
                f"{atom.column}: a table holds one record per vertex and is read as "
                f"{relation}(v) as x; a relation of events (src, dst) cannot be one"
            )
        raise ConfigError(
            f"{relation} is declared a table (--table, SGM_TABLES) but no query reads it; "
            f"read it as {relation}(v) as x"
        )
    return tables


def names(relations: set[str]) -> str:
    return ", ".join(sorted(relations)) if relations else "no relation"


def positional_events(
    batch: UpdateBatch, relations: Collection[str], ignored: Counter[str]
) -> tuple[dict[str, RelationUpdates], dict[str, EventUpdates]]:
    """The batch's tuples and events, where tuples of an event relation (records without an
    id) become events whose identity is their stream position (``@seq``); their deletes are
    counted (``delete_without_id``), not applied, and tuples of another arity
    (``wrong_arity``)."""
    events = dict(batch.events)
    parts = dict(batch.parts)
    for name in set(relations) & set(parts):
        part = parts.pop(name)
        insert = part.diff > 0
        ignored["delete_without_id"] += int((~insert).sum())
        if part.arity != 2:
            ignored["wrong_arity"] += int(insert.sum())
            continue
        ids = np.char.add("@", part.seq[insert].astype(str)).astype(object)
        positional = EventUpdates(
            ids,
            part.diff[insert],
            part.seq[insert],
            part.columns[0][insert],
            part.columns[1][insert],
            {},
        )
        known = events.get(name)
        events[name] = positional if known is None else EventUpdates.concat([known, positional])
    return parts, events


def event_field_types(queries: Sequence[Query], relations: set[str]) -> FieldTypes | None:
    """The event relations with the field types the queries' predicates fix, the tables, and
    the fields that hold times."""
    if not relations:
        return None
    types: dict[str, dict[str, str]] = {r: {} for r in relations}
    for (relation, name), kind in field_types(queries).items():
        if relation in types:
            types[relation][name] = kind
    times: dict[str, set[str]] = {}
    for relation, name in time_fields(queries):
        times.setdefault(relation, set()).add(name)
    tables = set().union(*(q.tables for q in queries)) & relations
    return FieldTypes.of(types, tables, times)
