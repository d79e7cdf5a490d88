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

from dataclasses import replace

from core.errors import QueryError
from core.times import parse_duration
from monitor.query.aggregates import AggregateParsing
from monitor.query.ast import (
    AGGREGATE_FUNCTIONS,
    FILTER_OPERATORS,
    Atom,
    Filter,
    Query,
)
from monitor.query.paths import MAX_HOPS, expand_paths
from monitor.query.predicates import PredicateParsing
from monitor.query.predicates import is_variable as _is_variable
from monitor.query.tokens import DIGITS, LETTERS, NAME_CHARS, tokenize
from monitor.query.tokens import Token as _Token
from monitor.query.types import FieldTypes
from monitor.query.validate import ParsedQuery as _ParsedQuery
from monitor.query.validate import Validation

_DISTINCT = "distinct"
_AS = "as"
_WITHIN = "within"
_KEYWORDS = (_DISTINCT, _AS, _WITHIN)
_OPERATORS_TEXT = ", ".join(FILTER_OPERATORS)
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


def _is_relation_name(word: str) -> bool:
    """Whether ``word`` is a valid relation name."""
    return word[0] in LETTERS and all(c in NAME_CHARS for c in word)


def _is_query_name(word: str) -> bool:
    """Whether ``word`` is a valid query name (digit-first names need a letter, like 4-clique)."""
    if not all(c in NAME_CHARS for c in word):
        return False
    return word[0] in LETTERS or (word[0] in DIGITS and any(c.isalpha() for c in word))


class _Parser(Validation, PredicateParsing, AggregateParsing):
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
            for query in expand_paths(self._query()):
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
        if self._peek().kind == "{":  # (a query a path was rewritten to, stored: name{n})
            self._next()
            length = self._expect(("number",), "a path's length", f"after '{name.text}{{'")
            self._expect(("}",), "'}'", f"after '{name.text}{{{length.text}'")
            name = replace(name, text=f"{name.text}{{{length.text}}}")
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
        aggregate = self._starts_aggregate(word)
        if parsed.aggregates and not aggregate:
            raise self._fail(
                f"{word.describe()} follows an aggregate condition in query '{query}'; "
                "aggregate conditions like count(*) >= 10 end the body",
                word,
            )
        if aggregate:
            self._aggregate(parsed, word)
        elif word.text in _KEYWORDS and follower.kind not in ("(", "op"):
            self._keyword(parsed, word)
        elif follower.kind in ("(", "{"):
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
        if word.text == _WITHIN:
            self._within(parsed, word)
            return
        if parsed.distinct is not None:
            first = parsed.distinct
            raise self._fail_on(
                word,
                f"'{_DISTINCT}' appears twice in query '{query}' (first at line {first.line}, "
                f"column {first.column}); write it once",
            )
        parsed.distinct = word

    def _within(self, parsed: _ParsedQuery, word: _Token) -> None:
        """``within D``: a duration after the keyword, once per query."""
        query = parsed.name.text
        if parsed.within is not None:
            first = parsed.within[0]
            raise self._fail_on(
                word,
                f"'{_WITHIN}' appears twice in query '{query}' (first at line {first.line}, "
                f"column {first.column}); write it once",
            )
        parsed.within = (word, self._duration_after(_WITHIN, query, "10m, 24h or 7d")[1])

    def _duration_after(self, keyword: str, query: str, examples: str) -> tuple[_Token, float]:
        """The duration after ``keyword`` (``within``, ``over``): its token, its milliseconds."""
        token = self._next()
        if token.kind != "duration":
            raise self._fail_on(
                token,
                f"expected a duration like {examples} after '{keyword}' in query '{query}', "
                f"found {token.describe()}; units are ms, s, m, h and d",
            )
        return token, parse_duration(token.text)

    def _atom(self, parsed: _ParsedQuery, relation: _Token) -> None:
        """Parse ``RELATION(VAR, ...) [as EDGE]`` and check the relation's arity against earlier
        uses."""
        if relation.text in _KEYWORDS or not _is_relation_name(relation.text):
            rule = f"'{relation.text}' is a keyword" if relation.text in _KEYWORDS else None
            raise self._fail_on(
                relation,
                f"'{relation.text}' is not a valid relation name; {rule or _RELATION_NAME_RULE}",
            )
        query = parsed.name.text
        hops = self._hops(relation, query) if self._peek().kind == "{" else None
        self._expect(("(",), "'('", f"after '{relation.text}' in query '{query}'")
        uses = self._variables(f"atom '{relation.text}' of query '{query}'")
        atom = Atom(
            relation.text, tuple(t.text for t in uses), relation.line, relation.column, hops=hops
        )
        if hops is not None and len(uses) != 2:
            raise self._fail_on(
                relation,
                f"path '{atom}' of query '{query}' has {_count(len(uses), 'variable')}; a path "
                "runs from a vertex to a vertex over a binary relation, like transfer{2,6}(a, b)",
            )
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
        if atom.relation in AGGREGATE_FUNCTIONS and self._peek().kind == "op":
            call = "count(distinct v) or count(*)" if atom.relation == "count" else "sum(t.f)"
            raise self._fail_on(
                relation,
                f"'{atom}' is an atom of relation '{atom.relation}' in query '{query}', and "
                f"atoms compare with nothing; an aggregate condition reads like {call}",
            )
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
        if len(uses) not in (1, 2):
            raise self._fail_on(
                edge,
                f"atom '{atom}' binds edge variable '{edge.text}' with '{_AS}', but only binary "
                "relations hold events (src, dst), and unary ones a table of vertex attributes "
                "(account(a) as x)",
            )
        bound = replace(atom, edge=edge.text)
        parsed.atoms[-1] = (bound, uses)
        parsed.bindings.append((bound, edge))

    def _hops(self, relation: _Token, query: str) -> tuple[int, int]:
        """``{m,n}`` or ``{n}`` after a relation's name: a path of m to n hops."""
        brace = self._next()
        where = f"in '{relation.text}{{' of query '{query}'"
        low = high = self._hop_count(self._expect(("number",), "a number of hops", where), query)
        if self._peek().kind == ",":
            self._next()
            high = self._hop_count(self._expect(("number",), "a number of hops", where), query)
        self._expect(("}",), "'}'", f"to close '{relation.text}{{' in query '{query}'")
        if low < 1:
            raise self._fail_on(
                brace,
                f"a path of {relation.text} in query '{query}' has at least 1 hop; write "
                f"{relation.text}{{1,{max(high, 1)}}} for paths of 1 to {max(high, 1)}",
            )
        if high > MAX_HOPS:
            raise self._fail_on(
                brace,
                f"a path of {relation.text} in query '{query}' has at most {MAX_HOPS} hops, not "
                f"{high}: each length is a query of its own, and the paths of n hops grow as "
                f"the accounts' degree to the n-th power; split a longer typology in two",
            )
        if low > high:
            raise self._fail_on(
                brace, f"'{{{low},{high}}}' in query '{query}' asks for {low} to {high} hops"
            )
        return low, high

    def _hop_count(self, token: _Token, query: str) -> int:
        if not token.text.isdigit():
            raise self._fail_on(
                token, f"a number of hops is a whole number in query '{query}', not {token.text}"
            )
        return int(token.text)

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
