"""The five queries of the Delta-BiGJoin paper, built in by name.

Ammar, McSherry, Salihoglu, Joglekar, "Distributed Evaluation of Subgraph Queries Using
Worst-case Optimal Low-Memory Dataflows", PVLDB 11(6), 2018, evaluate ``triangle``,
``4-clique``, ``diamond``, ``house`` and ``5-clique``. Here each one is a directed query over the
binary relation ``e`` over the variables ``a1`` ... ``a5``. Matches use the paper's join
(homomorphism) semantics: no ``distinct`` and no symmetry-breaking filters.

Where the edge lists come from (the paper draws its queries as figures):

- ``triangle``, ``4-clique``, ``5-clique``: the paper authors' implementation,
  frankmcsherry/dataflow-join, README.md, which runs the directed motifs as the edge lists
  ``0 1 0 2 1 2``, ``0 1 0 2 0 3 1 2 1 3 2 3`` and ``0 1 0 2 0 3 0 4 1 2 1 3 1 4 2 3 2 4 3 4``:
  every vertex points to the vertices after it.
- ``diamond``: the Twitter recommendation "diamond" that the paper's introduction cites (Gupta et
  al., "Real-time Twitter recommendation: online motif detection in large dynamic graphs",
  VLDB 2014): a1 points to a2 and a3, which both point to a4. Edge list as ``DiamondQuery`` in
  PerFuchs/edge-frames ``src/main/scala/experiments/Queries.scala`` (a worst-case optimal join
  study citing the paper).
- ``house``: a 4-clique with a "hat", a fifth vertex joined to two of the clique's vertices
  (dataflow-join ``examples/motifs-single.rs``, "Four-clique with hat"; ``HouseQuery`` in the
  same edge-frames file: the square a1 a2 a3 a4 with both diagonals, and the roof a3, a4 -> a5).
"""

from __future__ import annotations

from functools import cache

from core.errors import QueryError
from monitor.query.ast import Query
from monitor.query.parser import parse_queries

#: Built-in query name -> query text, in the paper's order.
BUILTIN_QUERIES: dict[str, str] = {
    "triangle": "triangle(a1, a2, a3) := e(a1, a2), e(a1, a3), e(a2, a3).",
    "4-clique": (
        "4-clique(a1, a2, a3, a4) :=\n"
        "    e(a1, a2), e(a1, a3), e(a1, a4),\n"
        "    e(a2, a3), e(a2, a4),\n"
        "    e(a3, a4).\n"
    ),
    "diamond": "diamond(a1, a2, a3, a4) := e(a1, a2), e(a1, a3), e(a2, a4), e(a3, a4).",
    "house": (
        "house(a1, a2, a3, a4, a5) :=\n"
        "    e(a1, a2), e(a1, a3), e(a1, a4),\n"
        "    e(a2, a3), e(a2, a4),\n"
        "    e(a3, a4),\n"
        "    e(a3, a5), e(a4, a5).\n"
    ),
    "5-clique": (
        "5-clique(a1, a2, a3, a4, a5) :=\n"
        "    e(a1, a2), e(a1, a3), e(a1, a4), e(a1, a5),\n"
        "    e(a2, a3), e(a2, a4), e(a2, a5),\n"
        "    e(a3, a4), e(a3, a5),\n"
        "    e(a4, a5).\n"
    ),
}


def builtin_source(name: str) -> str:
    """The ``source`` that a built-in query's text is parsed with, e.g. ``<builtin triangle>``."""
    return f"<builtin {name}>"


@cache
def builtin(name: str) -> Query:
    """The built-in query ``name``, parsed from its text (positions refer to that text).

    Raises :class:`QueryError` naming the built-in queries when ``name`` is not one of them.
    """
    if name not in BUILTIN_QUERIES:
        raise QueryError(
            f"there is no built-in query '{name}'; the built-in queries are "
            f"{', '.join(BUILTIN_QUERIES)}",
            name=name,
        )
    (query,) = parse_queries(BUILTIN_QUERIES[name], source=builtin_source(name))
    return query
