"""Parse query text into :class:`~monitor.query.ast.Query` values and check that each is valid.

The language is a small Datalog dialect, one query per rule, each rule ending with ``.``::

    % comments start with % or # and run to the end of the line
    triangle(a, b, c) := e(a, b), e(b, c), e(a, c).
    cycle3(a, b, c)   := transfer(a, b), transfer(b, c), transfer(c, a), distinct.
    ring(a, b, c)     := shares(a, b), shares(b, c), shares(a, c), a < b, b < c.
    flag(a, b)        := transfer(a, b) as t, t.amount >= 1000, t.channel != "cash".

Grammar::

    text     := query*
    query    := NAME "(" VAR ("," VAR)* ")" ":=" item ("," item)* "."
    item     := RELATION "(" VAR ("," VAR)* ")" ["as" EDGE]
                                                  an atom, any arity >= 1; 'as' binary only
              | VAR OP VAR                        a filter, OP in FILTER_OPERATORS
              | FIELD OP (FIELD | LITERAL)        a predicate, OP in PREDICATE_OPERATORS
              | "distinct"                        at most once per query
    FIELD    := EDGE "." NAME                     no spaces: t1.amount
    LITERAL  := NUMBER | STRING | "true" | "false"
                                                  1000, -2.5e3, "cash" (escapes \\" and \\\\)

Names: a query name is ASCII letters, digits, ``_`` and ``-`` starting with a letter or ``_``, or
with a digit when it contains a letter (``4-clique``); a relation name the same but never starting
with a digit; a variable (vertex or edge) and a field name letters, digits and ``_`` starting with
a letter or ``_``. ``distinct`` and ``as`` are keywords, never variables or relations. The ``.``
that ends a query is followed by whitespace, a comment or the end of the text; a ``.`` directly
between two word characters is part of a field reference or a number (:mod:`.tokens`).

A valid query uses every head variable in some atom and every atom variable in its head, lists each
head variable once, has at least one atom, and its atoms' variables form one connected graph (two
variables are adjacent when they share an atom). Filters compare two different vertex variables
that atoms bind. An edge variable is bound by one binary atom, is no vertex variable and is not in
the head. Predicates compare two different fields, or a field with a literal, of edge variables the
query binds; ``<``, ``<=``, ``>`` and ``>=`` need numbers; ``id``, ``src`` and ``dst`` compare with
``=`` and ``!=`` only, with each other or a string or number literal. Within one text, query names
are unique, each relation has a single arity and each field a single type
(:func:`~monitor.query.types.field_types`).

Every error is a :class:`~core.errors.QueryError` with the 1-based line and column of the
offending token and, when there is one, the offending identifier as ``name``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from core.errors import QueryError
from monitor.query.ast import (
    FILTER_OPERATORS,
    PREDICATE_OPERATORS,
    Atom,
    FieldRef,
    Filter,
    Literal,
    Predicate,
    Query,
)
from monitor.query.tokens import DIGITS, LETTERS, NAME_CHARS, VARIABLE_CHARS, number_value, tokenize
from monitor.query.tokens import Token as _Token
from monitor.query.types import ID_FIELDS, ORDER_OPERATORS, FieldTypes

_DISTINCT = "distinct"
_AS = "as"
_KEYWORDS = (_DISTINCT, _AS)
_BOOLEANS = {"true": True, "false": False}
_OPERATORS_TEXT = ", ".join(FILTER_OPERATORS)
_PREDICATE_OPERATORS_TEXT = ", ".join(PREDICATE_OPERATORS)
#: Token kinds read where a name is expected; an invalid one gets the name rule in its error.
_NAMES = ("word", "number", "field")

_QUERY_NAME_RULE = (
    "query names use ASCII letters, digits, '_' and '-', and start with a letter or '_' "
    "(or with a digit when they contain a letter, like 4-clique)"
)
_RELATION_NAME_RULE = (
    "relation names use ASCII letters, digits, '_' and '-', and start with a letter or '_'"
)
_VARIABLE_RULE = "variables use ASCII letters, digits and '_', and start with a letter or '_'"
_FIELD_RULE = (
    "a field reference is an edge variable, '.' and a field name with no spaces, like t.amount; "
    "both use ASCII letters, digits and '_', and start with a letter or '_'"
)
_ID_RULE = (
    "id, src and dst compare with = and != only, against a string or number literal or the "
    "id, src or dst of an event"
)


@dataclass
class _ParsedQuery:
    """One query as parsed, with the token of every variable use, before validation."""

    name: _Token
    head: list[_Token] = field(default_factory=list)
    atoms: list[tuple[Atom, list[_Token]]] = field(default_factory=list)
    filters: list[tuple[Filter, _Token, _Token]] = field(default_factory=list)
    distinct: _Token | None = None
    #: Each atom with 'as', and the token of its edge variable.
    bindings: list[tuple[Atom, _Token]] = field(default_factory=list)
    #: Each predicate, with the token of each field reference it reads (left first).
    predicates: list[tuple[Predicate, list[_Token]]] = field(default_factory=list)


def parse_queries(text: str, source: str = "<query>") -> tuple[Query, ...]:
    """Parse every query in ``text``, validate each, and return them in text order.

    ``source`` names where the text came from (a file path, say); it is added to error messages
    unless it is the default ``<query>``. Raises :class:`QueryError` at the first problem.
    """
    return _Parser(tokenize(text), source).parse()


def _error(message: str, token: _Token, source: str, name: str | None = None) -> QueryError:
    """A :class:`QueryError` at ``token``'s position, naming ``source`` unless it is the default."""
    if source != "<query>":
        message = f"{message} (in {source})"
    return QueryError(message, line=token.line, column=token.column, name=name)


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``2 variables``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _is_variable(word: str) -> bool:
    """Whether ``word`` is a valid variable name."""
    return word[0] in LETTERS and all(c in VARIABLE_CHARS for c in word)


