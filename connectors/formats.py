"""Record formats: one text line or one JSON record decoded into an :class:`Update`.

Text lines (an edge list as SNAP ships it reads as is)::

    [+|-] src dst [relation]          1 2      - 1 2      + alice bob transfer
    [+|-] relation(id, id, ...)       + flagged(7)        - owns(alice, 42, x)

Fields are separated by ASCII whitespace; the sign is a field of its own (``-1 2`` inserts the
edge from vertex -1 to vertex 2) except before the explicit form, where ``-owns(a, b)`` is
accepted too. No sign means insert. Blank lines and lines whose first non-blank character is
``#`` or ``%`` are comments: they decode to ``None``, not to an error.

A text id that is a decimal integer in canonical form (``0``, ``42``, ``-7``; no ``+``, no leading
zeros) within int64 becomes an ``int``; every other field (``x12``, ``007``, a 20-digit number)
stays a ``str``, so ids round-trip unchanged to the output.

JSON records (a JSON Lines file, or the value of a Kafka record)::

    {"op": "insert", "src": 1, "dst": 2, "relation": "transfer"}
    {"op": "delete", "relation": "owns", "tuple": ["alice", 42, "x"]}

``op`` defaults to ``"insert"``, ``relation`` to the caller's default. Ids are JSON strings or
integers within int64 and keep their JSON type (``"12"`` is the string, ``12`` the integer).

Relation names match ``[A-Za-z_][A-Za-z0-9_-]*``. Every decoding error is an
:class:`~core.errors.InputError` carrying the record's position and a message that says what
was wrong and what is allowed.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from core.errors import InputError
from core.records import INT64_MAX, INT64_MIN, Update, VertexId

DEFAULT_RELATION = "e"

_RELATION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_RELATION_RULE = "letters, digits, '_' and '-', starting with a letter or '_', at most 128"
_TEXT_FORMS = "'[+|-] src dst [relation]' or '[+|-] relation(id, ...)'"
_RELATION_NAME_BYTES = re.compile(rb"[A-Za-z_][A-Za-z0-9_-]*\Z")
_RELATION_CACHE_SIZE = 1024
_MAX_INT_DIGITS = 19
#: The longest string vertex id accepted, in characters; longer ones are bad records.
MAX_ID_LENGTH = 1024
_relation_names: dict[bytes, str] = {}
_json_relations: set[str] = set()
_SIGNS = {b"+": 1, b"-": -1}
_COMMENT_STARTS = frozenset(b"#%")

Decoded = tuple[str, tuple[VertexId, ...], int]
"""What the decoders below produce before it becomes an :class:`Update`: relation, ids, diff."""


#: The longest relation name accepted.
MAX_RELATION_LENGTH = 128


def is_relation_name(name: str) -> bool:
    """Whether ``name`` is an allowed relation name (``[A-Za-z_][A-Za-z0-9_-]*``, at most 128)."""
    return len(name) <= MAX_RELATION_LENGTH and _RELATION_NAME.match(name) is not None


def decode_text_line(
    line: bytes | str, *, default_relation: str = DEFAULT_RELATION, position: str = ""
) -> Update | None:
    """Decode one text line; ``None`` for a blank or comment line.

    Called by sources for every line of a text input (the file source calls the same parser
    through :func:`parse_text_line` on lines its vectorized path cannot take). ``line`` may keep
    its line terminator. Raises :class:`InputError` at ``position`` when the line is malformed.
    """
    try:
        decoded = parse_text_line(line, default_relation)
    except InputError as error:
        raise InputError(error.message, position=position) from None
    if decoded is None:
        return None
    relation, values, diff = decoded
    return Update(relation, values, diff, position)


def decode_json_record(
    raw: bytes, *, default_relation: str = DEFAULT_RELATION, position: str = ""
) -> Update:
    """Decode one JSON record (a JSON Lines line or a Kafka record value).

    Called by sources for every record of a JSON input. Raises :class:`InputError` at
    ``position`` when the record is not valid JSON or not a valid update.
    """
    try:
        relation, values, diff = parse_json_record(raw, default_relation)
    except InputError as error:
        raise InputError(error.message, position=position) from None
    return Update(relation, values, diff, position)


def is_comment(line: bytes) -> bool:
    """Whether a raw line is blank or a comment (first non-blank character ``#`` or ``%``)."""
    stripped = line.lstrip()
    return not stripped or stripped[:1] in (b"#", b"%")


def parse_text_line(line: bytes | str, default_relation: str) -> Decoded | None:
    """The text decoder without a position: ``(relation, ids, diff)``, or ``None`` for a comment.

    Fields are split on ASCII whitespace. Raises :class:`InputError` without a position;
    callers add it.
    """
    if isinstance(line, str):
        line = line.encode("utf-8", "surrogateescape")
    fields = line.split()
    if len(fields) == 2:
        src, dst = fields
        if (
            src.isdigit()
            and dst.isdigit()
            and src[0] != 48
            and dst[0] != 48
            and len(src) < _MAX_INT_DIGITS
            and len(dst) < _MAX_INT_DIGITS
        ):
            return default_relation, (int(src), int(dst)), 1
    elif not fields:
        return None
    first = fields[0]
    if first[0] in _COMMENT_STARTS:
        return None
    diff = 1
    if first in _SIGNS:
        diff = _SIGNS[first]
        del fields[0]
        if not fields:
            raise InputError(f"a sign alone is not an update; expected {_TEXT_FORMS}")
    elif first[:1] in _SIGNS and b"(" in first:
        diff = _SIGNS[first[:1]]
        fields[0] = first[1:]
    if b"(" in fields[0]:
        text = line.strip()
        if text[:1] in _SIGNS:
            text = text[1:].lstrip()
        return _parse_explicit(text, diff)
    if b"(" in line or b")" in line:
        raise InputError(
            f"an id contains a parenthesis in {_show(line.strip())}; the explicit form is "
            "'relation(id, ...)' with no space before '(', and ids cannot contain parentheses"
        )
    if len(fields) == 2:
        return default_relation, (_text_id(fields[0]), _text_id(fields[1])), diff
    if len(fields) == 3:
        return _relation_name(fields[2]), (_text_id(fields[0]), _text_id(fields[1])), diff
    raise InputError(
        f"expected 2 ids and an optional relation name ({_TEXT_FORMS}), got {len(fields)} "
        f"field{'s' if len(fields) != 1 else ''}"
    )


def parse_json_record(raw: bytes | str, default_relation: str) -> Decoded:
    """The JSON decoder without a position: ``(relation, ids, diff)``.

    Raises :class:`InputError` without a position; callers add it.
    """
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise InputError(f"record is not valid JSON: {error}") from None
    if type(record) is dict:
        # The common edge record, checked with as few operations as possible; anything else
        # (and every error) goes through the full check below.
        op = record.get("op", "insert")
        relation = record.get("relation", default_relation)
        src = record.get("src")
        dst = record.get("dst")
        if (
            len(record) == 2 + ("op" in record) + ("relation" in record)
            and (op == "insert" or op == "delete")
            and (
                (type(src) is str and len(src) <= MAX_ID_LENGTH)
                or (type(src) is int and INT64_MIN <= src <= INT64_MAX)
            )
            and (
                (type(dst) is str and len(dst) <= MAX_ID_LENGTH)
                or (type(dst) is int and INT64_MIN <= dst <= INT64_MAX)
            )
            and (
                relation == default_relation
                or (type(relation) is str and relation in _json_relations)
            )
        ):
            return relation, (src, dst), 1 if op == "insert" else -1
    return _check_json_record(record, default_relation)


def _check_json_record(record: Any, default_relation: str) -> Decoded:
    """Every rule of a JSON record, with the message for the first one it breaks."""
    if type(record) is not dict:
        raise InputError(f"a record must be a JSON object, got {_json_kind(record)}")
    op = record.get("op", "insert")
    if op == "insert":
        diff = 1
    elif op == "delete":
        diff = -1
    else:
        raise InputError(f"op must be 'insert' or 'delete', got {_json_repr(op)}")
    relation = record.get("relation", default_relation)
    if type(relation) is not str:
        raise InputError(f"relation must be a string, got {_json_kind(relation)}")
    if not is_relation_name(relation):
        raise InputError(_bad_relation(relation))
    if len(_json_relations) < _RELATION_CACHE_SIZE:
        _json_relations.add(relation)
    if "tuple" in record:
        if "src" in record or "dst" in record:
            raise InputError("give either 'tuple' or 'src' and 'dst', not both")
        items = record["tuple"]
        if type(items) is not list or not items:
            raise InputError(
                f"tuple must be a non-empty array of ids, got {_json_kind(items)}"
                if type(items) is not list
                else "tuple must be a non-empty array of ids, got an empty array"
            )
        values = tuple(_json_id(v, f"tuple[{i}]") for i, v in enumerate(items))
        return relation, values, diff
    missing = [k for k in ("src", "dst") if k not in record]
    if missing:
        raise InputError(
            f"record needs 'src' and 'dst' (or 'tuple' for any arity); "
            f"missing {' and '.join(map(repr, missing))}"
        )
    return relation, (_json_id(record["src"], "src"), _json_id(record["dst"], "dst")), diff


def _parse_explicit(text: bytes, diff: int) -> Decoded:
    """``relation(id, id, ...)`` with the sign already removed."""
    open_at = text.index(b"(")
    relation = _relation_name(text[:open_at].strip())
    if not text.endswith(b")"):
        raise InputError(
            f"expected 'relation(id, ...)' to end with ')', got {_show(text[open_at:])}"
        )
    inner = text[open_at + 1 : -1]
    if not inner.strip():
        raise InputError(f"{relation}() has no ids; give at least one: '{relation}(id, ...)'")
    ids: list[VertexId] = []
    for field in inner.split(b","):
        token = field.strip()
        if not token:
            raise InputError(
                f"empty id in {relation}({_show(inner, quote=False)}); ids are separated by ','"
            )
        if len(token.split()) != 1 or b"(" in token or b")" in token:
            raise InputError(
                f"id {_show(token)} in {relation}(...) contains whitespace or a parenthesis; "
                "use the JSON format for such ids"
            )
        ids.append(_text_id(token))
    return relation, tuple(ids), diff


def _text_id(token: bytes) -> VertexId:
    """A text field as a vertex id: canonical int64 decimal -> ``int``, otherwise ``str``."""
    if token.isdigit():
        if (token[0] != 48 or len(token) == 1) and len(token) <= _MAX_INT_DIGITS:
            value = int(token)
            if value <= INT64_MAX:
                return value
    elif (
        token[0] == 45
        and token[1:].isdigit()
        and token[1] != 48
        and len(token) <= _MAX_INT_DIGITS + 1
    ):
        value = int(token)
        if value >= INT64_MIN:
            return value
    if len(token) > 4 * MAX_ID_LENGTH:
        raise InputError(f"vertex id of {len(token):,} bytes; ids have at most {MAX_ID_LENGTH}")
    try:
        return _checked_length(token.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise InputError(
            f"id {_show(token)} is not valid UTF-8 (byte 0x{token[error.start]:02x} at offset "
            f"{error.start}); text input must be UTF-8"
        ) from None


def _relation_name(token: bytes) -> str:
    """A relation name field, checked against ``[A-Za-z_][A-Za-z0-9_-]*``."""
    name = _relation_names.get(token)
    if name is None:
        if len(token) > MAX_RELATION_LENGTH or _RELATION_NAME_BYTES.match(token) is None:
            raise InputError(_bad_relation(_show(token, quote=False)))
        name = token.decode("ascii")
        if len(_relation_names) < _RELATION_CACHE_SIZE:
            _relation_names[token] = name
    return name


def _show(raw: bytes, *, quote: bool = True) -> str:
    """Raw input as shown in an error message."""
    text = raw.decode("utf-8", "replace")
    return repr(text) if quote else text


def _checked_length(name: str) -> str:
    if len(name) > MAX_ID_LENGTH:
        raise InputError(f"vertex id of {len(name):,} characters; ids have at most {MAX_ID_LENGTH}")
    return name


def _json_id(value: Any, field: str) -> VertexId:
    kind = type(value)
    if kind is str:
        return _checked_length(str(value))
    if kind is int and INT64_MIN <= value <= INT64_MAX:
        return int(value)
    raise InputError(
        f"{field} must be a JSON string or an integer within int64, got {_json_kind(value)}"
    )


def _json_kind(value: Any) -> str:
    """How a decoded JSON value is named in messages (its type and, for scalars, the value)."""
    if value is None:
        return "null"
    if type(value) is bool:
        return f"the boolean {'true' if value else 'false'}"
    if type(value) is int:
        inside = INT64_MIN <= value <= INT64_MAX
        return f"the integer {value}" + ("" if inside else " (outside int64)")
    if type(value) is float:
        return f"the number {value!r}"
    if type(value) is str:
        return f"the string {value!r}"
    if type(value) is list:
        return "an array"
    return "an object"


def _json_repr(value: Any) -> str:
    return repr(value) if type(value) is str else _json_kind(value)


def _bad_relation(name: str) -> str:
    return f"relation name {name!r} is not allowed; use {_RELATION_RULE}"
