"""Parse query text into :class:`~monitor.query.ast.Query` values and check that each is valid.

The language is a small Datalog dialect, one query per rule, each rule ending with ``.``::

    % comments start with % or # and run to the end of the line
    triangle(a, b, c) := e(a, b), e(b, c), e(a, c).
    cycle3(a, b, c)   := transfer(a, b), transfer(b, c), transfer(c, a), distinct.
    ring(a, b, c)     := shares(a, b), shares(b, c), shares(a, c), a < b, b < c.

Grammar::

    text     := query*
    query    := NAME "(" VAR ("," VAR)* ")" ":=" item ("," item)* "."
    item     := RELATION "(" VAR ("," VAR)* ")"      an atom, any arity >= 1
              | VAR OP VAR                            a filter, OP in FILTER_OPERATORS
              | "distinct"                            at most once per query

Names: a query name is ASCII letters, digits, ``_`` and ``-`` starting with a letter or ``_``, or
with a digit when it contains a letter (``4-clique``); a relation name the same but never starting
with a digit; a variable letters, digits and ``_`` starting with a letter or ``_``. ``distinct`` is
a keyword, never a variable or relation.

A valid query uses every head variable in some atom and every atom variable in its head, lists each
head variable once, has at least one atom, and its atoms' variables form one connected graph (two
variables are adjacent when they share an atom). Filters compare two different variables that
atoms bind. Within one text, query names are unique and each relation has a single arity.

Every error is a :class:`~core.errors.QueryError` with the 1-based line and column of the
offending token and, when there is one, the offending identifier as ``name``.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

from core.errors import QueryError
from monitor.query.ast import FILTER_OPERATORS, Atom, Filter, Query

_LETTERS = frozenset(string.ascii_letters + "_")
_DIGITS = frozenset(string.digits)
_VARIABLE_CHARS = _LETTERS | _DIGITS
_NAME_CHARS = _VARIABLE_CHARS | {"-"}
_PUNCTUATION = frozenset("(),.")
_COMMENT_STARTS = frozenset("%#")
_DISTINCT = "distinct"
_OPERATORS_TEXT = ", ".join(FILTER_OPERATORS)

_QUERY_NAME_RULE = (
    "query names use ASCII letters, digits, '_' and '-', and start with a letter or '_' "
    "(or with a digit when they contain a letter, like 4-clique)"
)
_RELATION_NAME_RULE = (
    "relation names use ASCII letters, digits, '_' and '-', and start with a letter or '_'"
)
_VARIABLE_RULE = "variables use ASCII letters, digits and '_', and start with a letter or '_'"


@dataclass(frozen=True)
class _Token:
    """One token: ``kind`` is ``word``, ``op``, ``:=``, one of ``(),.``, ``other`` or ``end``."""

    kind: str
    text: str
    line: int
    column: int

    def describe(self) -> str:
        """The token as error messages show it after "found"."""
        if self.kind == "end":
            return "end of text"
        return repr(self.text) if self.kind == "other" else f"'{self.text}'"


@dataclass
class _ParsedQuery:
    """One query as parsed, with the token of every variable use, before validation."""

    name: _Token
    head: list[_Token] = field(default_factory=list)
    atoms: list[tuple[Atom, list[_Token]]] = field(default_factory=list)
    filters: list[tuple[Filter, _Token, _Token]] = field(default_factory=list)
    distinct: _Token | None = None


def parse_queries(text: str, source: str = "<query>") -> tuple[Query, ...]:
    """Parse every query in ``text``, validate each, and return them in text order.

    ``source`` names where the text came from (a file path, say); it is added to error messages
    unless it is the default ``<query>``. Raises :class:`QueryError` at the first problem.
    """
    return _Parser(_tokenize(text), source).parse()


def _error(message: str, token: _Token, source: str, name: str | None = None) -> QueryError:
    """A :class:`QueryError` at ``token``'s position, naming ``source`` unless it is the default."""
    if source != "<query>":
        message = f"{message} (in {source})"
    return QueryError(message, line=token.line, column=token.column, name=name)


def _tokenize(text: str) -> list[_Token]:
    """Split ``text`` into tokens, dropping whitespace and comments; the last token is ``end``.

    A character that starts no token becomes an ``other`` token, so that the parser reports it
    with what it expected at that place.
    """
    tokens: list[_Token] = []
    line, line_start, i = 1, 0, 0
    while i < len(text):
        char, column = text[i], i - line_start + 1
        if char == "\n":
            line, line_start, i = line + 1, i + 1, i + 1
        elif char.isspace():
            i += 1
        elif char in _COMMENT_STARTS:
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif char in _NAME_CHARS and char != "-":
            start = i
            while i < len(text) and text[i] in _NAME_CHARS:
                i += 1
            tokens.append(_Token("word", text[start:i], line, column))
        elif char in _PUNCTUATION:
            tokens.append(_Token(char, char, line, column))
            i += 1
        elif text.startswith(":=", i):
            tokens.append(_Token(":=", ":=", line, column))
            i += 2
        elif text.startswith(("<=", ">=", "!="), i):
            tokens.append(_Token("op", text[i : i + 2], line, column))
            i += 2
        elif char in "<>":
            tokens.append(_Token("op", char, line, column))
            i += 1
        else:
            tokens.append(_Token("other", char, line, column))
            i += 1
    tokens.append(_Token("end", "", line, len(text) - line_start + 1))
    return tokens


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``2 variables``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _is_variable(word: str) -> bool:
    """Whether ``word`` is a valid variable name."""
    return word[0] in _LETTERS and all(c in _VARIABLE_CHARS for c in word)


