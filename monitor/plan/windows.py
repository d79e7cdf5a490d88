"""Windows: how long a query needs an event, and the retention of each event relation.

A query's *span* is the largest difference of ``ts`` two of its matched events can have: the
bound its ``within`` and its order and gap predicates put on every two edge variables. Each
such predicate is a difference constraint (``t2.ts <= t1.ts + 10m`` is ``t2 - t1 <= 10m``,
``t1.ts < t2.ts`` is ``t1 - t2 <= 0``), and the tightest bound on ``u - t`` is the shortest
path from ``t`` to ``u`` in the graph of the constraints (Floyd-Warshall over the few edge
variables of a query). ``pass_through`` (``t1.ts <= t2.ts, t2.ts <= t1.ts + 10m``) spans 10
minutes although it has no ``within``.

An event relation's default *retention* is the longest span of the queries that read it: an
event older than that can be in no match with an event still to come, so it can expire without
losing one. A query that leaves some pair of its events unbounded, or that reads the relation
or any relation without an edge variable (a tuple may arrive at any time and complete a match
with old events), needs its events forever: no default retention. ``--retention`` overrides it.
An aggregate query ``over D`` needs its events for ``D``, no more and no less: a binding it
counts lives until its earliest event leaves the window, and none with an older event counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType

from core.times import FOREVER, TIME_FIELD, format_duration
from monitor.query.ast import FieldRef, Predicate, Query


def span(query: Query) -> float:
    """The largest ``ts`` difference of two of ``query``'s events (ms; ``inf``: unbounded;
    ``0`` for one edge variable and ``within``, ``inf`` for one without)."""
    n = len(query.timed_edges)
    if query.over is not None:  # a counted binding lives until it leaves the window, then none
        return query.over  # with an event older than it is counted
    return _body_span(query, n)


def _body_span(query: Query, n: int) -> float:
    if n == 0 or (n == 1 and query.within is None):  # no time constraint at all: no window
        return FOREVER
    bound = time_bounds(query.timed_edges, query.predicates, query.within)
    return max(0.0, max(bound.values()))


def time_bounds(
    edges: Sequence[str], predicates: Sequence[Predicate], within: float | None = None
) -> Mapping[tuple[str, str], float]:
    """For every two edge variables ``(t, u)``, the largest ``u.ts - t.ts`` the order and gap
    predicates (and ``within``) allow (``inf``: unbounded): shortest paths in the graph of
    the difference constraints. Predicates on other fields, or on variables not in ``edges``,
    bound nothing. (Kept per arguments, read-only: the planner asks at every range step.)"""
    return _time_bounds(tuple(edges), tuple(predicates), within)


@lru_cache(maxsize=1024)
def _time_bounds(
    edges: tuple[str, ...], predicates: tuple[Predicate, ...], within: float | None
) -> Mapping[tuple[str, str], float]:
    n = len(edges)
    at = {edge: k for k, edge in enumerate(edges)}
    # bound[t][u]: the largest u.ts - t.ts allowed so far.
    bound = [[0.0 if t == u else math.inf for u in range(n)] for t in range(n)]
    for predicate in predicates:
        right = predicate.right
        if (
            predicate.left.name != TIME_FIELD
            or not isinstance(right, FieldRef)
            or right.name != TIME_FIELD
            or predicate.factor != 1.0
            or predicate.left.edge == right.edge
            or predicate.left.edge not in at
            or right.edge not in at
        ):
            continue
        left, other, offset = at[predicate.left.edge], at[right.edge], predicate.offset
        if predicate.op in ("<", "<=", "="):  # left - other <= offset
            bound[other][left] = min(bound[other][left], offset)
        if predicate.op in (">", ">=", "="):  # other - left <= -offset
            bound[left][other] = min(bound[left][other], -offset)
    if within is not None:
        for t in range(n):
            for u in range(n):
                if t != u:
                    bound[t][u] = min(bound[t][u], within)
    for k in range(n):
        for t in range(n):
            for u in range(n):
                bound[t][u] = min(bound[t][u], bound[t][k] + bound[k][u])
    return MappingProxyType({(t, u): bound[at[t]][at[u]] for t in edges for u in edges})


def retentions(
    queries: Sequence[Query], events: set[str], overrides: Mapping[str, float]
) -> dict[str, float]:
    """Per event relation, how long its events live after their ``ts`` (ms; ``inf``: until
    deleted): ``overrides`` where given, else the longest span of the queries reading it."""
    out: dict[str, float] = {}
    tables = frozenset().union(*(q.tables for q in queries))
    for relation in sorted(events - tables):  # (a table's records never expire)
        if relation in overrides:
            out[relation] = overrides[relation]
            continue
        longest = 0.0
        for query in queries:
            if relation not in query.relations:
                continue
            # (an aggregate over a window counts no binding with an event older than it)
            bare = query.over is None and any(
                atom.edge is None and atom.relation not in tables for atom in query.atoms
            )
            longest = max(longest, FOREVER if bare else span(query))
        out[relation] = longest
    return out


def describe(retention: Mapping[str, float]) -> str:
    """``transfer 24h, logins forever``: for logs and ``explain``."""
    return ", ".join(
        f"{relation} {'forever' if math.isinf(ms) else format_duration(ms)}"
        for relation, ms in sorted(retention.items())
    )
