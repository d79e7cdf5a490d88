"""The types of event fields, as the predicates of a query text fix them.

Event fields have no declared types: their uses fix them. A field compared with a literal has the
literal's kind (``number``, ``string`` or ``bool``); two fields compared with each other have one
type; two fields ordered with ``<``, ``<=``, ``>`` or ``>=`` are numbers. A field belongs to the
relation of the atom that binds its edge variable, so ``t.amount`` and ``u.amount`` are one field
when ``t`` and ``u`` both bind ``transfer`` events, in one query or in two. The fields every event
has, :data:`ID_FIELDS`, are not typed here (the parser checks how they are compared).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import QueryError
from core.times import TIME_FIELD
from monitor.query.ast import FieldRef, Literal, Predicate, Query

#: The fields every event has, with what they hold. They compare with ``=`` and ``!=`` only.
ID_FIELDS: dict[str, str] = {
    "id": "the event id",
    "src": "the source vertex id",
    "dst": "the destination vertex id",
}

#: The operators that order their operands; they need numbers.
ORDER_OPERATORS = frozenset(("<", "<=", ">", ">="))

_KIND_PHRASES = {"number": "a number", "string": "a string", "bool": "a boolean"}

#: (relation, field)
_Field = tuple[str, str]


@dataclass(frozen=True)
class _Use:
    """The use that fixed a field's type: what it was compared with, and where."""

    kind: str
    compared_with: str
    line: int
    column: int


def field_types(queries: Sequence[Query]) -> dict[tuple[str, str], str]:
    """(relation, field) -> ``number``, ``string`` or ``bool``, for every field the predicates of
    ``queries`` (the queries of one text) fix, except :data:`ID_FIELDS`.

    Raises :class:`QueryError` at the first use that gives a field a second type.
    """
    types = FieldTypes()
    for query in queries:
        types.add(query)
    return types.types()


class FieldTypes:
    """The field types fixed by the queries added so far, one query at a time."""

    def __init__(self) -> None:
        self._uses: dict[_Field, _Use] = {}
        # Fields compared with each other while both were untyped: typing one types the others.
        self._links: dict[_Field, list[tuple[_Field, Predicate]]] = {}

    def types(self) -> dict[tuple[str, str], str]:
        """(relation, field) -> type, for every field typed so far."""
        return {key: use.kind for key, use in self._uses.items()}

    def add(self, query: Query) -> None:
        """Type the fields ``query``'s predicates compare; :class:`QueryError` on a conflict."""
        relations = {atom.edge: atom.relation for atom in query.atoms if atom.edge is not None}
        for predicate in query.predicates:
            left = _field(predicate.left, relations)
            right = predicate.right
            if isinstance(right, Literal):
                if left is not None:
                    self._fix(left, right.kind, _KIND_PHRASES[right.kind], predicate)
                continue
            other = _field(right, relations)
            if left is None or other is None:
                continue
            if predicate.op in ORDER_OPERATORS or predicate.factor != 1.0 or predicate.offset:
                using = (
                    f" using '{predicate.op}' (numbers only)"
                    if predicate.op in ORDER_OPERATORS
                    else " with arithmetic (numbers only)"
                )
                self._fix(left, "number", _describe(other) + using, predicate)
                self._fix(other, "number", _describe(left) + using, predicate)
            else:
                self._link(left, other, predicate)
        for condition in query.aggregates:  # (sum, min and max read numbers)
            argument = condition.argument
            if isinstance(argument, FieldRef) and (key := _field(argument, relations)):
                use = Predicate(argument, ">=", Literal(0), condition.line, condition.column)
                self._fix(key, "number", f"a number, by '{condition}'", use)

    def _fix(self, key: _Field, kind: str, compared_with: str, predicate: Predicate) -> None:
        """Give ``key`` type ``kind`` (and so every field linked to it), or fail if it has
        another."""
        known = self._uses.get(key)
        if known is not None:
            if known.kind != kind:
                raise _conflict(key, compared_with, known, predicate)
            return
        self._uses[key] = _Use(kind, compared_with, predicate.line, predicate.column)
        spread = [key]
        while spread:
            source = spread.pop()
            use = self._uses[source]
            for target, link in self._links.pop(source, []):
                if target not in self._uses:
                    described = f"{_describe(source)} ({_KIND_PHRASES[use.kind]})"
                    self._uses[target] = _Use(use.kind, described, link.line, link.column)
                    spread.append(target)

    def _link(self, left: _Field, right: _Field, predicate: Predicate) -> None:
        """Record that ``left`` and ``right`` are compared by ``predicate``: one type for both."""
        if left == right:
            return
        left_use, right_use = self._uses.get(left), self._uses.get(right)
        if left_use is not None:
            described = f"{_describe(left)} ({_KIND_PHRASES[left_use.kind]})"
            self._fix(right, left_use.kind, described, predicate)
        elif right_use is not None:
            described = f"{_describe(right)} ({_KIND_PHRASES[right_use.kind]})"
            self._fix(left, right_use.kind, described, predicate)
        else:
            self._links.setdefault(left, []).append((right, predicate))
            self._links.setdefault(right, []).append((left, predicate))


def time_fields(queries: Sequence[Query]) -> set[tuple[str, str]]:
    """(relation, field) for the fields that hold times besides ``ts``: those a predicate
    compares with a ``ts`` (``y.opened >= t.ts - 30d``). Their values are read as ``ts``'s are,
    milliseconds or ISO-8601 strings with an offset, and kept as milliseconds."""
    out: set[tuple[str, str]] = set()
    for query in queries:
        relations = {atom.edge: atom.relation for atom in query.atoms if atom.edge is not None}
        for predicate in query.predicates:
            right = predicate.right
            if not isinstance(right, FieldRef):
                continue
            for one, other in ((predicate.left, right), (right, predicate.left)):
                if one.name == TIME_FIELD and other.name != TIME_FIELD:
                    key = _field(other, relations)
                    if key is not None:
                        out.add(key)
    return out


def _field(ref: FieldRef, relations: dict[str, str]) -> _Field | None:
    """The (relation, field) ``ref`` reads; ``None`` for an id field or an unbound edge."""
    if ref.name in ID_FIELDS or ref.edge not in relations:
        return None
    return (relations[ref.edge], ref.name)


def _describe(key: _Field) -> str:
    return f"field '{key[1]}' of relation '{key[0]}'"


def _conflict(key: _Field, compared_with: str, known: _Use, predicate: Predicate) -> QueryError:
    """The error for comparing ``key`` with ``compared_with`` at ``predicate``, unlike ``known``."""
    return QueryError(
        f"{_describe(key)} is compared with {compared_with} here but with {known.compared_with} "
        f"at line {known.line}, column {known.column}; a field has one type",
        line=predicate.line,
        column=predicate.column,
        name=key[1],
    )
