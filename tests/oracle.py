"""Independent oracles for the engine: a brute-force join and a set-semantics graph model.

Nothing here shares code with ``monitor.engine``: matches are found by trying every assignment
of vertices to variables, and the graph is a Python set updated one update at a time.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from monitor.query.ast import Query

Tuple = tuple[object, ...]
Binding = tuple[object, ...]


def vertex_order(v: object) -> tuple[int, object]:
    """The documented vertex order: integers by value, then strings lexicographically."""
    return (0, v) if isinstance(v, int) else (1, v)


class GraphModel:
    """Relations as Python sets, updated in stream order with set semantics."""

    def __init__(self) -> None:
        self.relations: dict[str, set[Tuple]] = {}

    def apply(self, relation: str, values: Tuple, diff: int) -> bool:
        """Apply one update; whether it changed the set."""
        tuples = self.relations.setdefault(relation, set())
        if diff > 0:
            if values in tuples:
                return False
            tuples.add(values)
            return True
        if values not in tuples:
            return False
        tuples.remove(values)
        return True

    def vertices(self) -> set[object]:
        return {v for tuples in self.relations.values() for t in tuples for v in t}


def brute_force(query: Query, graph: GraphModel) -> set[Binding]:
    """Every binding of the query's head variables that satisfies all atoms and filters."""
    domain = sorted(graph.vertices(), key=vertex_order)
    found: set[Binding] = set()
    for values in itertools.product(domain, repeat=len(query.head)):
        binding = dict(zip(query.head, values, strict=True))
        if query.distinct and len(set(values)) != len(values):
            continue
        if not all(_compare(binding[f.left], f.op, binding[f.right]) for f in query.filters):
            continue
        if all(
            tuple(binding[v] for v in atom.variables) in graph.relations.get(atom.relation, ())
            for atom in query.atoms
        ):
            found.add(values)
    return found


def _compare(left: object, op: str, right: object) -> bool:
    lo, ro = vertex_order(left), vertex_order(right)
    if op == "!=":
        return left != right or type(left) is not type(right)
    return {"<": lo < ro, "<=": lo <= ro, ">": lo > ro, ">=": lo >= ro}[op]


def accumulate(current: dict[Binding, int], deltas: Iterable[tuple[Binding, int]]) -> None:
    """Add signed deltas into running sums, dropping bindings that reach zero."""
    for binding, diff in deltas:
        total = current.get(binding, 0) + diff
        if total:
            current[binding] = total
        else:
            current.pop(binding, None)