def _is_relation_name(word: str) -> bool:
    """Whether ``word`` is a valid relation name."""
    return word[0] in _LETTERS and all(c in _NAME_CHARS for c in word)


def _is_query_name(word: str) -> bool:
    """Whether ``word`` is a valid query name (digit-first names need a letter, like 4-clique)."""
    if not all(c in _NAME_CHARS for c in word):
        return False
    return word[0] in _LETTERS or (word[0] in _DIGITS and any(c.isalpha() for c in word))


class _Parser:
    """Recursive-descent parser over a token list; also checks what spans queries of one text."""

    def __init__(self, tokens: list[_Token], source: str) -> None:
        self.tokens = tokens
        self.source = source
        self.position = 0
        self.query: str | None = None
        self.query_names: dict[str, _Token] = {}
        self.arities: dict[str, tuple[int, Atom]] = {}

    def parse(self) -> tuple[Query, ...]:
        """Parse queries until the end of the text."""
        queries: list[Query] = []
        while self._peek().kind != "end":
            self.query = None
            queries.append(self._query())
        return tuple(queries)

    def _peek(self, ahead: int = 0) -> _Token:
        """The token ``ahead`` places after the current one (``end`` past the end)."""
        return self.tokens[min(self.position + ahead, len(self.tokens) - 1)]

    def _next(self) -> _Token:
        """Consume and return the current token."""
        token = self._peek()
        self.position = min(self.position + 1, len(self.tokens) - 1)
        return token

    def _fail(self, message: str, token: _Token, name: str | None = None) -> QueryError:
        """A :class:`QueryError` at ``token`` naming ``name``, else the query being parsed."""
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
        name = self._expect(("word",), "a query name", "to start a query")
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
            token = self._expect(("word",), "a variable", f"in {where}")
            if token.text == _DISTINCT:
                raise self._fail_on(
                    token, f"'{_DISTINCT}' is a keyword, not a variable, in {where}"
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
        """Parse one body item (atom, filter or ``distinct``) into ``parsed``."""
        query = parsed.name.text
        word = self._expect(
            ("word",),
            "an atom like e(a, b), a filter like a < b, or 'distinct'",
            f"in the body of query '{query}'",
        )
        follower = self._peek()
        if word.text == _DISTINCT and follower.kind not in ("(", "op"):
            if parsed.distinct is not None:
                first = parsed.distinct
                raise self._fail_on(
                    word,
                    f"'{_DISTINCT}' appears twice in query '{query}' (first at line {first.line}, "
                    f"column {first.column}); write it once",
                )
            parsed.distinct = word
        elif follower.kind == "(":
            self._atom(parsed, word)
        elif follower.kind == "op":
            self._filter(parsed, word)
        elif follower.text == "=":
            raise self._fail(
                f"'=' is not a filter operator in query '{query}'; filters use one of "
                f"{_OPERATORS_TEXT} (to require equal values, use the same variable twice)",
                follower,
            )
        else:
            raise self._fail(
                f"expected '(' (for an atom) or one of {_OPERATORS_TEXT} (for a filter) after "
                f"'{word.text}' in the body of query '{query}', found {follower.describe()}",
                follower,
            )

    def _atom(self, parsed: _ParsedQuery, relation: _Token) -> None:
        """Parse ``RELATION(VAR, ...)`` and check the relation's arity against earlier uses."""
        if relation.text == _DISTINCT or not _is_relation_name(relation.text):
            rule = f"'{_DISTINCT}' is a keyword" if relation.text == _DISTINCT else None
            raise self._fail_on(
                relation,
                f"'{relation.text}' is not a valid relation name; {rule or _RELATION_NAME_RULE}",
            )
        self._next()
        where = f"atom '{relation.text}' of query '{parsed.name.text}'"
        uses = self._variables(where)
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

    def _filter(self, parsed: _ParsedQuery, left: _Token) -> None:
        """Parse ``VAR OP VAR``; both sides must be variables, and different ones."""
        query = parsed.name.text
        op = self._next()
        right = self._expect(("word",), "a variable", f"after '{op.text}' in query '{query}'")
        for side in (left, right):
            if side.text == _DISTINCT or not _is_variable(side.text):
                raise self._fail_on(
                    side,
                    f"'{side.text}' is not a valid variable in a filter of query '{query}'; "
                    f"{_VARIABLE_RULE}",
                )
        comparison = Filter(left.text, op.text, right.text, left.line, left.column)
        if left.text == right.text:
            raise self._fail_on(
                left,
                f"filter '{comparison}' compares variable '{left.text}' with itself in query "
                f"'{query}'; a filter compares two different variables",
            )
        parsed.filters.append((comparison, left, right))

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
                if side.text not in bound:
                    raise self._fail_on(
                        side,
                        f"filter variable '{side.text}' of query '{name}' is not used by any "
                        "atom; filters may only compare variables that atoms bind",
                    )
        self._check_connected(name, parsed.atoms)
        return Query(
            name=name,
            head=tuple(token.text for token in parsed.head),
            atoms=tuple(atom for atom, _ in parsed.atoms),
            filters=tuple(comparison for comparison, _, _ in parsed.filters),
            distinct=parsed.distinct is not None,
            line=parsed.name.line,
            column=parsed.name.column,
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
