"""Vertex and event ids of a batch of decoded JSON values, checked and made a column at once.

:func:`checked_ids` looks at the set of the values' types first: all integers become an ``int64``
column in one conversion (which also checks the int64 range), all strings are checked by one
length pass; only a mixed column is checked value by value. Used by the batch decoders of
tuple records (:mod:`connectors.json_batch`) and event records (:mod:`connectors.event_batch`).
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from connectors.formats import MAX_ID_LENGTH
from core.records import INT64_MAX

#: A key a record does not have (never a JSON value).
MISSING: Any = object()

# Type codes of decoded JSON values (``type`` is exact: orjson makes no subclasses).
_INT, _STR, _OTHER = range(3)
_TYPE_CODES = {int: _INT, str: _STR}


def checked_ids(values: list[Any]) -> tuple[npt.NDArray[np.bool_] | None, npt.NDArray[Any]]:
    """Which values are vertex ids (strings of at most ``MAX_ID_LENGTH`` characters, integers
    within int64; None: all of them) and the values as a column: ``int64`` when all are
    integers, else ``object`` (as :func:`~core.records.id_column` makes them)."""
    n = len(values)
    kinds = set(map(type, values))
    if kinds == {int}:
        try:
            return None, np.array(values, np.int64)
        except OverflowError:
            pass
    elif kinds == {str} and max(map(len, values)) <= MAX_ID_LENGTH:
        return None, objects(values)
    codes = np.fromiter(map(_TYPE_CODES.get, map(type, values), repeat(_OTHER)), np.int8, n)
    items = objects(values)
    ok = codes == _STR
    if ok.any():
        ok[ok] = np.fromiter(map(len, items[ok]), np.int64, int(ok.sum())) <= MAX_ID_LENGTH
    ints = codes == _INT
    if ints.any():
        ints[ints] = items[ints] <= INT64_MAX  # orjson's integers are at least INT64_MIN
    ok |= ints
    if ok.all():
        return None, narrow(items)
    return ok, items


def objects(values: list[Any]) -> npt.NDArray[Any]:
    """The values as an ``object`` array (never a 2-d one, whatever they are)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def narrow(items: npt.NDArray[Any]) -> npt.NDArray[np.generic]:
    """An ``object`` column of valid ids as ``int64`` when they are all integers."""
    if items.dtype == object and set(map(type, items.tolist())) <= {int}:
        return items.astype(np.int64)
    return items
