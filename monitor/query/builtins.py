"""The five queries of the Delta-BiGJoin paper, built in by name.

Ammar, McSherry, Salihoglu, Joglekar, "Distributed Evaluation of Subgraph Queries Using
Worst-case Optimal Low-Memory Dataflows", PVLDB 11(6), 2018, evaluate ``triangle``,
``4-clique``, ``diamond``, ``house`` and ``5-clique``. Here each one is a directed query over the
binary relation ``e`` over the variables ``a1`` ... ``a5``. Matches use the paper's join
(homomorphism) semantics: no ``distinct`` and no symmetry-breaking filters.

Each is written exactly as the paper's Datalog in its section 5 lists it, atom for atom and in
the same order (``triangle``, ``4-clique`` and ``5-clique`` are also the directed motifs that the
authors' implementation, frankmcsherry/dataflow-join, runs: every vertex points to the vertices
after it):

- ``diamond := e(a1, a2), e(a2, a3), e(a4, a1), e(a4, a3)``: a 4-cycle a1 a2 a3 a4, oriented
  so that a4 reaches a3 directly and through a1 and a2.
- ``house := e(a1, a2), e(a1, a3), e(a1, a4), e(a2, a3), e(a2, a4), e(a3, a4), e(a2, a5),
  e(a3, a5)``: a 4-clique a1 a2 a3 a4 with a "hat", a5, joined to a2 and a3.
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
    "diamond": "diamond(a1, a2, a3, a4) := e(a1, a2), e(a2, a3), e(a4, a1), e(a4, a3).",
    "house": (
        "house(a1, a2, a3, a4, a5) :=\n"
        "    e(a1, a2), e(a1, a3), e(a1, a4),\n"
        "    e(a2, a3), e(a2, a4),\n"
        "    e(a3, a4),\n"
        "    e(a2, a5), e(a3, a5).\n"
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
