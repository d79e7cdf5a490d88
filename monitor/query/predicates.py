"""Parsing the predicates of a query: field references, literals and their checks.

``t.field OP literal`` and ``t.field OP u.field``, ``OP`` one of ``< <= > >= = !=``; literals
are numbers, double-quoted strings and ``true``/``false``. Order comparisons need numbers;
``id``, ``src`` and ``dst`` compare with ``=`` and ``!=`` only. Field types across the text are
checked by :mod:`monitor.query.types`.

Field arithmetic on the right-hand field: ``t2.ts <= t1.ts + 10m`` (a duration added to or
subtracted from a time, both sides ``ts``) and ``t2.amount >= 0.9 * t1.amount`` (a number times
a number field). ``ts`` is the event's time (:mod:`core.times`): compared with numbers of
milliseconds, or with an ISO-8601 string, read as the time it names.
"""

from __future__ import annotations

import math

from core.errors import InputError, QueryError
from core.times import TIME_FIELD, parse_duration, parse_time
from monitor.query.ast import PREDICATE_OPERATORS, FieldRef, Literal, Predicate
from monitor.query.tokens import LETTERS, VARIABLE_CHARS, number_value
from monitor.query.tokens import Token as _Token
from monitor.query.types import ID_FIELDS, ORDER_OPERATORS
from monitor.query.validate import ParsedQuery as _ParsedQuery

_BOOLEANS = {"true": True, "false": False}
_PREDICATE_OPERATORS_TEXT = ", ".join(PREDICATE_OPERATORS)
_FIELD_RULE = (
    "a field reference is an edge variable, '.' and a field name with no spaces, like t.amount; "
    "both use ASCII letters, digits and '_', and start with a letter or '_'"
)
_ID_RULE = (
    "id, src and dst compare with = and != only, against a string or number literal or the "
    "id, src or dst of an event"
)


def is_variable(word: str) -> bool:
    """Whether ``word`` is a valid variable (and field) name."""
    return word[0] in LETTERS and all(c in VARIABLE_CHARS for c in word)


class PredicateParsing:
    """The parser's half that reads predicates; mixed into the parser, whose tokens it reads."""

    def _next(self) -> _Token:
        raise NotImplementedError

    def _fail(self, message: str, token: _Token, name: str | None = None) -> QueryError:
        raise NotImplementedError

    def _fail_on(self, token: _Token, message: str) -> QueryError:
        raise NotImplementedError

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
        factor, offset = 1.0, 0.0
        if operand.kind == "number" and self._peek().kind == "arith" and self._peek().text == "*":
            factor = self._factor(operand, query)
            self._next()
            operand = self._next()
            if operand.kind != "field":
                raise self._fail(
                    f"expected a field like t.amount after '*' in query '{query}', found "
                    f"{operand.describe()}",
                    operand,
                )
        right = self._operand(operand, op, query)
        if left.name == TIME_FIELD and isinstance(right, Literal):
            right = self._time_literal(right, operand, query)
        if isinstance(right, FieldRef) and self._peek().kind == "arith":
            offset = self._offset(left, right, query)
        predicate = Predicate(
            left, op.text, right, left_token.line, left_token.column, factor, offset
        )
        tokens = [left_token, operand] if isinstance(right, FieldRef) else [left_token]
        self._check_predicate(predicate, query, tokens, op, operand)
        self._check_arithmetic(predicate, query, operand)
        parsed.predicates.append((predicate, tokens))

    def _peek(self) -> _Token:
        raise NotImplementedError

    def _factor(self, token: _Token, query: str) -> float:
        value = float(number_value(token.text))
        if not math.isfinite(value):
            raise self._fail(f"number {token.text} in query '{query}' is too large", token)
        return value

    def _offset(self, left: FieldRef, right: FieldRef, query: str) -> float:
        """``+ D`` or ``- D`` after a right-hand time field."""
        sign = self._next()
        if sign.text == "*":
            raise self._fail(
                f"'{right} *' in query '{query}': write the number first, like 0.9 * {right}",
                sign,
            )
        duration = self._next()
        if duration.kind != "duration":
            raise self._fail(
                f"expected a duration like 10m after '{right} {sign.text}' in query '{query}', "
                f"found {duration.describe()}; a time plus or minus a duration (units ms, s, m, "
                "h, d) is the only sum a predicate takes",
                duration,
            )
        if TIME_FIELD not in (left.name, right.name):
            raise self._fail(
                f"'{right} {sign.text} {duration.text}' in query '{query}': a duration is added "
                f"to or subtracted from a time, so one side compares a '{TIME_FIELD}' field (the "
                f"other is then a time too, like an account's opening date)",
                sign,
            )
        ms = parse_duration(duration.text)
        return ms if sign.text == "+" else -ms

    def _time_literal(self, literal: Literal, token: _Token, query: str) -> Literal:
        """A literal compared with ``ts``: milliseconds, or an ISO-8601 time read as such."""
        if isinstance(literal.value, str):
            try:
                return Literal(parse_time(literal.value))
            except InputError as error:
                raise self._fail(f"in query '{query}': {error.message}", token) from None
        if isinstance(literal.value, bool):
            raise self._fail(
                f"'{TIME_FIELD}' is a time, compared in query '{query}' with {literal}; compare it "
                "with milliseconds since the epoch or an ISO-8601 string",
                token,
            )
        return literal

    def _check_arithmetic(self, predicate: Predicate, query: str, token: _Token) -> None:
        """A factor multiplies a number field: never a time, an id or a string."""
        if predicate.factor == 1.0:
            return
        names = {predicate.left.name, getattr(predicate.right, "name", "")}
        if names & {TIME_FIELD, *ID_FIELDS}:
            raise self._fail(
                f"predicate '{predicate}' of query '{query}' multiplies a time or an id; a number "
                f"times a field applies to number fields (a time takes + or - a duration)",
                token,
            )

    def _field(self, token: _Token, query: str) -> FieldRef:
        """The field reference ``token`` (a ``field`` token) spells."""
        edge, _, name = token.text.partition(".")
        following = edge.startswith("next(") and edge.endswith(")")
        if following:
            edge = edge[len("next(") : -1]
        if not is_variable(edge) or not is_variable(name):
            raise self._fail_on(
                token,
                f"'{token.text}' is not a valid field reference in query '{query}'; {_FIELD_RULE}",
            )
        return FieldRef(edge, name, next=following)

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
