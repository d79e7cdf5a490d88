"""Implied join filters: what a chain of field comparisons says about its far ends.

A round trip of six hops, each at least 80% of the one before, says nothing directly about its
first hop and its last: ``p_6.amount >= 0.8 * p_5.amount`` and ``p_5.amount >= 0.8 *
p_4.amount`` and so on. But together they say ``p_6.amount >= 0.8^5 * p_1.amount``, and a plan
seeded by the last hop can then drop a first hop of more than three times the seed's amount at
once, instead of after enumerating the four hops between them (``bench.typologies``'
``round_trip``: the three-hop paths its last hop enumerates fall from 110M to 68M on 800k
events).

:func:`implied` finds these. A join filter between two numeric fields, ``x op c * y + d`` with
``c > 0`` and ``op`` one of ``<``, ``<=``, ``>``, ``>=``, is the edge ``x >= c * y + d`` (a
``<`` or ``<=`` one turned around: ``y >= x / c - d / c``) in a graph of ``(edge variable,
field)`` nodes, and a path of such edges composes into one (``x >= c1 * (c2 * z + d2) + d1``,
the scale of every step positive). Each pair of nodes of different edge variables that some
path joins, and no filter of the query joins directly, gets the filter of its shortest path,
non-strict (what a strict chain implies, weakened), marked *implied*.

An implied filter never changes a result: every binding it drops fails the filters it is
composed of. Floating point could make it drop one that passes them (``0.8 * 0.8`` is not
``0.64``), so the engine compares it with a tolerance of ``IMPLIED_TOLERANCE`` of the sides'
magnitude (:func:`core.fields.compare_implied`): it keeps every binding the exact comparison
would and a few more, which the filters it comes from then drop.

Times are left out: their closure, with ``within``, is what
:func:`~monitor.plan.windows.time_bounds` computes for the windows and the range steps, and every
two edge variables of a timed query are joined by ``within`` already. Filters on one edge
variable (selections) and ``=`` (which can join strings) take no part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.times import TIME_FIELD
from monitor.query.ast import FieldRef, Predicate

#: How many steps a chain may have (a path of eight hops has seven ``next`` filters).
MAX_STEPS = 16


@dataclass(frozen=True)
class _Bound:
    """``x >= scale * y + offset``, composed of ``steps`` filters."""

    scale: float
    offset: float
    steps: int


def implied(predicates: Sequence[Predicate]) -> tuple[Predicate, ...]:
    """The implied join filters of ``predicates`` (see the module docstring), in a stable
    order; none where no chain of two filters or more exists."""
    edges: dict[tuple[FieldRef, FieldRef], _Bound] = {}
    direct: set[frozenset[FieldRef]] = set()
    where = (0, 0)
    for p in predicates:
        right = p.right
        if not isinstance(right, FieldRef) or right.edge == p.left.edge:
            continue
        if p.left.next or right.next:  # (a path's, before its rewrite into lengths)
            continue
        left = FieldRef(p.left.edge, p.left.name)
        right = FieldRef(right.edge, right.name)
        direct.add(frozenset((left, right)))
        if (
            p.op not in ("<", "<=", ">", ">=")
            or p.factor <= 0.0
            or TIME_FIELD
            in (
                left.name,
                right.name,
            )
        ):
            continue
        where = (p.line, p.column)
        if p.op in (">", ">="):  # left >= factor * right + offset
            edges.setdefault((left, right), _Bound(p.factor, p.offset, 1))
        else:  # right >= left / factor - offset / factor
            edges.setdefault((right, left), _Bound(1.0 / p.factor, -p.offset / p.factor, 1))
    nodes = sorted({n for pair in edges for n in pair}, key=str)
    out: list[Predicate] = []
    for start in nodes:
        for end, bound in _reached(start, edges).items():
            if end.edge == start.edge or frozenset((start, end)) in direct or bound.steps < 2:
                continue
            out.append(Predicate(start, ">=", end, *where, bound.scale, bound.offset, implied=True))
    return tuple(out)


def _reached(
    start: FieldRef, edges: dict[tuple[FieldRef, FieldRef], _Bound]
) -> dict[FieldRef, _Bound]:
    """Every node a path of edges leads to from ``start``, with the bound of the shortest
    (breadth first; of equal ones, the first found)."""
    found: dict[FieldRef, _Bound] = {}
    frontier = {start: _Bound(1.0, 0.0, 0)}
    while frontier:
        after: dict[FieldRef, _Bound] = {}
        for node, bound in frontier.items():
            for (x, y), step in edges.items():
                if x != node or y == start or y in found or y in frontier or y in after:
                    continue
                if bound.steps + 1 > MAX_STEPS:
                    continue
                # start >= s * node + o and node >= s2 * y + o2 (s > 0):
                # start >= s * s2 * y + (s * o2 + o)
                after[y] = _Bound(
                    bound.scale * step.scale,
                    bound.scale * step.offset + bound.offset,
                    bound.steps + 1,
                )
        found.update(after)
        frontier = after
    return found
