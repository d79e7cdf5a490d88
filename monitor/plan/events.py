"""Queries over events, rewritten into queries over the index's relations.

The worst-case optimal machinery binds vertices; events ride on it. An atom over an event
relation, with its edge variable's selection ``S`` (the predicates on that variable alone),
becomes two atoms over relations the index keeps for ``S`` (``monitor.index.event_relations``):

    transfer(a, b) as t, t.amount >= 1000
      ->  transfer{amount >= 1000}(a, b), transfer{amount >= 1000}#events(a, b, t)

The first is an ordinary binary relation (the pairs with a selected event): it counts,
proposes and intersects to bind ``a`` and ``b``. The second binds ``t`` to each selected event
of the bound pair once both are bound (its only index is by pair). An atom without ``as``
reads the pairs only, ``transfer(a, b)``: set semantics, present while one event is. Since
``events`` implies ``pairs``, the rewritten join has exactly the original matches. The pairs
atom beside an events atom is its *projection* (:mod:`monitor.plan.cut`): it reads the events
atom's cut and seeds nothing, so the delta queries are seeded by changed events (and by the
changed pairs of atoms without ``as``) and sum to the original's change.

With a gap bounding its time against another's (:func:`time_ordered`), an edge variable gets two
*time-ordered* atoms, ``R{S}#by_src(x, t)`` and ``R{S}#by_dst(y, t)``: access paths the planner
may bind ``t`` through (a range step, :mod:`monitor.plan.planner`), projections of its events
atom like the pairs atom, never seeds or checks.

Predicates across edge variables become join filters (:class:`~monitor.plan.plan.FieldFilter`),
placed by the planner at the first stage where both variables are bound. ``distinct`` becomes
``!=`` filters between vertex variables and between edge variables of one relation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import combinations

from core.fields import TIME_ORDERS, FieldTest, events_name, selection_name, time_order_name
from core.times import TIME_FIELD
from monitor.plan.degrees import DegreeBound, degree_bounds
from monitor.plan.windows import time_bounds
from monitor.query.ast import Atom, FieldRef, Filter, Literal, Predicate, Query


@dataclass(frozen=True)
class EventQuery:
    """A query as written (``source``) and as evaluated (``internal``, over index relations).

    ``internal.head`` is the vertex head followed by the edge variables; ``edges`` maps each
    edge variable to its event relation; ``selections`` lists (relation, tests) for every
    selection an atom reads.
    """

    source: Query
    internal: Query
    edges: dict[str, str]
    selections: tuple[tuple[str, tuple[FieldTest, ...]], ...]
    #: The degree bounds the internal query's atoms read (:mod:`monitor.plan.degrees`).
    degrees: tuple[DegreeBound, ...] = ()

    @property
    def whole(self) -> Query:
        """``internal`` without the atoms of its degree bounds: every binding of the body
        (the events of a group that stopped holding are found with it)."""
        if not self.degrees:
            return self.internal
        bounds = {bound.atom for bound in self.degrees}
        return replace(
            self.internal, atoms=tuple(a for a in self.internal.atoms if a not in bounds)
        )

    def identity(self) -> tuple[int, ...] | None:
        """The positions in ``internal.head`` of the edge variables, where they determine the
        binding (every vertex of the head is an end of some edge variable's event: an event
        has one source and one destination); None where they do not."""
        ends = {v for a in self.source.atoms if a.edge in self.edges for v in a.variables}
        width = len(self.internal.head) - len(self.edges)
        if not self.edges or not set(self.internal.head[:width]) <= ends:
            return None
        return tuple(range(width, len(self.internal.head)))


def event_relations(queries: tuple[Query, ...]) -> set[str]:
    """The relations some query binds with ``as``: their records are events."""
    return {a.relation for q in queries for a in q.atoms if a.edge is not None}


def selection_of(query: Query, edge: str) -> tuple[FieldTest, ...]:
    """The tests of the predicates on ``edge`` alone, in a canonical order."""
    tests = []
    for p in query.predicates:
        if p.edges != (edge,):
            continue
        if isinstance(p.right, Literal):
            tests.append(FieldTest(p.left.name, p.op, literal=p.right.value))
        else:
            tests.append(FieldTest(p.left.name, p.op, None, p.right.name, p.factor, p.offset))
    return tuple(sorted(tests, key=str))


def rewrite(
    query: Query, events: set[str], time_orders: bool = True, bounds: bool = False
) -> EventQuery:
    """``query`` over the index relations (unchanged when it reads no event relation).

    An edge variable whose time a gap predicate bounds against another's gets its
    time-ordered atoms too (:func:`time_ordered`), unless ``time_orders`` is false (the plans
    then bind it over pairs only, as the tests of those plans want). An aggregate query is
    rewritten as its body (:meth:`~monitor.query.ast.Query.body`), which the engines evaluate,
    with the atoms of its degree bounds where ``bounds`` (:mod:`monitor.plan.degrees`)."""
    written, source = query, query.body()
    query = tables_as_pairs(source, events)
    if not query.has_events:  # set semantics only: the atoms read the relations as named
        reads = tuple((a.relation, ()) for a in query.atoms if a.relation in events)
        return EventQuery(source, query, {}, tuple(dict.fromkeys(reads)))
    query = replace(query, predicates=query.predicates + within(source))
    atoms: list[Atom] = []
    edges: dict[str, str] = {}
    selections: list[tuple[str, tuple[FieldTest, ...]]] = []
    for atom in query.atoms:
        if atom.relation not in events:
            atoms.append(atom)
            continue
        tests = selection_of(query, atom.edge) if atom.edge else ()
        selections.append((atom.relation, tests))
        pairs = replace(atom, relation=selection_name(atom.relation, tests), edge=None)
        atoms.append(pairs)
        if atom.edge is not None:
            edges[atom.edge] = atom.relation
            variables = (*atom.variables, atom.edge)
            atoms.append(
                replace(pairs, relation=events_name(atom.relation, tests), variables=variables)
            )
    if time_orders:
        atoms += time_ordered(source)
    degrees: tuple[DegreeBound, ...] = ()
    if bounds:
        selected: dict[str | None, tuple[FieldTest, ...]] = {None: ()}
        selected.update((e, selection_of(query, e)) for e in edges)
        degrees = degree_bounds(written, events, selected)
        atoms += [bound.atom for bound in degrees]
        selections += [(bound.relation, bound.tests) for bound in degrees]
    filters = list(query.filters)
    if query.distinct:
        filters += [Filter(a, "!=", b) for a, b in combinations(query.head, 2)]
        filters += [Filter(a, "!=", b) for a, b in combinations(edges, 2) if edges[a] == edges[b]]
    joins = tuple(p for p in query.predicates if not p.is_selection)
    internal = Query(
        name=query.name,
        head=(*query.head, *edges),
        atoms=tuple(atoms),
        filters=tuple(dict.fromkeys(filters)),
        distinct=False,
        line=query.line,
        column=query.column,
        predicates=joins,
    )
    return EventQuery(source, internal, edges, tuple(dict.fromkeys(selections)), degrees)


def tables_as_pairs(query: Query, events: set[str]) -> Query:
    """``query`` with every atom of a table read as its self-loop: ``account(a) as x`` is
    ``account(a, a) as x``, the index holding a table's record of vertex ``v`` as an event
    ``(v, v)`` whose id is ``v`` (so the engines need nothing else for tables). The atoms keep
    their unary form in :attr:`~monitor.query.ast.Atom.is_table`'s sense only through
    :attr:`EventQuery.source`."""
    tables = {a.relation for a in query.atoms if a.is_table}
    if not tables:
        return query
    atoms = tuple(
        replace(a, variables=a.variables * 2) if a.relation in tables & events else a
        for a in query.atoms
    )
    return replace(query, atoms=atoms)


def time_ordered(query: Query) -> list[Atom]:
    """``R{S}#by_src(x, u)`` and ``R{S}#by_dst(y, u)`` for each edge variable ``u`` of
    ``R(x, y) as u`` whose time a gap predicate (or ``within``) ties to another edge
    variable's: the index keeps ``R{S}``'s events by source (destination) and time bucket, so
    that a stage can bind ``u``, and then ``y`` (``x``), from the events of a bound ``x``
    (``y``) in the gap's range of time, instead of from all of its neighbours in the window
    (:mod:`monitor.plan.planner`: where the planner takes that path)."""
    timed = query.timed_edges
    bounds = time_bounds(timed, query.predicates, query.within)
    out: list[Atom] = []
    for atom in query.atoms:
        u = atom.edge
        if u not in timed or len(atom.variables) != 2:
            continue
        widths = [bounds[t, u] + bounds[u, t] for t in timed if t != u]
        if not math.isfinite(min(widths, default=math.inf)):
            continue
        tests = selection_of(query, u)
        for side, vertex in zip(TIME_ORDERS, atom.variables, strict=True):
            name = time_order_name(atom.relation, tests, side)
            out.append(replace(atom, relation=name, variables=(vertex, u), edge=None))
    return out


def within(query: Query) -> tuple[Predicate, ...]:
    """``within D`` as join filters: for every two edge variables ``t`` and ``u``,
    ``t.ts <= u.ts + D`` and ``u.ts <= t.ts + D`` (the latest minus the earliest time is at
    most ``D`` exactly when every two differ by at most ``D``); an edge variable without a time
    fails them."""
    if query.within is None:
        return ()
    out: list[Predicate] = []
    timed = query.timed_edges
    for t, u in combinations(timed, 2):
        for a, b in ((t, u), (u, t)):
            left, right = FieldRef(a, TIME_FIELD), FieldRef(b, TIME_FIELD)
            out.append(Predicate(left, "<=", right, query.line, query.column, 1.0, query.within))
    if len(timed) == 1:  # one event: the bound holds when it has a time
        ref = FieldRef(timed[0], TIME_FIELD)
        out.append(Predicate(ref, "=", ref, query.line, query.column))
    return tuple(out)


def join_refs(predicate: Predicate) -> tuple[FieldRef, FieldRef]:
    """Both sides of a join filter (a predicate across two edge variables)."""
    assert isinstance(predicate.right, FieldRef)
    return predicate.left, predicate.right
