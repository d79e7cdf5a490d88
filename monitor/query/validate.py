"""Validation of a parsed query: the rules the parser's module docstring lists, with errors
that name the line, the column and the offending identifier.

:class:`Validation` is the parser's half that checks a whole query once its text is read
(names, head, atoms, edge variables, predicates, connectivity) and builds the
:class:`~monitor.query.ast.Query`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import QueryError
from core.times import TIME_FIELD
from monitor.query.ast import AggregateCondition, Atom, FieldRef, Filter, Predicate, Query
from monitor.query.tokens import Token as _Token


@dataclass
class ParsedQuery:
    """One query as parsed, with the token of every variable use, before validation."""

    name: _Token
    head: list[_Token] = field(default_factory=list)
    atoms: list[tuple[Atom, list[_Token]]] = field(default_factory=list)
    filters: list[tuple[Filter, _Token, _Token]] = field(default_factory=list)
    distinct: _Token | None = None
    #: ``within D``: its keyword token and D in milliseconds.
    within: tuple[_Token, float] | None = None
    #: Each atom with 'as', and the token of its edge variable.
    bindings: list[tuple[Atom, _Token]] = field(default_factory=list)
    #: Each predicate, with the token of each field reference it reads (left first).
    predicates: list[tuple[Predicate, list[_Token]]] = field(default_factory=list)
    #: Each aggregate condition, with the token of its argument (None for count(*)).
    aggregates: list[tuple[AggregateCondition, _Token | None]] = field(default_factory=list)
    #: ``over D``: its keyword token and D in milliseconds.
    over: tuple[_Token, float] | None = None


class Validation:
    """The checks of a parsed query; mixed into the parser, whose state and errors it uses."""

    source: str
    query_names: dict[str, _Token]

    def _fail(self, message: str, token: _Token, name: str | None = None) -> QueryError:
        raise NotImplementedError

    def _fail_on(self, token: _Token, message: str) -> QueryError:
        raise NotImplementedError

    def _validate(self, parsed: ParsedQuery) -> Query:
        """Check one parsed query (see the module docstring) and build its :class:`Query`."""
        name = parsed.name.text
        if name in self.query_names:
            first = self.query_names[name]
            raise self._fail(
                f"query '{name}' is already defined at line {first.line}, column {first.column}; "
                "each query needs its own name",
                parsed.name,
                name,
            )
        self.query_names[name] = parsed.name
        seen_in_head: set[str] = set()
        for token in parsed.head:
            if token.text in seen_in_head:
                raise self._fail_on(
                    token,
                    f"variable '{token.text}' appears twice in the head of query '{name}'; "
                    "list each variable once",
                )
            seen_in_head.add(token.text)
        if not parsed.atoms:
            raise self._fail(
                f"query '{name}' has no atoms; its body needs at least one atom like e(a, b)",
                parsed.name,
                name,
            )
        uses = [token for _, tokens in parsed.atoms for token in tokens]
        bound = {token.text for token in uses}
        self._check_edges(parsed)
        edges = {token.text for _, token in parsed.bindings}
        for token in parsed.head:
            if token.text not in bound:
                raise self._fail_on(
                    token,
                    f"head variable '{token.text}' of query '{name}' is not used by any atom; "
                    "every head variable must appear in an atom of the body",
                )
        for token in uses if not parsed.aggregates else ():  # (an aggregate's head: its group)
            if token.text not in seen_in_head:
                raise self._fail_on(
                    token,
                    f"variable '{token.text}' is used in the body of query '{name}' but is not "
                    "in its head; every variable of the body must be listed in the head",
                )
        for _, left, right in parsed.filters:
            for side in (left, right):
                if side.text in edges:
                    raise self._fail_on(
                        side,
                        f"filter variable '{side.text}' of query '{name}' is an edge variable; "
                        "filters compare vertex variables, and predicates compare the fields of "
                        f"events, like {side.text}.amount > 100",
                    )
                if side.text not in bound:
                    raise self._fail_on(
                        side,
                        f"filter variable '{side.text}' of query '{name}' is not used by any "
                        "atom; filters may only compare variables that atoms bind",
                    )
        tables = {token.text: atom for atom, token in parsed.bindings if atom.is_table}
        for predicate, tokens in parsed.predicates:
            self._check_predicate_edges(name, predicate, tokens, edges, bound)
            self._check_table_fields(name, predicate, tokens, tables)
        if parsed.within is not None and not parsed.bindings:
            raise self._fail_on(
                parsed.within[0],
                f"'within' in query '{name}' bounds the times of its events, and the query binds "
                "none; bind them with 'as', like transfer(a, b) as t",
            )
        self._check_connected(name, parsed.atoms)
        self._check_aggregates(parsed, bound, edges)
        return Query(
            name=name,
            head=tuple(token.text for token in parsed.head),
            atoms=tuple(atom for atom, _ in parsed.atoms),
            filters=tuple(comparison for comparison, _, _ in parsed.filters),
            distinct=parsed.distinct is not None,
            line=parsed.name.line,
            column=parsed.name.column,
            predicates=tuple(predicate for predicate, _ in parsed.predicates),
            within=parsed.within[1] if parsed.within else None,
            aggregates=tuple(condition for condition, _ in parsed.aggregates),
            over=parsed.over[1] if parsed.over else None,
        )

    def _check_aggregates(self, parsed: ParsedQuery, vertices: set[str], edges: set[str]) -> None:
        """An aggregate counts a variable of the body, or reads a number field of an edge
        variable; ``over`` needs events."""
        name = parsed.name.text
        for condition, token in parsed.aggregates:
            argument = condition.argument
            if token is None:
                continue
            if isinstance(argument, str) and argument not in vertices | edges:
                raise self._fail_on(
                    token,
                    f"aggregate '{condition}' of query '{name}' counts '{argument}', which is not "
                    "a variable of its body; count a vertex variable of an atom, or an edge "
                    "variable bound with 'as'",
                )
            if isinstance(argument, FieldRef):
                if argument.edge not in edges:
                    raise self._fail(
                        f"aggregate '{condition}' of query '{name}' reads edge variable "
                        f"'{argument.edge}', which no atom binds; bind it with 'as', like "
                        f"transfer(a, b) as {argument.edge}",
                        token,
                        argument.edge,
                    )
                if argument.name in ("id", "src", "dst"):
                    raise self._fail_on(
                        token,
                        f"aggregate '{condition}' of query '{name}' reads '{argument.name}', an "
                        f"id; {condition.kind} reads a number field, like "
                        f"{condition.kind}({argument.edge}.amount)",
                    )
        if parsed.over is not None and not parsed.bindings:
            raise self._fail_on(
                parsed.over[0],
                f"'over' in query '{name}' counts the bindings whose events lie within a window "
                "of event time, and the query binds none; bind them with 'as', like "
                "transfer(a, b) as t",
            )

    def _check_edges(self, parsed: ParsedQuery) -> None:
        """Fail if an edge variable is bound twice, is in the head or is also a vertex variable."""
        name = parsed.name.text
        head = {token.text: token for token in parsed.head}
        vertex_atoms: dict[str, Atom] = {}
        for atom, tokens in parsed.atoms:
            for token in tokens:
                vertex_atoms.setdefault(token.text, atom)
        first_bindings: dict[str, Atom] = {}
        for atom, token in parsed.bindings:
            edge = token.text
            if edge in first_bindings:
                first = first_bindings[edge]
                raise self._fail_on(
                    token,
                    f"edge variable '{edge}' is bound twice in query '{name}' (first by "
                    f"'{first}' at line {first.line}, column {first.column}); an edge variable "
                    "names the event of one atom",
                )
            first_bindings[edge] = atom
            if edge in vertex_atoms:
                raise self._fail_on(
                    token,
                    f"'{edge}' is both an edge variable and a vertex variable (in "
                    f"'{vertex_atoms[edge]}') of query '{name}'; give the edge variable a name "
                    "of its own",
                )
            if edge in head:
                raise self._fail_on(
                    head[edge],
                    f"'{edge}' is listed in the head of query '{name}' but is an edge variable "
                    f"(bound by '{atom}'); the head lists vertex variables only, and matches "
                    "give edge variables as edges",
                )

    def _check_predicate_edges(
        self,
        name: str,
        predicate: Predicate,
        tokens: list[_Token],
        edges: set[str],
        vertices: set[str],
    ) -> None:
        """Fail if ``predicate`` reads a field of an edge variable no atom binds."""
        refs = [predicate.left, predicate.right]
        for ref, token in zip(refs, tokens, strict=False):
            if not isinstance(ref, FieldRef) or ref.edge in edges:
                continue
            where = f"predicate '{predicate}' of query '{name}'"
            if ref.edge in vertices:
                message = (
                    f"{where} reads field '{ref.name}' of vertex variable '{ref.edge}'; fields "
                    "belong to events: bind one with 'as', like transfer(a, b) as t, and compare "
                    f"t.{ref.name}"
                )
            else:
                message = (
                    f"{where} uses edge variable '{ref.edge}', which no atom binds; bind it with "
                    f"'as', like transfer(a, b) as {ref.edge}"
                )
            raise self._fail(message, token, ref.edge)

    def _check_table_fields(
        self, name: str, predicate: Predicate, tokens: list[_Token], tables: dict[str, Atom]
    ) -> None:
        """Fail if ``predicate`` reads the time or the ends of a table's record: a table has
        no ``ts`` (it never expires) and its ``key`` is its vertex, already bound."""
        for ref, token in zip([predicate.left, predicate.right], tokens, strict=False):
            if not isinstance(ref, FieldRef) or ref.edge not in tables:
                continue
            atom = tables[ref.edge]
            if ref.name in (TIME_FIELD, "src", "dst", "key"):
                raise self._fail(
                    f"predicate '{predicate}' of query '{name}' reads '{ref}', but '{atom}' "
                    f"binds a record of table '{atom.relation}': it has attributes, no "
                    f"'{TIME_FIELD}' (a table never expires) and no ends (its key is vertex "
                    f"'{atom.variables[0]}'); compare an attribute, like {ref.edge}.opened",
                    token,
                    ref.edge,
                )

    def _check_connected(self, name: str, atoms: list[tuple[Atom, list[_Token]]]) -> None:
        """Fail at the first variable (in text order) not connected to the first atom's ones."""
        reached = set(atoms[0][0].variables)
        grown = True
        while grown:
            grown = False
            for atom, _ in atoms:
                if reached.intersection(atom.variables) and not reached.issuperset(atom.variables):
                    reached.update(atom.variables)
                    grown = True
        for _, tokens in atoms:
            for token in tokens:
                if token.text not in reached:
                    raise self._fail_on(
                        token,
                        f"{token.text} is not connected to the other variables of query '{name}'; "
                        "every atom must share a variable with the rest of the query",
                    )
