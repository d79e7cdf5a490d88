"""Degree bounds: the vertices an aggregate's distinct count can reach its threshold at.

``count(distinct b) >= 5`` grouped by ``a`` over a body with ``transfer(a, b) as t`` counts
successors of ``a``: a group can only hold where ``a`` has at least five distinct successors
among the live pairs of ``t``'s selection. In a stream of payments most accounts have one or
two in a day, and the bindings of their groups are most of the body's (``bench.typologies``'
scatter-gather: 97 in 100 of its two-hop chains in a day have an end with fewer than five).

So the single process's plan of such a body gets one more atom per bound, a unary relation of
the vertices with enough neighbours (``transfer#out>=5(a)``), which the index keeps from the
selection's pairs (:mod:`monitor.index.selections`) and whose changes seed delta queries like
any relation's: a vertex that reaches the bound brings in every binding of its groups, one that
falls below takes them out (*pruned*: they still hold in the graph; the group cannot).
Every group that can hold keeps every binding, so its counts, sums and rows are exact.

A bound needs ``count(distinct v) >= k`` (or ``> k - 1``) with ``k >= 2``, ``v`` a vertex,
and an atom over an event relation joining ``v`` to a vertex of the group (its selection is
that atom's edge variable's tests; none without ``as``), in a body of two atoms over event
relations or more. A body of one has a binding per event: nothing multiplies for a bound to
save, and keeping the pairs the bound counts costs more than it saves (``fan_in``: 770k events
a second without, 630k with, on the same 600k events).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.fields import FieldTest, degree_name, selection_name
from monitor.query.ast import Atom, Query


@dataclass(frozen=True)
class DegreeBound:
    """The vertices of ``variable`` need at least ``least`` distinct neighbours on ``side``
    (``out``: successors, ``in``: predecessors) in the pairs of ``relation``'s selection
    ``tests``."""

    variable: str
    relation: str
    tests: tuple[FieldTest, ...]
    side: str
    least: int

    @property
    def name(self) -> str:
        """The index relation of the vertices with enough neighbours."""
        return degree_name(self.relation, self.tests, self.side, self.least)

    @property
    def atom(self) -> Atom:
        return Atom(self.name, (self.variable,))

    def __str__(self) -> str:
        which = "successors" if self.side == "out" else "predecessors"
        return (
            f"{self.atom}: a group holds only where {self.variable} has {self.least} "
            f"distinct {which} in {selection_name(self.relation, self.tests)}"
        )


def degree_bounds(
    query: Query, events: set[str], selection: dict[str | None, tuple[FieldTest, ...]]
) -> tuple[DegreeBound, ...]:
    """The bounds of an aggregate ``query``'s distinct counts (none for another query);
    ``selection``: the tests of each edge variable's selection (``None``: an atom without
    ``as``, no tests)."""
    edges = {a.edge for a in query.atoms if a.edge is not None}
    if sum(a.relation in events for a in query.atoms) < 2:
        return ()
    found: dict[DegreeBound, None] = {}
    for condition in query.aggregates:
        counted = condition.argument
        least = _least(condition.op, condition.threshold)
        if condition.kind != "count_distinct" or not isinstance(counted, str):
            continue
        if least < 2 or counted in edges:
            continue
        for atom in query.atoms:
            if atom.relation not in events or len(atom.variables) != 2 or atom.hops:
                continue
            src, dst = atom.variables
            tests = selection[atom.edge]
            if dst == counted and src in query.head and src != counted:
                found[DegreeBound(src, atom.relation, tests, "out", least)] = None
            if src == counted and dst in query.head and dst != counted:
                found[DegreeBound(dst, atom.relation, tests, "in", least)] = None
    return tuple(found)


def _least(op: str, threshold: float) -> int:
    """The least whole count satisfying ``count OP threshold`` from below (0: no bound)."""
    if op == ">=":
        return max(0, math.ceil(threshold))
    if op == ">":
        return max(0, math.floor(threshold) + 1)
    return 0
