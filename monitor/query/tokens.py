"""Split query text into the tokens :mod:`monitor.query.parser` reads.

Token kinds:

- ``word``: ASCII letters, digits, ``_`` and ``-``, not starting with ``-``: names, keywords,
  ``true`` and ``false``;
- ``number``: ``1000``, ``-5``, ``2.5``, ``1e3``, ``-2.5e-3`` (a run that merely starts with
  digits, like ``4-clique`` or ``1e``, is a word);
- ``duration``: ``500ms``, ``30s``, ``10m``, ``24h``, ``7d`` (:mod:`core.times`);
- ``field``: a field reference like ``t1.amount``: words joined by ``.`` with no space, or
  ``next(p).amount`` (the hop after ``p``'s on a path);
- ``string``: a double-quoted string on one line, with ``\\"`` and ``\\\\`` as its only escapes;
- ``op``: one of ``<``, ``<=``, ``>``, ``>=``, ``=``, ``!=``; ``:=``; each of ``(),.{}``;
- ``arith``: ``+``, ``-`` (where it starts no number) and ``*``, the field arithmetic of
  predicates (``t1.ts + 10m``, ``0.9 * t1.amount``);
- ``other``: a character that starts no token, so the parser can say what it expected there;
- ``error``: a malformed string, with the reason as ``problem``;
- ``end``: after the last token.

A ``.`` directly between two word characters belongs to a field reference (or a number, ``2.5``);
any other ``.`` ends a query, so the ``.`` after ``t.amount > 1000`` ends it.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from core.times import DURATION

LETTERS = frozenset(string.ascii_letters + "_")
DIGITS = frozenset(string.digits)
VARIABLE_CHARS = LETTERS | DIGITS
NAME_CHARS = VARIABLE_CHARS | {"-"}

_PUNCTUATION = frozenset("(),.{}")
#: ``next(p).amount``: a field of the hop after ``p``'s on a path (one ``field`` token).
_NEXT_FIELD = re.compile(r"next\([A-Za-z_][A-Za-z0-9_]*\)\.[A-Za-z_][A-Za-z0-9_]*")
_COMMENT_STARTS = frozenset("%#")
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_ESCAPES = ('"', "\\")
_STRING_RULE = r"inside a string, write \" for a quote and \\ for a backslash"


@dataclass(frozen=True)
class Token:
    """One token; ``value`` is a string token's content, ``problem`` an error token's reason."""

    kind: str
    text: str
    line: int
    column: int
    value: str = ""
    problem: str = ""

    def describe(self) -> str:
        """The token as error messages show it after "found"."""
        if self.kind == "end":
            return "end of text"
        return repr(self.text) if self.kind == "other" else f"'{self.text}'"


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, dropping whitespace and comments; the last token is ``end``.

    Tokenizing stops at an ``error`` token: the parser never reads past one.
    """
    tokens: list[Token] = []
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
        elif duration := _duration_at(text, i):
            tokens.append(Token("duration", duration, line, column))
            i += len(duration)
        elif number := _number_at(text, i):
            tokens.append(Token("number", number, line, column))
            i += len(number)
        elif next_field := _clean_match(_NEXT_FIELD, text, i):
            tokens.append(Token("field", next_field, line, column))
            i += len(next_field)
        elif char in NAME_CHARS and char != "-":
            start, i = i, _word_end(text, i)
            kind = "field" if "." in text[start:i] else "word"
            tokens.append(Token(kind, text[start:i], line, column))
        elif char == '"':
            token, i = _string(text, i, line, column)
            tokens.append(token)
            if token.kind == "error":
                break
        elif char in _PUNCTUATION:
            tokens.append(Token(char, char, line, column))
            i += 1
        elif text.startswith(":=", i):
            tokens.append(Token(":=", ":=", line, column))
            i += 2
        elif text.startswith(("<=", ">=", "!="), i):
            tokens.append(Token("op", text[i : i + 2], line, column))
            i += 2
        elif char in "<>=":
            tokens.append(Token("op", char, line, column))
            i += 1
        elif char in "+-*":
            tokens.append(Token("arith", char, line, column))
            i += 1
        else:
            tokens.append(Token("other", char, line, column))
            i += 1
    tokens.append(Token("end", "", line, len(text) - line_start + 1))
    return tokens


def number_value(text: str) -> int | float:
    """The value of a ``number`` token: an int unless it has a ``.`` or an exponent."""
    return float(text) if any(c in text for c in ".eE") else int(text)


def _joins_words(text: str, i: int) -> bool:
    """Whether ``text[i]`` is a ``.`` directly followed by a word character."""
    return text.startswith(".", i) and i + 1 < len(text) and text[i + 1] in VARIABLE_CHARS


def _duration_at(text: str, i: int) -> str:
    """The duration starting at ``i`` (``10m``), or ``""`` when none ends cleanly there."""
    return _clean_match(DURATION, text, i)


def _number_at(text: str, i: int) -> str:
    """The number starting at ``i``, or ``""`` when none ends cleanly there (``4-clique``)."""
    return _clean_match(_NUMBER, text, i)


def _clean_match(pattern: re.Pattern[str], text: str, i: int) -> str:
    """``pattern`` matched at ``i``, or ``""`` when the match runs on into a word."""
    match = pattern.match(text, i)
    if not match:
        return ""
    end = match.end()
    if end < len(text) and (text[end] in NAME_CHARS or _joins_words(text, end)):
        return ""
    return match.group()


def _word_end(text: str, i: int) -> int:
    """The end of the word (or ``.``-joined words, a field reference) starting at ``i``."""
    while True:
        while i < len(text) and text[i] in NAME_CHARS:
            i += 1
        if not _joins_words(text, i):
            return i
        i += 1


def _string(text: str, start: int, line: int, column: int) -> tuple[Token, int]:
    """The string token whose opening quote is at ``start``, and the index after it."""
    chars: list[str] = []
    i = start + 1
    while i < len(text) and text[i] != "\n":
        char = text[i]
        if char == '"':
            return Token("string", text[start : i + 1], line, column, value="".join(chars)), i + 1
        if char != "\\":
            chars.append(char)
            i += 1
            continue
        escaped = text[i + 1 : i + 2]
        if escaped in ("", "\n"):
            break
        if escaped not in _ESCAPES:
            problem = f"unknown escape '\\{escaped}' in a string; {_STRING_RULE}"
            return Token("error", text[i : i + 2], line, column + i - start, problem=problem), i
        chars.append(escaped)
        i += 2
    problem = f"string not closed: a string ends with '\"' on the line it starts; {_STRING_RULE}"
    return Token("error", text[start:i], line, column, problem=problem), i
