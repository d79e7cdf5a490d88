"""The benchmark's queries: the paper's five, symmetry-broken triangles, and a labelled one.

The paper's queries (``triangle``, ``4-clique``, ``diamond``, ``house``, ``5-clique``) are the
engine's built-ins, with join (homomorphism) semantics: on an undirected graph every triangle is
found in all 6 orders, every 4-clique in all 24. ``sym-triangle`` breaks the symmetry with
filters and finds each triangle once. ``fraud`` runs over the labelled workload: a ring of three
transfers through a flagged account (each such ring once per flagged member).
"""

from __future__ import annotations

from monitor.query import BUILTIN_QUERIES, builtin, parse_queries
from monitor.query.ast import Query

EXTRA_QUERIES: dict[str, str] = {
    "sym-triangle": "sym-triangle(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c.",
    "fraud": (
        "fraud(a, b, c) := transfer(a, b), transfer(b, c), transfer(c, a), flagged(a), b < c."
    ),
}

#: Every benchmark query, in report order.
QUERY_NAMES: tuple[str, ...] = ("sym-triangle", *BUILTIN_QUERIES, "fraud")

#: Queries over the labelled workload (relations ``transfer`` and ``flagged``).
LABELLED = frozenset({"fraud"})


def bench_query(name: str) -> Query:
    """The query ``name``: a built-in one or one of :data:`EXTRA_QUERIES`."""
    if name in EXTRA_QUERIES:
        (query,) = parse_queries(EXTRA_QUERIES[name], source=f"<bench {name}>")
        return query
    return builtin(name)


def query_text(name: str) -> str:
    """The text of the query ``name`` (for the report)."""
    text = EXTRA_QUERIES.get(name) or BUILTIN_QUERIES[name]
    return " ".join(text.split())
