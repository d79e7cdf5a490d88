"""Parsing the aggregate conditions that end a query body (issue #35).

::

    condition := AGG OP NUMBER ["over" DURATION]
    AGG       := "count" "(" "*" ")" | "count" "(" "distinct" VAR ")"
               | ("sum" | "min" | "max") "(" FIELD ")"

``count(*)`` counts a group's bindings, ``count(distinct v)`` the different vertices (or events,
for an edge variable) ``v`` takes in them, ``sum``/``min``/``max`` a number field of an edge
variable over them. The head's variables are the group. Conditions come last in the body, and
all must hold; ``over D``, written once (or the same on each), bounds the bindings counted to
those whose events all lie within ``D`` of the watermark.

``count``, ``sum``, ``min`` and ``max`` stay usable as relation names: a use is an aggregate
when its parentheses hold ``*``, ``distinct`` or a field, never a list of variables.
"""

from __future__ import annotations

import math

from core.errors import QueryError
from monitor.query.ast import AGGREGATE_FUNCTIONS, PREDICATE_OPERATORS, AggregateCondition, FieldRef
from monitor.query.tokens import Token as _Token
from monitor.query.tokens import number_value
from monitor.query.validate import ParsedQuery as _ParsedQuery

_OVER = "over"
_OPERATORS_TEXT = ", ".join(PREDICATE_OPERATORS)


class AggregateParsing:
    """The parser's half that reads aggregate conditions; mixed into the parser."""

    def _next(self) -> _Token:
        raise NotImplementedError

    def _peek(self, ahead: int = 0) -> _Token:
        raise NotImplementedError

    def _fail(self, message: str, token: _Token, name: str | None = None) -> QueryError:
        raise NotImplementedError

    def _fail_on(self, token: _Token, message: str) -> QueryError:
        raise NotImplementedError

    def _field(self, token: _Token, query: str) -> FieldRef:
        raise NotImplementedError

    def _expect(self, kinds: tuple[str, ...], expected: str, context: str) -> _Token:
        raise NotImplementedError

    def _duration_after(self, keyword: str, query: str, examples: str) -> tuple[_Token, float]:
        raise NotImplementedError

    def _starts_aggregate(self, word: _Token) -> bool:
        """Whether ``word`` (consumed; ``(`` next) starts an aggregate, not an atom."""
        if word.text not in AGGREGATE_FUNCTIONS or self._peek().kind != "(":
            return False
        inside = self._peek(1)
        return inside.text in ("*", "distinct") or inside.kind == "field"

    def _aggregate(self, parsed: _ParsedQuery, word: _Token) -> None:
        """Parse one condition after its function's name."""
        query = parsed.name.text
        self._next()  # (
        inside = self._next()
        argument: str | FieldRef | None
        token: _Token | None
        if word.text == "count":
            if inside.text == "*":
                kind, argument, token = "count", None, None
            elif inside.text == "distinct":
                token = self._expect(
                    ("word",), "a variable", f"after 'count(distinct' in query '{query}'"
                )
                kind, argument = "count_distinct", token.text
            else:
                raise self._fail_on(
                    inside,
                    f"count takes '*' or 'distinct' and a variable in query '{query}', like "
                    "count(*) or count(distinct a)",
                )
        else:
            if inside.kind != "field":
                raise self._fail_on(
                    inside,
                    f"{word.text} takes a number field in query '{query}', like "
                    f"{word.text}(t.amount)",
                )
            kind, token = word.text, inside
            argument = self._field(inside, query)
        self._expect((")",), "')'", f"to close '{word.text}(' in query '{query}'")
        op = self._expect(
            ("op",), f"one of {_OPERATORS_TEXT}", f"after '{word.text}(...)' in query '{query}'"
        )
        threshold = self._threshold(self._next(), query)
        condition = AggregateCondition(kind, argument, op.text, threshold, word.line, word.column)
        parsed.aggregates.append((condition, token))
        if self._peek().kind == "word" and self._peek().text == _OVER:
            self._over(parsed, self._next())

    def _threshold(self, token: _Token, query: str) -> float:
        negative = token.kind == "arith" and token.text == "-"
        if negative:
            token = self._next()
        if token.kind != "number":
            raise self._fail(
                f"an aggregate compares with a number in query '{query}', found {token.describe()}",
                token,
            )
        try:
            value = float(number_value(token.text))
        except (ValueError, OverflowError):
            value = math.inf
        if not math.isfinite(value):
            raise self._fail(f"number {token.text} in query '{query}' is too large", token)
        return -value if negative else value

    def _over(self, parsed: _ParsedQuery, word: _Token) -> None:
        """``over D`` after a condition: the same D wherever it is written."""
        query = parsed.name.text
        token, window = self._duration_after(_OVER, query, "1h or 24h")
        if parsed.over is not None and parsed.over[1] != window:
            first = parsed.over[0]
            raise self._fail_on(
                word,
                f"'{_OVER} {token.text}' in query '{query}' differs from the window at line "
                f"{first.line}, column {first.column}; the conditions of a query share one "
                "window",
            )
        parsed.over = (word, window)