def _is_relation_name(word: str) -> bool:
    """Whether ``word`` is a valid relation name."""
    return word[0] in LETTERS and all(c in NAME_CHARS for c in word)


def _is_query_name(word: str) -> bool:
    """Whether ``word`` is a valid query name (digit-first names need a letter, like 4-clique)."""
    if not all(c in NAME_CHARS for c in word):
        return False
    return word[0] in LETTERS or (word[0] in DIGITS and any(c.isalpha() for c in word))


class _Parser:
    """Recursive-descent parser over a token list; also checks what spans queries of one text."""

    def __init__(self, tokens: list[_Token], source: str) -> None:
        self.tokens = tokens
        self.source = source
        self.position = 0
        self.query: str | None = None
        self.query_names: dict[str, _Token] = {}
        self.arities: dict[str, tuple[int, Atom]] = {}
        self.field_types = FieldTypes()

    def parse(self) -> tuple[Query, ...]:
        """Parse queries until the end of the text."""
        queries: list[Query] = []
        while self._peek().kind != "end":
            self.query = None
            query = self._query()
            self._type_fields(query)
            queries.append(query)
        return tuple(queries)

    def _type_fields(self, query: Query) -> None:
        """Add ``query``'s field uses to the text's field types (see :func:`field_types`)."""
        try:
            self.field_types.add(query)
        except QueryError as error:
            if self.source == "<query>":
                raise
            raise QueryError(
                f"{error.message} (in {self.source})",
                line=error.line,
                column=error.column,
                name=error.name,
            ) from None

    def _peek(self, ahead: int = 0) -> _Token:
        """The token ``ahead`` places after the current one (``end`` past the end)."""
        return self.tokens[min(self.position + ahead, len(self.tokens) - 1)]

    def _next(self) -> _Token:
        """Consume and return the current token."""
        token = self._peek()
        self.position = min(self.position + 1, len(self.tokens) - 1)
        return token

    def _fail(self, message: str, token: _Token, name: str | None = None) -> QueryError:
        """A :class:`QueryError` at ``token`` naming ``name``, else the query being parsed.

        At a malformed token (an ``error`` token) the token's own problem is the message.
        """
        if token.kind == "error":
            message = token.problem
        return _error(message, token, self.source, name or self.query)

    def _fail_on(self, token: _Token, message: str) -> QueryError:
        """A :class:`QueryError` at ``token`` naming the token's own text."""
        return _error(message, token, self.source, token.text)

    def _expect(self, kinds: tuple[str, ...], expected: str, context: str) -> _Token:
        """Consume a token whose kind is one of ``kinds``, or fail saying what was expected."""
        token = self._next()
        if token.kind not in kinds:
            raise self._fail(f"expected {expected} {context}, found {token.describe()}", token)
        return token

    def _query(self) -> Query:
        """Parse one query, from its name to its final ``.``, and validate it."""
        name = self._expect(_NAMES, "a query name", "to start a query")
        if not _is_query_name(name.text):
            raise self._fail(
                f"'{name.text}' is not a valid query name; {_QUERY_NAME_RULE}", name, name.text
            )
        self.query = name.text
        parsed = _ParsedQuery(name)
        self._expect(("(",), "'('", f"after the query name '{name.text}'")
        parsed.head = self._variables(f"the head of query '{name.text}'")
        self._expect((":=",), "':='", f"after the head of query '{name.text}'")
        self._item(parsed)
        while self._peek().kind == ",":
            self._next()
            self._item(parsed)
        self._expect(
            (".",), "',' or '.'", f"in the body of query '{name.text}' (every query ends with '.')"
        )
        return self._validate(parsed)

    def _variables(self, where: str) -> list[_Token]:
        """Parse ``VAR ("," VAR)* ")"`` (the ``(`` is already consumed) and return the tokens."""
        variables: list[_Token] = []
        while True:
            token = self._expect(_NAMES, "a variable", f"in {where}")
            if token.text in _KEYWORDS:
                raise self._fail_on(
                    token, f"'{token.text}' is a keyword, not a variable, in {where}"
                )
            if not _is_variable(token.text):
                raise self._fail_on(
                    token,
                    f"'{token.text}' is not a valid variable in {where}; {_VARIABLE_RULE}",
                )
            variables.append(token)
            if self._expect((",", ")"), "',' or ')'", f"in {where}").kind == ")":
                return variables

    def _item(self, parsed: _ParsedQuery) -> None:
        """Parse one body item (atom, filter, predicate or ``distinct``) into ``parsed``."""
        query = parsed.name.text
        word = self._expect(
            (*_NAMES, "string"),
            "an atom like e(a, b), a filter like a < b, or 'distinct'",
            f"in the body of query '{query}'",
        )
        follower = self._peek()
        if word.text in _KEYWORDS and follower.kind not in ("(", "op"):
            self._keyword(parsed, word)
        elif follower.kind == "(":
            self._atom(parsed, word)
        elif word.kind == "field":
            self._predicate(parsed, word)
        elif word.kind in ("number", "string"):
            raise self._fail(
                f"{word.describe()} cannot start an item in the body of query '{query}'; a "
                "predicate puts the field first, like t.amount >= 1000",
                word,
            )
        elif follower.text == "=":
            raise self._fail(
                f"'=' is not a filter operator in query '{query}'; filters use one of "
                f"{_OPERATORS_TEXT} (to require equal values, use the same variable twice)",
                follower,
            )
        elif follower.kind == "op":
            self._filter(parsed, word)
        else:
            raise self._fail(
                f"expected '(' (for an atom) or one of {_OPERATORS_TEXT} (for a filter) after "
                f"'{word.text}' in the body of query '{query}', found {follower.describe()}",
                follower,
            )

    def _keyword(self, parsed: _ParsedQuery, word: _Token) -> None:
        """``distinct`` as a body item; ``as`` out of place."""
        query = parsed.name.text
        if word.text == _AS:
            raise self._fail_on(
                word,
                f"'{_AS}' starts an item in the body of query '{query}'; it binds an edge "
                "variable right after an atom, like transfer(a, b) as t",
            )
        if parsed.distinct is not None:
            first = parsed.distinct
            raise self._fail_on(
                word,
                f"'{_DISTINCT}' appears twice in query '{query}' (first at line {first.line}, "
                f"column {first.column}); write it once",
            )
        parsed.distinct = word

    def _atom(self, parsed: _ParsedQuery, relation: _Token) -> None:
        """Parse ``RELATION(VAR, ...) [as EDGE]`` and check the relation's arity against earlier
        uses."""
        if relation.text in _KEYWORDS or not _is_relation_name(relation.text):
            rule = f"'{relation.text}' is a keyword" if relation.text in _KEYWORDS else None
            raise self._fail_on(
                relation,
                f"'{relation.text}' is not a valid relation name; {rule or _RELATION_NAME_RULE}",
            )
        self._next()
        query = parsed.name.text
        uses = self._variables(f"atom '{relation.text}' of query '{query}'")
        atom = Atom(relation.text, tuple(t.text for t in uses), relation.line, relation.column)
        known = self.arities.setdefault(atom.relation, (len(uses), atom))
        if known[0] != len(uses):
            raise self._fail(
                f"relation '{atom.relation}' is used with {_count(len(uses), 'variable')} here but "
                f"with {known[0]} at line {known[1].line}, column {known[1].column}; "
                "a relation has one arity everywhere",
                relation,
                atom.relation,
            )
        parsed.atoms.append((atom, uses))
        if self._peek().kind == "word" and self._peek().text == _AS:
            self._next()
            self._edge(parsed, atom, uses)

    def _edge(self, parsed: _ParsedQuery, atom: Atom, uses: list[_Token]) -> None:
        """Parse the edge variable after ``as`` and bind it to ``atom`` (the last atom parsed)."""
        where = f"after '{_AS}' in atom '{atom}' of query '{parsed.name.text}'"
        edge = self._expect(_NAMES, "an edge variable", where)
        if edge.text in _KEYWORDS:
            raise self._fail_on(edge, f"'{edge.text}' is a keyword, not an edge variable, {where}")
        if not _is_variable(edge.text):
            raise self._fail_on(
                edge, f"'{edge.text}' is not a valid edge variable {where}; {_VARIABLE_RULE}"
            )
        if len(uses) != 2:
            raise self._fail_on(
                edge,
                f"atom '{atom}' binds edge variable '{edge.text}' with '{_AS}', but only binary "
                "relations hold events (src, dst)",
            )
        bound = Atom(atom.relation, atom.variables, atom.line, atom.column, edge=edge.text)
        parsed.atoms[-1] = (bound, uses)
        parsed.bindings.append((bound, edge))

    def _filter(self, parsed: _ParsedQuery, left: _Token) -> None:
        """Parse ``VAR OP VAR``; both sides must be variables, and different ones."""
        query = parsed.name.text
        op = self._next()
        right = self._expect(_NAMES, "a variable", f"after '{op.text}' in query '{query}'")
        if right.kind == "field":
            raise self._fail_on(
                right,
                f"filter '{left.text} {op.text} {right.text}' of query '{query}' compares vertex "
                f"variable '{left.text}' with field '{right.text}'; filters compare vertex "
                "variables, and predicates compare fields, like t.amount > u.amount",
            )
        for side in (left, right):
            if side.text in _KEYWORDS or not _is_variable(side.text):
                rule = f"'{_AS}' is a keyword" if side.text == _AS else _VARIABLE_RULE
                raise self._fail_on(
                    side,
                    f"'{side.text}' is not a valid variable in a filter of query '{query}'; {rule}",
                )
        comparison = Filter(left.text, op.text, right.text, left.line, left.column)
        if left.text == right.text:
            raise self._fail_on(
                left,
                f"filter '{comparison}' compares variable '{left.text}' with itself in query "
                f"'{query}'; a filter compares two different variables",
            )
        parsed.filters.append((comparison, left, right))

    def _predicate(self, parsed: _ParsedQuery, left_token: _Token) -> None:
        """Parse ``FIELD OP (FIELD | LITERAL)`` and check the operator fits the operands."""
        query = parsed.name.text
        left = self._field(left_token, query)
        op = self._next()
        if op.kind != "op":
            raise self._fail(
                f"expected one of {_PREDICATE_OPERATORS_TEXT} after field '{left_token.text}' in "
                f"query '{query}', found {op.describe()}",
                op,
            )
        operand = self._next()
        right = self._operand(operand, op, query)
        predicate = Predicate(left, op.text, right, left_token.line, left_token.column)
        tokens = [left_token, operand] if isinstance(right, FieldRef) else [left_token]
        self._check_predicate(predicate, query, tokens, op, operand)
        parsed.predicates.append((predicate, tokens))

    def _field(self, token: _Token, query: str) -> FieldRef:
        """The field reference ``token`` (a ``field`` token) spells."""
        edge, _, name = token.text.partition(".")
        if not _is_variable(edge) or not _is_variable(name):
            raise self._fail_on(
                token,
                f"'{token.text}' is not a valid field reference in query '{query}'; {_FIELD_RULE}",
            )
        return FieldRef(edge, name)

    def _operand(self, token: _Token, op: _Token, query: str) -> FieldRef | Literal:
        """The right side of a predicate: a field reference or a literal."""
        if token.kind == "field":
            return self._field(token, query)
        if token.kind == "string":
            return Literal(token.value)
        if token.kind == "word" and token.text in _BOOLEANS:
            return Literal(_BOOLEANS[token.text])
        if token.kind == "number":
            try:
                value = number_value(token.text)
            except ValueError:  # an int of more digits than Python converts
                value = math.inf
            if isinstance(value, float) and not math.isfinite(value):
                raise self._fail(
                    f"number {token.text} in query '{query}' is too large; predicates use "
                    "64-bit floating-point numbers",
                    token,
                )
            return Literal(value)
        hint = ""
        if token.kind == "word":
            hint = f' (write a string in double quotes: "{token.text}")'
        raise self._fail(
            f"expected a field like t.amount, a number, a double-quoted string, true or false "
            f"after '{op.text}' in query '{query}', found {token.describe()}{hint}",
            token,
        )

    def _check_predicate(
        self,
        predicate: Predicate,
        query: str,
        tokens: list[_Token],
        op: _Token,
        operand: _Token,
    ) -> None:
        """Fail if ``predicate`` compares a field with itself or with the wrong kind of operand."""
        left, right = predicate.left, predicate.right
        where = f"predicate '{predicate}' of query '{query}'"
        if right == left:
            raise self._fail(
                f"{where} compares field '{left}' with itself; a predicate compares two different "
                "fields, or a field with a literal",
                tokens[0],
                left.name,
            )
        refs = [left, right] if isinstance(right, FieldRef) else [left]
        ids = [ref.name for ref in refs if ref.name in ID_FIELDS]
        if ids:
            id_field = f"field '{ids[0]}', {ID_FIELDS[ids[0]]},"
            if predicate.op in ORDER_OPERATORS:
                message = f"{where} orders {id_field} with '{predicate.op}'; {_ID_RULE}"
                raise self._fail(message, op, ids[0])
            if isinstance(right, Literal) and right.kind == "bool":
                message = f"{where} compares {id_field} with {right}; {_ID_RULE}"
                raise self._fail(message, operand, ids[0])
            for ref, token in zip(refs, tokens, strict=True):
                if ref.name not in ID_FIELDS:
                    message = f"{where} compares {id_field} with field '{ref.name}'; {_ID_RULE}"
                    raise self._fail(message, token, ref.name)
        elif (
            isinstance(right, Literal)
            and right.kind != "number"
            and predicate.op in ORDER_OPERATORS
        ):
            kind = "a string" if right.kind == "string" else "a boolean"
            raise self._fail(
                f"{where} compares field '{left.name}' with {kind} using '{predicate.op}'; <, <=, "
                "> and >= need numbers, and strings and booleans compare with = and != only",
                op,
                left.name,
            )

    def _validate(self, parsed: _ParsedQuery) -> Query:
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
        for token in uses:
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
        for predicate, tokens in parsed.predicates:
            self._check_predicate_edges(name, predicate, tokens, edges, bound)
        self._check_connected(name, parsed.atoms)
        return Query(
            name=name,
            head=tuple(token.text for token in parsed.head),
            atoms=tuple(atom for atom, _ in parsed.atoms),
            filters=tuple(comparison for comparison, _, _ in parsed.filters),
            distinct=parsed.distinct is not None,
            line=parsed.name.line,
            column=parsed.name.column,
            predicates=tuple(predicate for predicate, _ in parsed.predicates),
        )

    def _check_edges(self, parsed: _ParsedQuery) -> None:
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
