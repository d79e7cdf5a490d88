"""Event fields as typed columns, and the comparisons predicates make over them.

A field has one kind per relation: ``number`` (``float64``; NaN where an event lacks it),
``string`` (``int32`` codes into the field's own dictionary; -1 where absent) or ``bool``
(``int8`` 1 or 0; -1 where absent). A comparison with an absent value is false, whatever the
operator (``!=`` included): a field a record lacks makes the predicate false for it.

:class:`FieldTest` is one predicate in the form both the index (selections, applied where an
atom's events are stored) and the engine (join filters across edge variables) evaluate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

KINDS = ("number", "string", "bool")
OPERATORS = ("<", "<=", ">", ">=", "=", "!=")
#: Operators that need an order: numbers only.
ORDERED = ("<", "<=", ">", ">=")

DTYPES = {"number": np.float64, "string": np.int32, "bool": np.int8}
ABSENT = {"number": np.nan, "string": -1, "bool": -1}


def column_kind(column: npt.NDArray[Any]) -> str:
    """The kind of a batch column: ``float64`` numbers, ``int8`` booleans, ``object`` strings
    (``None`` where absent)."""
    if column.dtype == np.float64:
        return "number"
    if column.dtype == np.int8:
        return "bool"
    if column.dtype == object:
        return "string"
    raise ValueError(f"a field column is float64, int8 or object, not {column.dtype}")


def to_column(kind: str, values: list[Any]) -> npt.NDArray[Any]:
    """A batch column of ``kind`` from JSON values (None where absent)."""
    if kind == "number":
        return np.array([np.nan if v is None else v for v in values], np.float64)
    if kind == "bool":
        return np.array([-1 if v is None else int(v) for v in values], np.int8)
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def absent_column(kind: str, n: int) -> npt.NDArray[Any]:
    """A batch column of ``n`` absent values."""
    if kind == "string":
        return np.full(n, None, dtype=object)
    return np.full(n, ABSENT[kind], DTYPES[kind])


def kind_of(value: object) -> str | None:
    """The kind of a JSON value (None for null, lists and objects, which are not fields)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def present(values: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Where a column holds a value."""
    if values.dtype == np.float64:
        return np.asarray(~np.isnan(values), np.bool_)
    return np.asarray(values >= 0, np.bool_)


def affine(values: npt.NDArray[Any], factor: float, offset: float) -> npt.NDArray[Any]:
    """``factor * values + offset`` of a number column (absent values stay absent, NaN)."""
    if factor == 1.0 and offset == 0.0:
        return values
    return values * factor + offset


def compare(left: npt.NDArray[Any], op: str, right: Any) -> npt.NDArray[np.bool_]:
    """``left op right`` row by row; false where either side is absent."""
    if op == "<":
        out = left < right
    elif op == "<=":
        out = left <= right
    elif op == ">":
        out = left > right
    elif op == ">=":
        out = left >= right
    elif op == "=":
        out = left == right
    elif op == "!=":
        out = left != right
    else:
        raise ValueError(f"unknown comparison {op!r}; allowed are {', '.join(OPERATORS)}")
    keep = np.asarray(out, np.bool_) & present(left)
    if isinstance(right, np.ndarray):
        keep &= present(right)
    return keep


@dataclass(frozen=True)
class FieldTest:
    """``field op other_field`` (both of one event, the other as ``factor * other_field +
    offset``) or ``field op literal``."""

    field: str
    op: str
    literal: float | int | str | bool | None = None
    other_field: str | None = None
    factor: float = 1.0
    offset: float = 0.0

    def __str__(self) -> str:
        right = self.other_field if self.other_field is not None else repr(self.literal)
        if self.factor != 1.0:
            right = f"{self.factor:g} * {right}"
        if self.offset:
            right = f"{right} {'+' if self.offset > 0 else '-'} {abs(self.offset):g}ms"
        return f"{self.field} {self.op} {right}"


def selection_name(relation: str, tests: tuple[FieldTest, ...]) -> str:
    """The index relation of the pairs a selection keeps: ``transfer`` (no tests) or
    ``transfer{amount >= 1000}`` (a name no query can write, so none collides)."""
    if not tests:
        return relation
    return f"{relation}{{{', '.join(sorted(str(t) for t in tests))}}}"


def events_name(relation: str, tests: tuple[FieldTest, ...]) -> str:
    """The index relation of the events a selection keeps: ``transfer{...}#events``."""
    return f"{selection_name(relation, tests)}#events"


#: The sides a vertex's degree in a selection's pairs is counted on: its successors (``out``)
#: or its predecessors (``in``).
DEGREE_SIDES = ("out", "in")


def degree_name(relation: str, tests: tuple[FieldTest, ...], side: str, least: int) -> str:
    """The unary index relation of the vertices with at least ``least`` distinct successors
    (``out``) or predecessors (``in``) in a selection's pairs: ``transfer#out>=5``."""
    if side not in DEGREE_SIDES or least < 1:
        raise ValueError(f"a degree bound is out or in and at least 1, not {side!r} {least}")
    return f"{selection_name(relation, tests)}#{side}>={least}"


#: The sides a time-ordered index keeps a selection's events by: their source or destination.
TIME_ORDERS = ("by_src", "by_dst")


def time_order_name(relation: str, tests: tuple[FieldTest, ...], side: str) -> str:
    """The time order keeping a selection's events by one end and time:
    ``transfer{...}#by_src`` holds ``(src, ts, eid)``, ``#by_dst`` ``(dst, ts, eid)``."""
    if side not in TIME_ORDERS:
        raise ValueError(f"a time order is by_src or by_dst, not {side!r}")
    return f"{selection_name(relation, tests)}#{side}"


def time_order_side(name: str) -> str | None:
    """``by_src`` or ``by_dst`` for a time-ordered index relation's name, else None."""
    side = name.rsplit("#", 1)[-1] if "#" in name else ""
    return side if side in TIME_ORDERS else None


def base_relation(name: str) -> str:
    """The event relation an index relation derives from (``transfer{..}#events``: transfer)."""
    return name.split("{", 1)[0].split("#", 1)[0]
