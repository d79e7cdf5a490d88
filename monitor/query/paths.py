"""Paths of variable length: ``transfer{2,6}(a, a) as p`` rewritten into one query per length.

::

    round_trip(a) :=
        transfer{2,6}(a, a) as p,
        p.amount >= 1000, next(p).ts > p.ts, next(p).amount >= 0.8 * p.amount,
        within 7d, distinct.

is five queries over the shared index, ``round_trip{2}`` to ``round_trip{6}``. The one of length
k chains k atoms of the relation, ``transfer(a, p_v1) as p_1, transfer(p_v1, p_v2) as p_2, ...,
transfer(p_v(k-1), a) as p_k``: the path's vertices in hop order are ``a, p_v1, ...`` (in the
head, after the query's own), its events ``p_1 ... p_k``. A predicate on ``p`` holds for every
hop (one copy per hop); one on ``next(p)`` compares each hop with the following one (a copy per
pair of consecutive hops). ``within`` bounds the whole path's time span, and ``distinct`` makes
the path simple: every vertex once, except where the query closes it (``a`` to ``a``).

Each length is a query of its own because worst-case optimal joins plan a fixed shape; the
lengths share the index, so the cost of a path query is the sum of its lengths'. ``explain``
prints every one. At most :data:`MAX_HOPS` hops: the paths of n hops grow as the degree to
the n-th power.
"""

from __future__ import annotations

from dataclasses import replace

from core.errors import QueryError
from monitor.query.ast import Atom, FieldRef, Literal, Predicate, Query

#: The longest path a query may ask for.
MAX_HOPS = 8


def expand_paths(query: Query) -> tuple[Query, ...]:
    """``query`` with its path atom rewritten into one query per length (a query without a
    path: itself). A ``next(...)`` of no path, or more than one path, is a :class:`QueryError`."""
    paths = [a for a in query.atoms if a.hops is not None]
    if not paths:
        for predicate in query.predicates:
            if any(isinstance(r, FieldRef) and r.next for r in (predicate.left, predicate.right)):
                raise _error(
                    query,
                    predicate,
                    f"'{predicate}' in query '{query.name}' compares a hop with the next, and "
                    "the query has no path; bind one like transfer{2,6}(a, b) as p",
                )
        return (query,)
    if len(paths) > 1:
        raise _error(
            query,
            paths[1],
            f"query '{query.name}' has two paths of variable length ('{paths[0]}' and "
            f"'{paths[1]}'); a query has one (split it in two)",
        )
    (path,) = paths
    if query.aggregates:
        raise _error(
            query,
            path,
            f"query '{query.name}' aggregates over path '{path}' of variable length: not yet "
            "supported; aggregate over a path of fixed length, written out",
        )
    _check_next(query, path)
    assert path.hops is not None
    low, high = path.hops
    base = path.edge or path.relation
    taken = set(query.body_variables) | set(query.edges)
    generated = {f"{base}_v{i}" for i in range(1, high)} | {
        f"{base}_{i}" for i in range(1, high + 1)
    }
    clash = sorted(generated & taken)
    if clash:
        raise _error(
            query,
            path,
            f"query '{query.name}' names a variable '{clash[0]}', the name its path '{path}' "
            f"gives a hop or a vertex of its rewrite; rename the variable",
        )
    return tuple(_of_length(query, path, base, k) for k in range(low, high + 1))


def _of_length(query: Query, path: Atom, base: str, k: int) -> Query:
    """The query of the paths of ``k`` hops."""
    start, end = path.variables
    vertices = [f"{base}_v{i}" for i in range(1, k)]
    chain = [start, *vertices, end]
    hops = [f"{base}_{i}" if path.edge else None for i in range(1, k + 1)]
    atoms: list[Atom] = []
    for atom in query.atoms:
        if atom is not path:
            atoms.append(atom)
            continue
        atoms += [
            replace(atom, variables=(chain[i], chain[i + 1]), edge=hops[i], hops=None)
            for i in range(k)
        ]
    predicates: list[Predicate] = []
    for predicate in query.predicates:
        refs = [r for r in (predicate.left, predicate.right) if isinstance(r, FieldRef)]
        mine = [r for r in refs if r.edge == path.edge]
        if not mine:
            predicates.append(predicate)
            continue
        pairs = any(r.next for r in mine)
        for i in range(k - 1 if pairs else k):
            predicates.append(
                replace(
                    predicate,
                    left=_hop(predicate.left, path.edge, hops, i),
                    right=predicate.right
                    if isinstance(predicate.right, Literal)
                    else _hop(predicate.right, path.edge, hops, i),
                )
            )
    head = query.head + tuple(v for v in vertices if v not in query.head)
    return replace(
        query,
        name=f"{query.name}{{{k}}}",
        head=head,
        atoms=tuple(atoms),
        predicates=tuple(predicates),
    )


def _hop(side: FieldRef, edge: str | None, hops: list[str | None], i: int) -> FieldRef:
    """``side`` of a predicate on path ``edge``, at hop ``i`` (``next(p)``: hop ``i + 1``)."""
    if side.edge != edge:
        return side
    hop = hops[i + 1 if side.next else i]
    assert hop is not None
    return FieldRef(hop, side.name)


def _check_next(query: Query, path: Atom) -> None:
    for predicate in query.predicates:
        for ref in (predicate.left, predicate.right):
            if isinstance(ref, FieldRef) and ref.next and ref.edge != path.edge:
                raise _error(
                    query,
                    predicate,
                    f"'{ref}' in query '{query.name}' reads the hop after '{ref.edge}', which is "
                    f"no path; next() applies to the path variable ('{path.edge}')",
                )


def _error(query: Query, at: Atom | Predicate, message: str) -> QueryError:
    line, column = (at.line, at.column) if at.line else (query.line, query.column)
    return QueryError(message, line=line, column=column, name=query.name)
