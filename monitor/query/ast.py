"""The parsed form of a query: plain frozen data, no behaviour beyond printing.

A :class:`Query` is a conjunction of :class:`Atom` s (uses of relations) and :class:`Filter` s
(comparisons between variables), with an optional ``distinct`` flag. Variables are query vertices.
Positions (``line``, ``column``) are 1-based and point at the first character of the construct in
the query text; built-in queries carry positions in their own text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Comparison operators a filter may use, between two variables.
FILTER_OPERATORS = ("<", "<=", ">", ">=", "!=")


@dataclass(frozen=True)
class Atom:
    """One use of a relation: ``transfer(a, b)``. Arity = ``len(variables)``."""

    relation: str
    variables: tuple[str, ...]
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)

    def __str__(self) -> str:
        return f"{self.relation}({', '.join(self.variables)})"


@dataclass(frozen=True)
class Filter:
    """A comparison ``left op right`` between two variables of the query.

    Order comparisons use the order of the external vertex ids: integers by value, strings
    lexicographically, every integer before every string.
    """

    left: str
    op: str
    right: str
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True)
class Query:
    """``name(head) := atoms, filters[, distinct].``

    ``head`` lists the output variables in output order; every variable of the body is in the head.
    ``distinct`` asks for subgraph-monomorphism semantics (all variables bound to different
    vertices); without it matches are homomorphisms, as in the paper.
    """

    name: str
    head: tuple[str, ...]
    atoms: tuple[Atom, ...]
    filters: tuple[Filter, ...] = ()
    distinct: bool = False
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)

    @property
    def variables(self) -> tuple[str, ...]:
        """The query's variables, in head order."""
        return self.head

    @property
    def relations(self) -> dict[str, int]:
        """Relation name -> arity, for every relation the query uses."""
        return {atom.relation: len(atom.variables) for atom in self.atoms}

    def __str__(self) -> str:
        body = [str(a) for a in self.atoms] + [str(f) for f in self.filters]
        if self.distinct:
            body.append("distinct")
        return f"{self.name}({', '.join(self.head)}) := {', '.join(body)}."
